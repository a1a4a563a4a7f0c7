"""List and abort incomplete S3 multipart uploads: the two calls obstore does not expose.

obstore 0.12 aborts the multipart uploads *it* fails, but a process killed mid-upload leaves
parts behind (billed, invisible to a plain listing). S3's ListMultipartUploads and
AbortMultipartUpload are not in obstore's Python API, so this module signs those two requests
itself (AWS Signature Version 4, stdlib only: urllib, hmac, hashlib). It needs static
credentials (access key + secret [+ session token]); with any other credential source it says
so and does nothing. It knows nothing about checkpoints.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["IncompleteUpload", "S3MultipartAdmin", "SweepUnavailable"]

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class SweepUnavailable(Exception):
    """The sweep cannot run here (no static credentials); the message says why. Internal only."""


@dataclass(frozen=True)
class IncompleteUpload:
    """One multipart upload that was started and neither completed nor aborted."""

    key: str
    upload_id: str
    initiated: _dt.datetime


class S3MultipartAdmin:
    """ListMultipartUploads / AbortMultipartUpload on one bucket, signed with SigV4."""

    def __init__(self, bucket: str, config: Mapping[str, object], timeout: float = 30.0) -> None:
        self._bucket = bucket
        self._key_id = str(config.get("access_key_id") or "")
        self._secret = str(config.get("secret_access_key") or "")
        self._token = str(config.get("session_token") or "")
        self._region = str(config.get("region") or "us-east-1")
        endpoint = str(config.get("endpoint") or "")
        if endpoint and not config.get("virtual_hosted_style_request"):
            self._base = f"{endpoint.rstrip('/')}/{urllib.parse.quote(bucket)}"
        elif endpoint:
            parts = urllib.parse.urlsplit(endpoint)
            self._base = f"{parts.scheme}://{bucket}.{parts.netloc}"
        else:
            self._base = f"https://{bucket}.s3.{self._region}.amazonaws.com"
        self._timeout = timeout

    def list(self, prefix: str) -> list[IncompleteUpload]:
        """Every incomplete upload whose key starts with `prefix` (follows pagination)."""
        uploads: list[IncompleteUpload] = []
        key_marker = upload_marker = ""
        while True:
            query = {"uploads": "", "prefix": prefix}
            if key_marker:
                query["key-marker"] = key_marker
                query["upload-id-marker"] = upload_marker
            root = ET.fromstring(self._request("GET", "", query))
            for item in root.iter(f"{_NS}Upload"):
                initiated = _dt.datetime.fromisoformat(
                    (item.findtext(f"{_NS}Initiated") or "").replace("Z", "+00:00"))
                if initiated.tzinfo is None:
                    initiated = initiated.replace(tzinfo=_dt.timezone.utc)
                uploads.append(IncompleteUpload(item.findtext(f"{_NS}Key") or "",
                                                item.findtext(f"{_NS}UploadId") or "", initiated))
            if (root.findtext(f"{_NS}IsTruncated") or "false").lower() != "true":
                return uploads
            key_marker = root.findtext(f"{_NS}NextKeyMarker") or ""
            upload_marker = root.findtext(f"{_NS}NextUploadIdMarker") or ""
            if not key_marker:
                return uploads

    def abort(self, upload: IncompleteUpload) -> None:
        """Aborts one upload; its parts are deleted by the server. An already-gone upload is fine."""
        try:
            self._request("DELETE", upload.key, {"uploadId": upload.upload_id})
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise

    # ------------------------------------------------------------ SigV4
    def _request(self, method: str, key: str, query: Mapping[str, str]) -> bytes:
        if not (self._key_id and self._secret):
            raise SweepUnavailable("listing incomplete multipart uploads needs static credentials "
                                   "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or storage_options)")
        path = urllib.parse.urlsplit(self._base).path + "/" + urllib.parse.quote(key, safe="/~")
        path = path.replace("//", "/") if key == "" else path
        host = urllib.parse.urlsplit(self._base).netloc
        canonical_query = "&".join(f"{urllib.parse.quote(k, safe='~')}={urllib.parse.quote(v, safe='~')}"
                                   for k, v in sorted(query.items()))
        now = _dt.datetime.now(_dt.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"host": host, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": amz_date}
        if self._token:
            headers["x-amz-security-token"] = self._token
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, path, canonical_query,
                               "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, _EMPTY_SHA256])
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key_bytes = ("AWS4" + self._secret).encode()
        for part in (day, self._region, "s3", "aws4_request"):
            key_bytes = hmac.new(key_bytes, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self._key_id}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        scheme = urllib.parse.urlsplit(self._base).scheme
        request = urllib.request.Request(f"{scheme}://{host}{path}?{canonical_query}", method=method,
                                         headers={k: v for k, v in headers.items() if k != "host"})
        with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310 - http(s) only
            return response.read()

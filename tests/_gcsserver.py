"""A GCS XML-API test server: a model of Google Cloud Storage on 127.0.0.1, in this process, with a request log.

A MODEL OF GCS, NOT GCS: written here from what obstore's GCS client (the object_store crate) sends
and reads, served by werkzeug on a free port. It keeps objects in memory with a generation per
object and answers: PUT (with `x-goog-if-generation-match`: 0 creates only, N replaces only
generation N, else 412; `x-goog-copy-source` copies), GET/HEAD (Range, If-Match, If-None-Match;
ETag = quoted MD5 hex, Last-Modified, x-goog-generation, Content-Length), DELETE, the XML
multipart upload (POST ?uploads, PUT ?partNumber&uploadId, POST ?uploadId, DELETE ?uploadId) and
the S3-compatible listing (GET /bucket?list-type=2 with prefix, delimiter, max-keys,
continuation-token, start-after). Real GCS is not reachable from the test machines; behaviour this
model does not show (consistency, rate limits, resumable uploads, the JSON API) is untested.

The client must never ask the GCE metadata server (169.254.169.254) for a token: `storage_options`
give a service-account key with `disable_oauth` and `gcs_base_url`, so no token request is made;
the request log records every request the server saw.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.utils import format_datetime, parsedate_to_datetime
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from tests._s3server import RequestLog, _Recorder

__all__ = ["GCSTestServer", "start_gcs_server", "gcs_environment"]

# a syntactically complete service-account key; never used to sign (disable_oauth), never a real secret
_FAKE_KEY = ("-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7AgEAAkEAvarstoretestonly\n"
             "-----END PRIVATE KEY-----\n")


@dataclass
class _Object:
    data: bytes
    generation: int
    modified: dt.datetime

    @property
    def etag(self) -> str:
        return '"' + hashlib.md5(self.data).hexdigest() + '"'


@dataclass
class _Upload:
    key: str
    parts: dict[int, bytes] = field(default_factory=dict)


class _GCSModel:
    """The WSGI application: buckets of objects, uploads in progress, one lock."""

    def __init__(self, buckets: Iterable[str]) -> None:
        self.buckets: dict[str, dict[str, _Object]] = {name: {} for name in buckets}
        self.uploads: dict[str, _Upload] = {}
        self.lock = threading.Lock()
        self._generation = 1_700_000_000_000_000
        self._upload_number = 0

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        path = urllib.parse.unquote(environ.get("PATH_INFO", ""))
        query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        bucket_name, _, key = path.lstrip("/").partition("/")
        with self.lock:
            status, out_headers, out = self._dispatch(method, bucket_name, key, query, headers, body)
        if method == "HEAD":
            out_headers.setdefault("Content-Length", "0")
            out = b""
        else:
            out_headers["Content-Length"] = str(len(out))
        start_response(status, list(out_headers.items()))
        return [out]

    # ------------------------------------------------------------------ dispatch
    def _dispatch(self, method: str, bucket_name: str, key: str, query: dict[str, str],
                  headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
        bucket = self.buckets.get(bucket_name)
        if bucket is None:
            return _error("404 Not Found", "NoSuchBucket", f"bucket {bucket_name!r}")
        if not key:
            if method == "GET":
                return self._list(bucket, query)
            return _error("405 Method Not Allowed", "MethodNotAllowed", method)
        if method == "POST" and "uploads" in query:
            self._upload_number += 1
            upload_id = f"upload-{self._upload_number}"
            self.uploads[upload_id] = _Upload(key)
            xml = (f"<InitiateMultipartUploadResult><Bucket>{escape(bucket_name)}</Bucket><Key>{escape(key)}</Key>"
                   f"<UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>")
            return "200 OK", {"Content-Type": "application/xml"}, xml.encode()
        if "uploadId" in query:
            return self._multipart(method, bucket, key, query, headers, body)
        if method == "PUT":
            source = headers.get("x-goog-copy-source")
            if source is not None:
                source_bucket, _, source_key = urllib.parse.unquote(source).lstrip("/").partition("/")
                found = self.buckets.get(source_bucket, {}).get(source_key)
                if found is None:
                    return _error("404 Not Found", "NoSuchKey", source)
                body = found.data
            return self._store(bucket, key, body, headers)
        found = bucket.get(key)
        if method == "DELETE":
            if found is None:
                return _error("404 Not Found", "NoSuchKey", key)
            del bucket[key]
            return "204 No Content", {}, b""
        if method in ("GET", "HEAD"):
            if found is None:
                return _error("404 Not Found", "NoSuchKey", key)
            return self._read(found, headers, method)
        return _error("405 Method Not Allowed", "MethodNotAllowed", method)

    def _store(self, bucket: dict[str, _Object], key: str, data: bytes,
               headers: dict[str, str]) -> tuple[str, dict[str, str], bytes]:
        expected = headers.get("x-goog-if-generation-match")
        current = bucket.get(key)
        if expected is not None:
            have = current.generation if current is not None else 0
            if int(expected) != have:
                return _error("412 Precondition Failed", "PreconditionFailed",
                              f"x-goog-if-generation-match {expected}, object has generation {have}")
        stored = _Object(data, self._next_generation(), dt.datetime.now(dt.timezone.utc).replace(microsecond=0))
        bucket[key] = stored
        return "200 OK", _object_headers(stored), b""

    def _read(self, found: _Object, headers: dict[str, str], method: str) -> tuple[str, dict[str, str], bytes]:
        if_match = headers.get("if-match")
        if if_match is not None and if_match not in ("*", found.etag):
            return _error("412 Precondition Failed", "PreconditionFailed", f"If-Match {if_match}")
        if_none = headers.get("if-none-match")
        if if_none is not None and if_none in ("*", found.etag):
            return "304 Not Modified", _object_headers(found), b""
        since = headers.get("if-unmodified-since")
        if since is not None and found.modified > parsedate_to_datetime(since):
            return _error("412 Precondition Failed", "PreconditionFailed", "If-Unmodified-Since")
        out = _object_headers(found)
        size = len(found.data)
        spec = headers.get("range")
        if spec is None:
            out["Content-Length"] = str(size)
            return "200 OK", out, found.data
        start, end = _parse_range(spec, size)
        if start is None or start >= size or end is None:
            out = {"Content-Range": f"bytes */{size}"}
            return _error("416 Requested Range Not Satisfiable", "InvalidRange", spec, out)
        part = found.data[start:end + 1]
        out["Content-Range"] = f"bytes {start}-{start + len(part) - 1}/{size}"
        out["Content-Length"] = str(len(part))
        return "206 Partial Content", out, part

    def _multipart(self, method: str, bucket: dict[str, _Object], key: str, query: dict[str, str],
                   headers: dict[str, str], body: bytes) -> tuple[str, dict[str, str], bytes]:
        upload = self.uploads.get(query["uploadId"])
        if upload is None or upload.key != key:
            return _error("404 Not Found", "NoSuchUpload", query["uploadId"])
        if method == "PUT":
            number = int(query.get("partNumber", "0"))
            upload.parts[number] = body
            return "200 OK", {"ETag": '"' + hashlib.md5(body).hexdigest() + '"'}, b""
        if method == "DELETE":
            del self.uploads[query["uploadId"]]
            return "204 No Content", {}, b""
        if method == "POST":
            listed = ElementTree.fromstring(body)
            numbers = [int(part.findtext("PartNumber") or "0") for part in listed.iter("Part")]
            if any(number not in upload.parts for number in numbers) or numbers != sorted(numbers):
                return _error("400 Bad Request", "InvalidPart", str(numbers))
            data = b"".join(upload.parts[number] for number in numbers)
            del self.uploads[query["uploadId"]]
            status, out, _ = self._store(bucket, key, data, headers)
            if not status.startswith("200"):
                return status, out, _
            xml = (f"<CompleteMultipartUploadResult><Key>{escape(key)}</Key><ETag>{escape(out['ETag'])}</ETag>"
                   "</CompleteMultipartUploadResult>")
            return "200 OK", {**out, "Content-Type": "application/xml"}, xml.encode()
        return _error("405 Method Not Allowed", "MethodNotAllowed", method)

    def _list(self, bucket: dict[str, _Object], query: dict[str, str]) -> tuple[str, dict[str, str], bytes]:
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        max_keys = int(query.get("max-keys", "1000"))
        after = query.get("start-after", "")
        token = query.get("continuation-token")
        if token:
            after = max(after, base64.urlsafe_b64decode(token.encode()).decode())
        entries: list[tuple[str, _Object | None]] = []
        seen_prefixes: set[str] = set()
        for name in sorted(bucket):
            if not name.startswith(prefix) or name <= after:
                continue
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                if cut >= 0:
                    common = name[:cut + len(delimiter)]
                    if common not in seen_prefixes and common > after:
                        seen_prefixes.add(common)
                        entries.append((common, None))
                    continue
            entries.append((name, bucket[name]))
        truncated = len(entries) > max_keys
        entries = entries[:max_keys]
        parts = ["<?xml version='1.0' encoding='UTF-8'?><ListBucketResult>",
                 f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(entries)}</KeyCount>",
                 f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        for name, found in entries:
            if found is None:
                parts.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
            else:
                stamp = found.modified.strftime("%Y-%m-%dT%H:%M:%S.000Z")
                parts.append(f"<Contents><Key>{escape(name)}</Key><Size>{len(found.data)}</Size>"
                             f"<LastModified>{stamp}</LastModified><ETag>{escape(found.etag)}</ETag></Contents>")
        if truncated:
            last = entries[-1][0]
            parts.append(f"<NextContinuationToken>{base64.urlsafe_b64encode(last.encode()).decode()}"
                         "</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return "200 OK", {"Content-Type": "application/xml"}, "".join(parts).encode()


def _object_headers(found: _Object) -> dict[str, str]:
    return {"ETag": found.etag, "x-goog-generation": str(found.generation), "x-goog-metageneration": "1",
            "Last-Modified": format_datetime(found.modified, usegmt=True),
            "Content-Length": str(len(found.data)), "Content-Type": "application/octet-stream"}


def _parse_range(spec: str, size: int) -> tuple[int | None, int | None]:
    """(first, last) byte of "bytes=a-b" / "bytes=a-" / "bytes=-n", last clipped to size - 1."""
    unit, _, span = spec.partition("=")
    first, _, last = span.partition("-")
    try:
        if unit.strip() != "bytes":
            return None, None
        if not first:
            count = int(last)
            return max(0, size - count), size - 1
        return int(first), min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None, None


def _error(status: str, code: str, message: str,
           extra: dict[str, str] | None = None) -> tuple[str, dict[str, str], bytes]:
    xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    return status, {**(extra or {}), "Content-Type": "application/xml"}, xml.encode()


@dataclass
class GCSTestServer:
    """A running GCS model: base URL, one bucket, the request log, and `stop()`."""

    endpoint: str
    bucket: str
    log: RequestLog
    stop: Callable[[], None]

    @property
    def service_account_key(self) -> str:
        """A service-account key (JSON) that points the client at this server and turns OAuth off."""
        import json

        return json.dumps({"gcs_base_url": self.endpoint, "disable_oauth": True,
                           "client_email": "varstore-test@example.invalid", "private_key": _FAKE_KEY,
                           "private_key_id": "varstore-test"})

    @property
    def storage_options(self) -> dict[str, object]:
        """storage_options for gs:// URLs that reach this server without any token request."""
        return {"service_account_key": self.service_account_key, "allow_http": True}


def start_gcs_server(bucket: str = "varstore-test") -> GCSTestServer:
    """Starts the GCS model on 127.0.0.1 (a free port) with `bucket`.

    Raises:
      ImportError: werkzeug is not installed.
    """
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    log = RequestLog()
    server = make_server("127.0.0.1", 0, _Recorder(_GCSModel([bucket]), log), threaded=True)
    port = server.socket.getsockname()[1]
    thread = threading.Thread(target=server.serve_forever, name="gcs-model", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    return GCSTestServer(f"http://127.0.0.1:{port}", bucket, log, stop)


def gcs_environment(server: GCSTestServer) -> dict[str, str]:
    """The standard environment variables a client uses to reach `server` (no token requests)."""
    return {"GOOGLE_SERVICE_ACCOUNT_KEY": server.service_account_key, "GOOGLE_ALLOW_HTTP": "true"}

"""Object-store URLs: recognise them, split them, resolve their settings, redact their secrets.

Knows the URL schemes (s3://, gs://, az://, abfs://), the standard environment variables
(AWS_*, GOOGLE_*, AZURE_STORAGE_*) and the `storage_options=` vocabulary. It never makes a
request and never imports the object-store client; object_store.py turns a `ResolvedURL`
into a client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from varstore.errors import InvalidURLError
from varstore.storage._url_names import SCHEMES as _SCHEMES, URL_PATTERN as _URL, is_url, url_from_path

__all__ = ["ObjectURL", "ResolvedURL", "is_url", "parse_url", "resolve", "Redactor", "url_from_path", "parse_storage_options"]

# storage_options keys a caller may pass, per provider; our spelling -> obstore config key.
_OPTION_KEYS: dict[str, dict[str, str]] = {
    "s3": {"endpoint": "endpoint", "region": "region", "access_key_id": "access_key_id",
           "secret_access_key": "secret_access_key", "session_token": "session_token",
           "virtual_hosted_style_request": "virtual_hosted_style_request",
           "skip_signature": "skip_signature", "request_payer": "request_payer"},
    "gcs": {"service_account": "service_account", "service_account_key": "service_account_key",
            "application_credentials": "application_credentials", "endpoint": "base_url",
            "skip_signature": "skip_signature"},
    "azure": {"account_name": "account_name", "account_key": "account_key",
              "sas_token": "sas_key", "bearer_token": "token", "endpoint": "endpoint",
              "use_emulator": "use_emulator", "client_id": "client_id",
              "client_secret": "client_secret", "tenant_id": "tenant_id",
              "skip_signature": "skip_signature"},
}
_COMMON_OPTIONS = {"allow_http"}

# environment variable -> obstore config key (read here, so a secret we pass on is one we can redact)
_ENVIRONMENT: dict[str, tuple[tuple[str, str], ...]] = {
    "s3": (("AWS_ACCESS_KEY_ID", "access_key_id"), ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
           ("AWS_SESSION_TOKEN", "session_token"), ("AWS_DEFAULT_REGION", "region"),
           ("AWS_REGION", "region"), ("AWS_ENDPOINT_URL_S3", "endpoint"),
           ("AWS_ENDPOINT_URL", "endpoint")),
    "gcs": (("GOOGLE_SERVICE_ACCOUNT", "service_account"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "application_credentials"),
            ("GOOGLE_SERVICE_ACCOUNT_KEY", "service_account_key")),
    # as obstore / object_store read them; for one key the later (more specific) variable wins
    "azure": (("AZURE_STORAGE_ACCOUNT_NAME", "account_name"), ("AZURE_STORAGE_MASTER_KEY", "account_key"),
              ("AZURE_STORAGE_ACCESS_KEY", "account_key"), ("AZURE_STORAGE_ACCOUNT_KEY", "account_key"),
              ("AZURE_STORAGE_SAS_TOKEN", "sas_key"), ("AZURE_STORAGE_SAS_KEY", "sas_key"),
              ("AZURE_STORAGE_TOKEN", "token"), ("AZURE_CLIENT_ID", "client_id"),
              ("AZURE_STORAGE_CLIENT_ID", "client_id"), ("AZURE_CLIENT_SECRET", "client_secret"),
              ("AZURE_STORAGE_CLIENT_SECRET", "client_secret"), ("AZURE_TENANT_ID", "tenant_id"),
              ("AZURE_STORAGE_TENANT_ID", "tenant_id"), ("AZURE_ENDPOINT", "endpoint"),
              ("AZURE_STORAGE_ENDPOINT", "endpoint"), ("AZURE_STORAGE_USE_EMULATOR", "use_emulator")),
}
# Azurite's default address; object_store reads AZURITE_BLOB_STORAGE_URL itself when use_emulator is set
_AZURITE_DEFAULT_URL = "http://127.0.0.1:10000"
# obstore config keys whose values are secrets. Not access_key_id: it names the key (AWS prints it in
# request logs and consoles), and test credentials such as `test` would blank out bucket and key names.
_SECRET_KEYS = frozenset({"secret_access_key", "session_token", "service_account_key", "account_key",
                          "sas_key", "token", "client_secret"})
# characters that continue a word, a name or a path segment: a secret is replaced only where none
# touches it, so a secret `test` leaves `s3://varstore-test/guide/latest` alone
_TOKEN_CHARACTERS = r"A-Za-z0-9_./+-"
# credentials that travel in URLs or headers even when we never saw their value
_SIGNATURE_PATTERNS = (
    re.compile(r"(?i)(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s\"'<>]+"),
    re.compile(r"(?i)((?:^|[?&])sig=)[^&\s\"'<>]+"),
    re.compile(r"(?i)(Authorization:\s*)[^\r\n]+"),
    re.compile(r"(?i)(Signature=)[0-9a-f]{16,}"),
)
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class ObjectURL:
    """One object-store location: `s3://bucket/runs/a7/model.h5` -> ("s3", "bucket", "runs/a7/model.h5").

    `key` has no leading or trailing '/' ("" for the bucket root).
    """

    scheme: str
    bucket: str
    key: str

    @property
    def provider(self) -> str:
        """"s3", "gcs" or "azure"."""
        return _SCHEMES[self.scheme]

    def child(self, name: str) -> ObjectURL:
        """The URL of `name` under this one (`name` is a '/'-separated relative key)."""
        name = name.strip("/")
        return ObjectURL(self.scheme, self.bucket, f"{self.key}/{name}" if self.key else name)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"


def parse_url(url: str) -> ObjectURL:
    """Splits an object-store URL into scheme, bucket (container) and key.

    `abfs://container@account.dfs.core.windows.net/key` keeps `container` as the bucket.

    Raises:
      InvalidURLError: not a URL of a known scheme, no bucket, or a key with '..' or '//' parts.
    """
    match = _URL.match(url) if isinstance(url, str) else None
    if match is None or match.group("scheme").lower() not in _SCHEMES:
        raise InvalidURLError(f"{url!r} is not an object-store URL; expected one of "
                              f"{', '.join(s + '://bucket/key' for s in ('s3', 'gs', 'az'))}")
    scheme = match.group("scheme").lower()
    bucket, _, key = match.group("rest").partition("/")
    if "@" in bucket:  # abfs://container@account.dfs.core.windows.net
        bucket = bucket.split("@", 1)[0]
    key = key.strip("/")
    if not bucket or any(c in bucket for c in "?#\\ "):
        raise InvalidURLError(f"{url!r} names no bucket; expected {scheme}://BUCKET/key")
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidURLError(f"{url!r} has an empty, '.' or '..' part in its key {key!r}; "
                              "object keys here are plain '/'-separated names")
    return ObjectURL(scheme, bucket, key)


class Redactor:
    """Removes known secret values and request signatures from any text.

    Every message, repr and log line built in varstore/storage passes through `redact`.
    """

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        # longest first, so a secret that contains another is removed whole
        self._secrets = tuple(sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True))
        self._pattern = re.compile(
            rf"(?<![{_TOKEN_CHARACTERS}])(?:{'|'.join(map(re.escape, self._secrets))})(?![{_TOKEN_CHARACTERS}])"
        ) if self._secrets else None

    def redact(self, text: str) -> str:
        """`text` with every known secret replaced by '***' and signatures/Authorization headers cut.

        A secret is replaced where it stands as a whole value (no letter, digit,
        '_', '.', '/', '+' or '-' right before or after it), so a short test
        secret inside a bucket, key or word is left alone.
        """
        if self._pattern is not None:
            text = self._pattern.sub("***", text)
        for pattern in _SIGNATURE_PATTERNS:
            text = pattern.sub(r"\1***", text)
        return text

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secrets)"


@dataclass(frozen=True)
class ResolvedURL:
    """A URL with its provider settings, ready for a client.

    `config` holds obstore config keys (secrets included: never print it; `repr` hides it);
    `allow_http` is True for an http:// endpoint; `redactor` knows every secret in `config`.
    """

    url: ObjectURL
    config: Mapping[str, object] = field(repr=False)
    allow_http: bool
    redactor: Redactor = field(repr=False)

    @property
    def endpoint(self) -> str | None:
        """The custom endpoint (S3-compatible server, emulator), or None for the provider's own.

        For Azure's emulator (`use_emulator`), the account URL the client will use:
        `$AZURITE_BLOB_STORAGE_URL` (default http://127.0.0.1:10000) plus the account name.
        """
        value = self.config.get("endpoint") or self.config.get("base_url")
        if not value and self.url.provider == "azure" and _is_true(self.config.get("use_emulator")):
            base = (os.environ.get("AZURITE_BLOB_STORAGE_URL") or _AZURITE_DEFAULT_URL).rstrip("/")
            return f"{base}/{self.config.get('account_name') or 'devstoreaccount1'}"
        return str(value) if value else None


def _is_true(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in _TRUE)


def resolve(url: str | ObjectURL, storage_options: Mapping[str, object] | None = None,
            environ: Mapping[str, str] | None = None) -> ResolvedURL:
    """Settings for `url`: the standard environment first, then `storage_options` on top.

    Args:
      url: an object-store URL.
      storage_options: our keys per provider, e.g. for s3 {"endpoint": "http://127.0.0.1:9000",
        "region": "us-east-1", "access_key_id": ..., "secret_access_key": ..., "session_token": ...};
        gs: service_account / service_account_key / application_credentials; az: account_name,
        account_key, sas_token, endpoint (path-style "http://127.0.0.1:10000/devstoreaccount1"
        for Azurite), use_emulator. "allow_http" for any of them. Azure's environment:
        AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY (or _ACCESS_KEY / _MASTER_KEY),
        AZURE_STORAGE_SAS_KEY (_SAS_TOKEN), AZURE_STORAGE_TOKEN, AZURE_[STORAGE_]CLIENT_ID /
        CLIENT_SECRET / TENANT_ID, AZURE_STORAGE_ENDPOINT (AZURE_ENDPOINT), AZURE_STORAGE_USE_EMULATOR,
        AZURE_ALLOW_HTTP.
      environ: the environment to read (os.environ by default).

    Raises:
      InvalidURLError: a malformed URL, or a storage_options key this provider does not know
        (named, with the keys it does know).
    """
    parsed = url if isinstance(url, ObjectURL) else parse_url(url)
    env = os.environ if environ is None else environ
    provider = parsed.provider
    config: dict[str, object] = {}
    for variable, key in _ENVIRONMENT[provider]:
        if env.get(variable):
            config[key] = env[variable]
    allow_http = env.get("AWS_ALLOW_HTTP" if provider == "s3" else
                         "AZURE_ALLOW_HTTP" if provider == "azure" else "GOOGLE_ALLOW_HTTP",
                         "").strip().lower() in _TRUE
    known = _OPTION_KEYS[provider]
    for key, value in (storage_options or {}).items():
        if key in _COMMON_OPTIONS:
            allow_http = bool(value)
        elif key in known:
            config[known[key]] = value
        else:
            raise InvalidURLError(f"storage_options key {key!r} is not known for {parsed}; "
                                  f"known keys: {', '.join(sorted(set(known) | _COMMON_OPTIONS))}")
    endpoint = config.get("endpoint") or config.get("base_url")
    if isinstance(endpoint, str) and endpoint.lower().startswith("http://"):
        allow_http = True  # an explicit http endpoint (a local server) is the caller's choice
    if provider == "azure" and _is_true(config.get("use_emulator")):
        allow_http = True  # Azurite serves plain HTTP; object_store allows it for the emulator too
    secrets = tuple(str(v) for k, v in config.items() if k in _SECRET_KEYS and v)
    # the client library may read the process environment itself: know those secrets too
    secrets += tuple(os.environ[variable] for pairs in _ENVIRONMENT.values() for variable, key in pairs
                     if key in _SECRET_KEYS and os.environ.get(variable))
    return ResolvedURL(parsed, config, allow_http, Redactor(secrets))


def parse_storage_options(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`storage_options` from "KEY=VALUE" texts (the CLI's --storage-option); later keys win.

    Raises:
      InvalidURLError: a text without "=" or without a key; the text is not shown (it may be a secret).
    """
    options: dict[str, str] = {}
    for number, item in enumerate(items, start=1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidURLError(f"storage option #{number} is not of the form KEY=VALUE "
                                  f"(its text is not shown: it may hold a secret)")
        options[key.strip()] = value
    return options

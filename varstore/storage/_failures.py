"""Object-store failures: which are transient (worth a retry), and the typed error each one becomes.

Knows obstore's exception classes (imported lazily) and varstore's error classes; every message
it builds passes the caller's redactor and names the URL. It makes no requests.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from varstore.errors import ConditionalWriteError, ObjectChangedError, ObjectNotFoundError, ObjectStoreError
from varstore.storage._s3_multipart import SweepUnavailable

__all__ = ["is_transient", "typed_error"]


def typed_error(err: BaseException, operation: str, url: str, redact: Callable[[str], str]) -> ObjectStoreError:
    """The varstore error for a failed `operation` ("GET", "PUT", ...) on `url`; its message is redacted.

    404 -> ObjectNotFoundError; a failed precondition -> ObjectChangedError for a read (GET with
    If-Match), ConditionalWriteError for a write; refused credentials
    and everything else -> ObjectStoreError with the attempts made (`err.varstore_attempts`).
    """
    import obstore.exceptions as ox

    text = str(err)
    detail = redact(_first_line(text) if text else type(err).__name__)[:500]
    attempts = getattr(err, "varstore_attempts", 1)
    status = _status(text)
    if isinstance(err, (ox.NotFoundError, FileNotFoundError)):
        return ObjectNotFoundError(redact(f"no object at {url} ({operation}); check the URL"))
    if isinstance(err, ox.PreconditionError) and operation == "GET":
        return ObjectChangedError(redact(
            f"{url} changed while it was being read: it is no longer the object that was opened (another "
            "save replaced it); open it again"))
    if operation == "LIST" and status == 404:
        # S3 (NoSuchBucket) and Azure (ContainerNotFound) answer a listing of a missing bucket with 404
        bucket = url.split("://", 1)[-1].split("/", 1)[0]
        return ObjectStoreError(redact(
            f"LIST {url} failed: the bucket (container) {bucket!r} does not exist or is not visible with "
            f"these credentials: {detail}; create it or check the URL"))
    if isinstance(err, (ox.PreconditionError, ox.AlreadyExistsError)):
        what = "already exists" if isinstance(err, ox.AlreadyExistsError) else "changed since it was read"
        return ConditionalWriteError(redact(
            f"conditional write to {url} lost the race: the object {what} (another writer won); "
            "re-read it and decide again"))
    if isinstance(err, (ox.PermissionDeniedError, ox.UnauthenticatedError,
                        PermissionError)) or status in (401, 403):  # a LIST's refusal is a generic error
        return ObjectStoreError(redact(
            f"{operation} {url} was refused: {detail}; check the credentials (AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*) or storage_options"))
    return ObjectStoreError(redact(
        f"{operation} {url} failed after {attempts} attempt(s): {detail}"))


def _status(text: str) -> int | None:
    """The HTTP status in an obstore message ("... status code: 404 ..."), None when there is none."""
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def _first_line(text: str) -> str:
    """The message's first line without a dangling XML prolog, with the service's error code if it sent one
    (Azure's "AuthorizationFailure", S3's "NoSuchBucket")."""
    line = text.splitlines()[0]
    line = line.split(": <?xml", 1)[0].rstrip()
    code = _ERROR_CODE.search(text)
    return f"{line} ({code.group(1)})" if code else line


_STATUS = re.compile(r"status code: (\d{3})")
_ERROR_CODE = re.compile(r"<Code>([A-Za-z0-9]{1,64})</Code>")


def is_transient(err: BaseException) -> bool:
    """Dropped connections, timeouts, 5xx, 408 and 429 are transient; 4xx answers and config errors are not."""
    try:
        import obstore.exceptions as ox
    except ImportError:
        return False
    if isinstance(err, (ox.NotFoundError, ox.PreconditionError, ox.AlreadyExistsError, ox.PermissionDeniedError,
                        ox.UnauthenticatedError, ox.InvalidPathError, ox.NotSupportedError,
                        ox.UnknownConfigurationKeyError, ox.NotModifiedError, FileNotFoundError,
                        PermissionError, FileExistsError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(err, SweepUnavailable):
        return False
    text = str(err)
    for code in ("400", "403", "404", "405", "409", "411", "412", "416"):
        if f"status code: {code}" in text or f"HTTP Error {code}" in text:
            return False
    return isinstance(err, (ox.BaseError, OSError, TimeoutError, ConnectionError))

"""Object-store failures: which are transient (worth a retry), and the typed error each one becomes.

Knows obstore's exception classes (imported lazily) and varstore's error classes; every message
it builds passes the caller's redactor and names the URL. It makes no requests.
"""

from __future__ import annotations

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

    detail = redact(str(err).splitlines()[0] if str(err) else type(err).__name__)[:500]
    attempts = getattr(err, "varstore_attempts", 1)
    if isinstance(err, (ox.NotFoundError, FileNotFoundError)):
        return ObjectNotFoundError(redact(f"no object at {url} ({operation}); check the URL"))
    if isinstance(err, ox.PreconditionError) and operation == "GET":
        return ObjectChangedError(redact(
            f"{url} changed while it was being read: it is no longer the object that was opened (another "
            "save replaced it); open it again"))
    if isinstance(err, (ox.PreconditionError, ox.AlreadyExistsError)):
        what = "already exists" if isinstance(err, ox.AlreadyExistsError) else "changed since it was read"
        return ConditionalWriteError(redact(
            f"conditional write to {url} lost the race: the object {what} (another writer won); "
            "re-read it and decide again"))
    if isinstance(err, (ox.PermissionDeniedError, ox.UnauthenticatedError,
                        PermissionError)):
        return ObjectStoreError(redact(
            f"{operation} {url} was refused: {detail}; check the credentials (AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*) or storage_options"))
    return ObjectStoreError(redact(
        f"{operation} {url} failed after {attempts} attempt(s): {detail}"))


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

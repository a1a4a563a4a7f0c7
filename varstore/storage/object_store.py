"""ObjectStoreClient: every request varstore makes to s3://, gs:// and az://, with retries and typed errors.

The only module that calls obstore (imported lazily; a missing one raises MissingDependencyError
naming the `varstore[s3]` extra). Names are keys relative to the client's root URL. It knows
nothing about checkpoints, manifests or formats; object_storage.py and the checkpoint layer build
on it. Every message it raises names the URL and has passed through the Redactor.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from varstore.errors import (ConditionalWriteError, InvalidURLError, MissingDependencyError,
                             ObjectNotFoundError, ObjectStoreError)
from varstore.storage._failures import is_transient, typed_error
from varstore.storage._retry import RetryPolicy, call_with_retries
from varstore.storage._s3_multipart import IncompleteUpload, S3MultipartAdmin, SweepUnavailable
from varstore.storage._urls import ObjectURL, ResolvedURL, is_url, parse_url, resolve
from varstore.storage.object_info import ObjectInfo  # re-exported: the client returns it

__all__ = ["ObjectInfo", "ObjectStoreClient", "ObjectURL", "RetryPolicy", "DEFAULT_PART_SIZE", "DEFAULT_MAX_IN_FLIGHT",
           "is_url", "parse_url"]

_log = logging.getLogger("varstore.storage")

DEFAULT_PART_SIZE = 8 * 1024 * 1024   # bytes per multipart part (S3 minimum 5 MiB except the last)
DEFAULT_MAX_IN_FLIGHT = 8             # requests one client call keeps in flight at most
MIN_PART_SIZE = 5 * 1024 * 1024       # S3 refuses smaller parts (except the last)

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")


def _obstore() -> ModuleType:
    try:
        import obstore
        import obstore.exceptions  # noqa: F401 - the error classes
        import obstore.store  # noqa: F401 - the store classes
    except ImportError as err:
        raise MissingDependencyError("object-store URLs (s3://, gs://, az://) need obstore: "
                                     "pip install 'varstore[s3]'") from err
    return obstore


class ObjectStoreClient:
    """Requests to one bucket under one root URL, with retries, bounded concurrency and typed errors.

    Args:
      url: root, e.g. "s3://bucket/runs/a7"; names passed to methods are keys under it.
      storage_options: see varstore.storage._urls.resolve (endpoint, region, credentials, allow_http).
      retry: how often to retry transient failures (5xx, dropped connections, timeouts).
      part_size: bytes per multipart part, >= 5 MiB (S3's minimum).
      max_in_flight: requests one call keeps in flight at most (multipart parts, put_many objects).
      environ: environment to read credentials from (os.environ by default).

    Raises:
      InvalidURLError: malformed URL, unknown storage_options key, part_size < 5 MiB or max_in_flight < 1.
      MissingDependencyError: obstore is not installed.
    """

    def __init__(self, url: str | ObjectURL, storage_options: Mapping[str, object] | None = None, *,
                 retry: RetryPolicy | None = None, part_size: int = DEFAULT_PART_SIZE,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, environ: Mapping[str, str] | None = None) -> None:
        self._resolved: ResolvedURL = resolve(url, storage_options, environ)
        if part_size < MIN_PART_SIZE or max_in_flight < 1:
            raise InvalidURLError(f"client for {self._resolved.url}: part_size must be >= {MIN_PART_SIZE} bytes "
                                  f"(S3's minimum part) and max_in_flight >= 1, got {part_size} and {max_in_flight}")
        self._retry = retry or RetryPolicy()
        self.part_size = part_size
        self.max_in_flight = max_in_flight
        self._store = self._make_store()
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()   # operation -> requests started (retries included)
        self.bytes_read = 0
        self.bytes_written = 0

    # ------------------------------------------------------------- identity
    @property
    def url(self) -> ObjectURL:
        """The root URL (no credentials in it)."""
        return self._resolved.url

    def url_of(self, name: str) -> str:
        """The full URL of `name`, for messages."""
        return str(self.url.child(name)) if name else str(self.url)

    def redact(self, text: str) -> str:
        """`text` with every credential this client knows replaced by '***'."""
        return self._resolved.redactor.redact(text)

    def __repr__(self) -> str:
        endpoint = self._resolved.endpoint
        return f"ObjectStoreClient({str(self.url)!r}{', endpoint=' + repr(endpoint) if endpoint else ''})"

    # ---------------------------------------------------------------- reads
    def get(self, name: str) -> bytes:
        """The whole object.

        Raises:
          ObjectNotFoundError: no object at the URL.  ObjectStoreError: failed after retries.
        """
        obs = _obstore()
        data = self._call("GET", name, lambda: bytes(obs.get(self._store, self._key(name)).bytes()))
        self._add_read(len(data))
        return data

    def get_range(self, name: str, offset: int, length: int, out: memoryview | bytearray | None = None) -> memoryview:
        """`length` bytes at `offset` with one ranged GET, into `out` when given (one copy).

        Args:
          out: writable buffer of at least `length` bytes; a new bytearray when None.

        Returns:
          A memoryview of exactly `length` bytes (over `out` when given).

        Raises:
          ObjectNotFoundError; ObjectStoreError when the object is shorter than offset + length
          (a truncated object) or after retries.
        """
        if length == 0:
            return memoryview(out if out is not None else bytearray())[:0]
        target = memoryview(out if out is not None else bytearray(length)).cast("B")
        if len(target) < length:
            raise ObjectStoreError(f"ranged read of {self.url_of(name)}: the buffer has {len(target)} bytes, "
                                   f"{length} were requested; pass a buffer of at least `length` bytes")
        target[:length] = self.get_range_view(name, offset, length)
        return target[:length]

    def get_range_view(self, name: str, offset: int, length: int, *, etag: str | None = None) -> memoryview:
        """`length` bytes at `offset` with one ranged GET, as a read-only view of the response buffer
        (no copy here: the caller copies out what it needs, once).

        Args:
          etag: the ETag the object had when it was opened: the GET carries If-Match, so bytes of a
            replaced object are refused instead of mixed with the old one's.

        Raises:
          ObjectNotFoundError; ObjectChangedError: `etag` given and the object is no longer that version;
          ObjectStoreError when the object is shorter than offset + length, or after retries.
        """
        if length == 0:
            return memoryview(b"")
        obs = _obstore()
        key = self._key(name)
        if etag is None:
            data = self._call("GET", name, lambda: obs.get_range(self._store, key, start=offset, length=length))
        else:
            options = {"range": (offset, offset + length), "if_match": etag}
            data = self._call("GET", name, lambda: obs.get(self._store, key, options=options).bytes())
        got = memoryview(data).cast("B")
        if len(got) != length:
            raise ObjectStoreError(self.redact(
                f"ranged read of {self.url_of(name)} bytes [{offset}, {offset + length}) returned {len(got)} "
                "bytes; the object is shorter than its index says (truncated upload?)"))
        self._add_read(length)
        return got

    def get_head(self, name: str, length: int) -> tuple[ObjectInfo, memoryview]:
        """The object's size and ETag with its first min(`length`, size) bytes: ONE ranged GET, no HEAD
        (opening a single-file checkpoint needs all three). An empty object answers any range with
        416: that costs a HEAD more.

        Raises:
          ObjectNotFoundError: no object at the URL.  ObjectStoreError: failed after retries.
        """
        obs, key = _obstore(), self._key(name)
        try:
            result = self._call("GET", name, lambda: obs.get(self._store, key, options={"range": (0, length)}))
            info, view = self._info(result.meta), memoryview(result.bytes()).cast("B")
        except ObjectNotFoundError:
            raise
        except ObjectStoreError:
            info = self.head(name)
            if info.size:
                raise
            return info, memoryview(b"")
        if len(view) != min(length, info.size):
            raise ObjectStoreError(self.redact(
                f"ranged read of {self.url_of(name)} bytes [0, {min(length, info.size)}) returned {len(view)} bytes"))
        self._add_read(len(view))
        return info, view

    def head(self, name: str) -> ObjectInfo:
        """Size, last_modified and etag of one object.  Raises ObjectNotFoundError when absent."""
        obs = _obstore()
        meta = self._call("HEAD", name, lambda: obs.head(self._store, self._key(name)))
        return self._info(meta)

    def size(self, name: str) -> int:
        """Bytes in the object.  Raises ObjectNotFoundError when absent."""
        return self.head(name).size

    def exists(self, name: str) -> bool:
        """True when an object is at `name` (a HEAD; a 'directory' prefix is not an object)."""
        try:
            self.head(name)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Every object under `prefix` (a '/'-separated key prefix relative to the root), sorted by name.

        `prefix` "a/b" lists "a/b/..." objects only, never "a/bc".
        """
        obs = _obstore()
        key = self._key(prefix)

        def run() -> builtins.list[ObjectInfo]:
            found: builtins.list[ObjectInfo] = []
            for chunk in obs.list(self._store, key or None):
                found.extend(self._info(meta) for meta in chunk)
            return found

        return sorted(self._call("LIST", prefix, run), key=lambda info: info.name)

    def list_children(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectInfo]]:
        """One level under `prefix`: (child "directories", objects directly there), like `ls`.

        The manager lists its step prefixes this way without listing every chunk object.
        Returns names relative to the root, directories without a trailing '/', both sorted.
        """
        obs = _obstore()
        key = self._key(prefix)
        root = self.url.key + "/" if self.url.key else ""
        result = self._call("LIST", prefix, lambda: obs.list_with_delimiter(self._store, key or None))
        directories = sorted(str(p)[len(root):].rstrip("/") for p in result["common_prefixes"])
        objects = sorted((self._info(meta) for meta in result["objects"]), key=lambda info: info.name)
        return directories, objects

    # --------------------------------------------------------------- writes
    def put(self, name: str, data: Buffer) -> str | None:
        """Writes a small object in one PUT (overwriting). Returns the new etag."""
        return self._put(name, data, "overwrite")[0]

    def put_if_absent(self, name: str, data: Buffer) -> str | None:
        """Creates `name` only if no object is there (If-None-Match: *). Returns the new etag.

        Writing the same bytes that are already there counts as success (that is how a retried
        request whose first response was lost is told apart from another writer): put content
        that identifies the writer (a unique token in a manifest) where that matters.

        Raises:
          ConditionalWriteError: an object already exists (another writer won).
        """
        return self._put(name, data, "create")[0]

    def put_if_match(self, name: str, data: Buffer, etag: str, version: str | None = None) -> str | None:
        """Replaces `name` only if its etag is still `etag` (If-Match). Returns the new etag.

        As put_if_absent, finding exactly `data` there already counts as success.

        Args:
          version: the object's version (ObjectInfo.version) read with `etag`; GCS refuses a
            conditional replace without it (it matches on the generation, not the ETag).

        Raises:
          ConditionalWriteError: the object changed (or vanished) since `etag` was read.
        """
        return self.put_if_version(name, data, etag, version)[0]

    def put_if_version(self, name: str, data: Buffer, etag: str | None,
                       version: str | None = None) -> tuple[str | None, str | None]:
        """put_if_absent (`etag` None) or put_if_match, returning the new object's (etag, version).

        The pair is what the next conditional replace of `name` needs on every provider.

        Raises:
          ConditionalWriteError: the condition failed (another writer won).
        """
        if etag is None:
            return self._put(name, data, "create")
        mode = {"e_tag": etag} if version is None else {"e_tag": etag, "version": version}
        return self._put(name, data, mode)

    def put_multipart(self, name: str, source: Callable[[], Iterable[Buffer]] | str | Path, *,
                      max_in_flight: int | None = None) -> str | None:
        """Uploads a large object as a multipart upload with bounded memory.

        Memory: at most about (max_in_flight + 1) * part_size bytes are held, whatever the
        object's size; parts are pulled from `source` lazily. A failed upload is aborted by the
        client (its parts deleted); a killed process leaves an incomplete upload that
        `abort_incomplete_uploads` sweeps.

        Args:
          source: a local file path, or a callable returning a fresh iterable of byte chunks
            (called again for each retry, so a retry re-reads from the start).
          max_in_flight: parts uploaded at once (default: the client's max_in_flight).

        Returns:
          The etag of the completed object.
        """
        obs = _obstore()
        part_size = self.part_size
        opener: Callable[[], Iterable[Buffer]]
        if isinstance(source, (str, Path)):
            path = Path(source)

            def opener() -> Iterator[bytes]:
                with path.open("rb") as handle:
                    while chunk := handle.read(part_size):
                        yield chunk
        else:
            opener = source

        written = 0

        def counted() -> Iterator[Buffer]:
            nonlocal written
            written = 0
            for chunk in opener():
                written += memoryview(chunk).nbytes
                yield chunk

        result = self._call("PUT", name, lambda: obs.put(
            self._store, self._key(name), counted(), use_multipart=True, chunk_size=part_size,
            max_concurrency=max_in_flight or self.max_in_flight))
        self._add_written(written)
        return result.get("e_tag")

    def put_many(self, items: Iterable[tuple[str, Buffer]]) -> int:
        """Uploads many small objects concurrently, at most `max_in_flight` requests at a time.

        `items` is consumed lazily, so at most max_in_flight objects are held at once. Stops at the
        first failure (after retries), waits for requests already in flight, and raises it.

        Returns:
          The number of objects written.
        """
        count = 0
        with ThreadPoolExecutor(max_workers=self.max_in_flight, thread_name_prefix="varstore-put") as pool:
            pending: set[Future[str | None]] = set()
            try:
                for name, data in items:
                    if len(pending) >= self.max_in_flight:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for future in done:
                            future.result()
                            count += 1
                    pending.add(pool.submit(self.put, name, data))
                for future in pending:
                    future.result()
                    count += 1
            finally:
                for future in pending:
                    future.cancel()
        return count

    def delete(self, names: Sequence[str]) -> None:
        """Deletes objects, batched. An absent one is no error: S3 answers success, Azure a 404, and a
        batch that fails "not found" is redone one object at a time, skipping the absent ones."""
        obs = _obstore()
        for start in range(0, len(names), 1000):
            batch = names[start:start + 1000]
            try:
                keys = [self._key(n) for n in batch]
                self._call("DELETE", batch[0], functools.partial(obs.delete, self._store, keys))
            except ObjectNotFoundError:
                for name in batch:
                    with contextlib.suppress(ObjectNotFoundError):
                        self._call("DELETE", name, functools.partial(obs.delete, self._store, self._key(name)))

    # ------------------------------------------------ incomplete multipart uploads
    def incomplete_uploads(self, prefix: str = "") -> builtins.list[tuple[str, _dt.datetime]]:
        """(name, initiated) of multipart uploads under `prefix` never completed nor aborted.

        S3 only (signed by _s3_multipart; obstore has no such call). Returns [] for gs:// and az://
        (see docs/guide/object-storage.md: Azure discards uncommitted blocks after 7 days; GCS
        needs a lifecycle rule) and when no static credentials are configured.
        """
        root = self.url.key + "/" if self.url.key else ""
        return [(upload.key[len(root):], upload.initiated) for upload, _ in self._uploads(prefix)]

    def abort_incomplete_uploads(self, prefix: str = "", older_than: float = 3600.0,
                                 now: _dt.datetime | None = None) -> builtins.list[str]:
        """Aborts incomplete multipart uploads under `prefix` initiated more than `older_than` seconds ago.

        The grace period protects a concurrent writer's upload in progress. Returns the names aborted.
        """
        now = now or _dt.datetime.now(_dt.timezone.utc)
        root = self.url.key + "/" if self.url.key else ""
        aborted: builtins.list[str] = []
        for upload, admin in self._uploads(prefix):
            if (now - upload.initiated).total_seconds() >= older_than:
                name = upload.key[len(root):]
                self._call("ABORT-UPLOAD", name, functools.partial(admin.abort, upload))
                aborted.append(name)
        return aborted

    def _uploads(self, prefix: str) -> builtins.list[tuple[IncompleteUpload, S3MultipartAdmin]]:
        """Incomplete uploads under `prefix`, each with the admin that can abort it; [] off S3 or unsigned."""
        if self.url.provider != "s3":
            return []
        admin = S3MultipartAdmin(self.url.bucket, self._resolved.config, timeout=self._retry.timeout)
        try:
            uploads = self._call("LIST-UPLOADS", prefix, lambda: admin.list(self._key(prefix)))
        except SweepUnavailable as err:
            _log.info("%s", self.redact(f"not sweeping {self.url_of(prefix)}: {err}"))
            return []
        return [(upload, admin) for upload in uploads]

    # ------------------------------------------------------------- internals
    def _make_store(self) -> object:
        obs = _obstore()
        stores = obs.store
        retry = self._retry
        retry_config = {"max_retries": retry.client_retries,
                        "backoff": {"init_backoff": _dt.timedelta(seconds=retry.initial_backoff),
                                    "max_backoff": _dt.timedelta(seconds=retry.max_backoff), "base": 2},
                        "retry_timeout": _dt.timedelta(seconds=retry.timeout)}
        client_options = {"allow_http": self._resolved.allow_http,
                          "timeout": _dt.timedelta(seconds=retry.timeout),
                          "connect_timeout": _dt.timedelta(seconds=min(10.0, retry.timeout))}
        config = dict(self._resolved.config)
        kind = {"s3": stores.S3Store, "gcs": stores.GCSStore, "azure": stores.AzureStore}[self.url.provider]
        try:
            return kind(self.url.bucket, config=config, client_options=client_options, retry_config=retry_config)
        except Exception as err:  # obstore raises its own config errors
            detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ObjectStoreError(self.redact(
                f"cannot configure a client for {self.url}: {detail}; check the endpoint, region and "
                "credentials in the environment or storage_options")) from None

    def _key(self, name: str) -> str:
        name = name.strip("/")
        if not self.url.key:
            return name
        return f"{self.url.key}/{name}" if name else self.url.key

    def _info(self, meta: Mapping[str, object]) -> ObjectInfo:
        root = self.url.key + "/" if self.url.key else ""
        path = str(meta["path"])
        return ObjectInfo(path[len(root):] if path.startswith(root) else path, int(meta["size"]),  # type: ignore[call-overload]
                          meta["last_modified"], meta.get("e_tag"), meta.get("version"))  # type: ignore[arg-type]

    def _put(self, name: str, data: Buffer, mode: object) -> tuple[str | None, str | None]:
        obs = _obstore()
        size = memoryview(data).nbytes
        try:
            result = self._call("PUT", name, lambda: obs.put(self._store, self._key(name), data, mode=mode,
                                                              use_multipart=False), conditional=mode != "overwrite")
        except ConditionalWriteError:
            # A conditional PUT whose response was lost is retried by the HTTP client and then sees
            # its own first write as "the other writer". Identical bytes mean this write landed.
            own = self._own_write(name, data)
            if own is None:
                raise
            self._add_written(size)
            return own.etag or "", own.version
        self._add_written(size)
        return result.get("e_tag"), result.get("version")

    def _own_write(self, name: str, data: Buffer) -> ObjectInfo | None:
        """What a HEAD says of `name` if it holds exactly `data`, else None (any failure: None)."""
        try:
            info = self.head(name)
            if info.size != memoryview(data).nbytes or self.get(name) != bytes(data):
                return None
        except ObjectStoreError:
            return None
        return info

    def _add_read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def _add_written(self, n: int) -> None:
        with self._lock:
            self.bytes_written += n

    def _call(self, operation: str, name: str, run: Callable[[], T], conditional: bool = False) -> T:
        def counted() -> T:
            with self._lock:
                self.requests[operation] += 1
            return run()

        # a conditional write is retried by the HTTP client only: a retry of ours could see its own
        # first write (which the server applied before the connection dropped) as the other writer
        policy = RetryPolicy(1, client_retries=self._retry.client_retries) if conditional else self._retry
        try:
            return call_with_retries(counted, policy, is_transient)[0]
        except SweepUnavailable:
            raise
        except Exception as err:
            raise typed_error(err, operation, self.url_of(name), self.redact) from err

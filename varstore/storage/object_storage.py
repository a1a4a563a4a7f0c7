"""ObjectStorage: the storage seam ("where bytes go") over an object store. PROVISIONAL.

Sketch for issue 13 phase 1. The `Storage` protocol lands with issue10engine
(varstore/storage/__init__.py); phase 2 adapts this class to the protocol's final method names
and wires it into save/restore/open_checkpoint/convert/CheckpointManager. What it already does:
exists, size, list(prefix), positional reads into caller buffers, a writer with positional
writes + finish/abort, batch delete, and the commit step an object store can do without rename
(a create-only PUT of the manifest object; see docs/guide/object-storage.md).

It must not know checkpoint formats or manifests; it moves bytes under one root URL.
"""

from __future__ import annotations

import builtins

import io
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType

from varstore.errors import ObjectStoreError
from varstore.storage.object_store import ObjectInfo, ObjectStoreClient
from varstore.storage._urls import ObjectURL

__all__ = ["ObjectReader", "ObjectStorage", "ObjectWriter"]


class ObjectWriter:
    """Collects one object's bytes (positional writes allowed) and uploads them on `finish()`.

    Nothing is visible under the name before `finish()` returns: a single PUT (object up to one
    part) or a multipart upload (larger) is atomic on S3, GCS and Azure. Bytes are spooled in
    memory up to `part_size`, then in a local temporary file (HDF5 writes out of order, so the
    object cannot be streamed as it is written); the file is deleted on finish/abort. Upload
    memory is bounded by (max_in_flight + 1) * part_size.
    """

    def __init__(self, client: ObjectStoreClient, name: str) -> None:
        self._client = client
        self._name = name
        self._spool = tempfile.SpooledTemporaryFile(max_size=client.part_size, prefix="varstore-upload-")
        self._size = 0
        self._closed = False

    @property
    def size(self) -> int:
        """Bytes written so far (the highest offset reached)."""
        return self._size

    def write_at(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Writes `data` at byte `offset` (a gap reads as zeros)."""
        self._check_open()
        view = memoryview(data).cast("B")
        self._spool.seek(offset)
        self._spool.write(view)
        self._size = max(self._size, offset + len(view))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Appends `data` after the highest offset written so far."""
        self.write_at(self._size, data)

    def finish(self) -> str | None:
        """Uploads the object; returns its etag. The writer is closed afterwards.

        Raises:
          ObjectStoreError: the upload failed (after retries); nothing is left under the name.
        """
        self._check_open()
        try:
            if self._size <= self._client.part_size:
                self._spool.seek(0)
                return self._client.put(self._name, self._spool.read(self._size))
            return self._client.put_multipart(self._name, self._parts)
        finally:
            self._close()

    def abort(self) -> None:
        """Discards the bytes; nothing is uploaded."""
        self._close()

    def _parts(self) -> Iterator[bytes]:
        self._spool.seek(0)
        remaining = self._size
        while remaining > 0:
            chunk = self._spool.read(min(self._client.part_size, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            yield chunk

    def _check_open(self) -> None:
        if self._closed:
            raise ObjectStoreError(f"the writer for {self._client.url_of(self._name)} is already finished")

    def _close(self) -> None:
        self._closed = True
        self._spool.close()

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None or not self._closed:
            if exc_type is None:
                self.finish()
            else:
                self.abort()


class ObjectReader(io.RawIOBase):
    """A read-only, seekable file over one object: every `readinto` is one ranged GET.

    For libraries that want a file object (h5py reading an HDF5 file varstore did not write);
    varstore's own readers call `ObjectStorage.read_into` with offsets from the index instead.
    No read-ahead and no cache: wrap it in io.BufferedReader for many small reads.
    """

    def __init__(self, client: ObjectStoreClient, name: str) -> None:
        super().__init__()
        self._client = client
        self._name = name
        self._size = client.size(name)
        self._position = 0

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._client.url_of(self._name)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ObjectStoreError(f"seek to {base + offset} before the start of {self.name}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        length = max(0, min(len(view), self._size - self._position))
        if length:
            self._client.get_range(self._name, self._position, length, out=view)
            self._position += length
        return length


class ObjectStorage:
    """Bytes under one object-store URL, the shape of the Storage protocol (provisional).

    Args:
      url: root URL, e.g. "s3://bucket/runs/a7/model.zarr".
      storage_options: endpoint, region, credentials (see ObjectStoreClient).
      client: an existing client to share (its root must be `url`).
    """

    def __init__(self, url: str | ObjectURL, storage_options: Mapping[str, object] | None = None, *,
                 client: ObjectStoreClient | None = None) -> None:
        self.client = client or ObjectStoreClient(url, storage_options)

    def __repr__(self) -> str:
        return f"ObjectStorage({str(self.client.url)!r})"

    def exists(self, name: str) -> bool:
        return self.client.exists(name)

    def size(self, name: str) -> int:
        return self.client.size(name)

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return self.client.list(prefix)

    def read_into(self, name: str, offset: int, out: memoryview | bytearray) -> int:
        """Fills `out` with the bytes of `name` at `offset` (one ranged GET). Returns len(out)."""
        view = memoryview(out).cast("B")
        self.client.get_range(name, offset, len(view), out=view)
        return len(view)

    def read(self, name: str) -> bytes:
        return self.client.get(name)

    def open_reader(self, name: str) -> ObjectReader:
        """A seekable file object over `name` (ranged GETs). Raises ObjectNotFoundError when absent."""
        return ObjectReader(self.client, name)

    def open_writer(self, name: str) -> ObjectWriter:
        return ObjectWriter(self.client, name)

    def write_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Small objects (Zarr chunks) uploaded concurrently, bounded by the client's max_in_flight."""
        return self.client.put_many(items)

    def delete(self, names: Sequence[str]) -> None:
        self.client.delete(names)

    def commit(self, name: str, data: bytes) -> str | None:
        """The commit step: creates `name` (the manifest) only if absent, after all data objects.

        Raises:
          ConditionalWriteError: a manifest is already there (another writer committed first).
        """
        return self.client.put_if_absent(name, data)

    def replace_if_unchanged(self, name: str, data: bytes, etag: str | None) -> str | None:
        """Moves a pointer object (the manager's `latest`): create when `etag` is None, else If-Match."""
        if etag is None:
            return self.client.put_if_absent(name, data)
        return self.client.put_if_match(name, data, etag)

    def sweep(self, prefix: str = "", older_than: float = 3600.0) -> builtins.list[str]:
        """Aborts incomplete multipart uploads under `prefix` older than `older_than` seconds."""
        return self.client.abort_incomplete_uploads(prefix, older_than)

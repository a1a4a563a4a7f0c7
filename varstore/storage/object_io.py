"""Object writer and reader: one object's bytes collected and uploaded on finish, and a seekable file over ranged GETs.

ObjectWriter spools positional writes (memory, then a local temporary file) and uploads them as
one PUT or a multipart upload, visible whole or not at all; ObjectReader is the file object format
libraries (h5py) read an object through. Used by ObjectStorage (object_storage.py); knows nothing
about checkpoints.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from types import TracebackType

import numpy as np

from varstore.errors import ObjectStoreError
from varstore.storage.object_store import ObjectStoreClient
from varstore.storage.protocol import Buffer

__all__ = ["ObjectReader", "ObjectWriter", "bytes_view", "UPLOAD_BUFFER_BYTES"]

#: The most bytes a file upload holds in memory (issue 13: a save needs the model plus 64 MiB at most).
UPLOAD_BUFFER_BYTES = 64 << 20


def bytes_view(data: Buffer) -> memoryview:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    return memoryview(data).cast("B")


class ObjectWriter:
    """Collects one object's bytes (positional writes allowed) and uploads them on `finish()`.

    Nothing is visible under the name before `finish()` returns: a single PUT (object up to one
    part) or a multipart upload (larger) is atomic on S3, GCS and Azure. Bytes are spooled in
    memory up to `part_size`, then in a local temporary file (HDF5 writes out of order, so the
    object cannot be streamed as it is written); the file is deleted on finish/abort. Upload
    memory is bounded by (max_in_flight + 1) * part_size.
    """

    def __init__(self, client: ObjectStoreClient, name: str) -> None:
        self.key = name
        self._client = client
        self._name = name
        self._spool = tempfile.SpooledTemporaryFile(max_size=client.part_size, prefix="varstore-upload-")
        self._size = 0
        self._closed = False
        self.etag: str | None = None

    @property
    def size(self) -> int:
        """Bytes written so far (the highest offset reached)."""
        return self._size

    def reserve(self, nbytes: int) -> None:
        """Nothing to reserve on an object store (the protocol's hint)."""

    def write_at(self, offset: int, data: Buffer) -> None:
        """Writes `data` (bytes-like or a C-contiguous array's bytes) at byte `offset` (a gap reads as zeros)."""
        self._check_open()
        view = bytes_view(data)
        self._spool.seek(offset)
        self._spool.write(view)
        self._size = max(self._size, offset + len(view))

    def write(self, data: Buffer) -> None:
        """Appends `data` after the highest offset written so far."""
        self.write_at(self._size, data)

    def finish(self) -> None:
        """Uploads the object (its etag is then `self.etag`). The writer is closed afterwards.

        Raises:
          ObjectStoreError: the upload failed (after retries); nothing is left under the name.
        """
        self._check_open()
        try:
            if self._size <= self._client.part_size:
                self._spool.seek(0)
                self.etag = self._client.put(self._name, self._spool.read(self._size))
            else:
                self.etag = self._client.put_multipart(self._name, self._parts)
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

    def __init__(self, client: ObjectStoreClient, name: str, *, size: int | None = None,
                 etag: str | None = None) -> None:
        super().__init__()
        self._client = client
        self._name = name
        self._size = client.size(name) if size is None else size
        self._etag = etag  # every GET carries If-Match: a replaced object raises ObjectChangedError
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
            view[:length] = self._client.get_range_view(self._name, self._position, length, etag=self._etag)
            self._position += length
        return length

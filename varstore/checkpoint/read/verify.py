"""Checking every variable of an open checkpoint against its crc32c: `verify_all`, behind VarstoreReader.verify.

What `varstore verify` runs. Packed variables with a checksum are checked on
the packed blob, read once, in one pass (as a bulk restore checks them:
read_engine.check_packed). The other variables are read in key order into one
reused buffer, as large as the largest variable read so far, while the
storage reads 64 MiB ahead of them (a single file: the next extents; a Zarr
directory: the next zarr.json and chunk files), as a loop in key order does.
Each stored size is checked before the buffer grows for it. The error names
the first damaged variable in key order, whichever way it was checked.
Never writes; owns no thread (the storage's read-ahead does).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from varstore.checkpoint.read.key_order import LAZY_READ_AHEAD_BYTES
from varstore.checkpoint.format.packed import packed_checksum_failure
from varstore.checkpoint.read.read_session import ReadSession

if TYPE_CHECKING:
    import numpy.typing as npt

    from varstore.checkpoint.format.manifest import ManifestColumns, Record
    from varstore.storage import ReadAhead

__all__ = ["verify_all", "scratch_view", "VerifiedReader"]


class VerifiedReader(Protocol):
    """What verify_all needs of its reader (VarstoreReader implements it)."""

    def in_session(self, session: ReadSession) -> AbstractContextManager[ReadSession]: ...

    @property
    def manifest(self) -> ManifestColumns: ...

    def keys(self) -> list[str]: ...

    def packed_blob(self, limit: int = ...) -> bytearray | None: ...

    def start_read_ahead(self, names: list[str], window: int) -> ReadAhead | None: ...

    def record(self, name: str) -> Record: ...

    def check_stored(self, record: Record) -> None: ...

    def fill(self, record: Record, out: npt.NDArray[Any], verify: bool) -> None: ...

    def checksum_error(self, record: Record, found: int) -> None: ...


def scratch_view(buffer: npt.NDArray[np.uint8] | None, record: Record
                 ) -> tuple[npt.NDArray[np.uint8] | None, npt.NDArray[Any]]:
    """(the buffer, grown when too small; an array of the record's shape and dtype over its first bytes).

    Args:
      buffer: a 1-D uint8 array, or None before the first read.
      record: the variable about to be read.

    Values of object dtype and empty ones get an array of their own (the buffer is returned unchanged).
    """
    dtype = record.numpy_dtype
    if not record.nbytes or dtype.hasobject or dtype.itemsize == 0:
        return buffer, np.empty(record.shape, dtype=dtype)
    if buffer is None or buffer.nbytes < record.nbytes:
        buffer = np.empty((record.nbytes,), dtype=np.uint8)
    return buffer, buffer[:record.nbytes].view(dtype).reshape(record.shape)


def verify_all(reader: VerifiedReader, progress: Callable[[int, int, str], None] | None = None) -> None:
    """Reads every variable of `reader` and checks its crc32c (see the module docstring).

    `progress(done_bytes, total_bytes, name)` is called once before the first variable (0, total, ""),
    once for the packed variables checked on the blob together, and after each other variable.

    Memory: the largest variable's bytes once, plus the packed blob (at most 256 MiB; larger
    blobs are read per variable) and the storage's 64 MiB of read-ahead in the page cache.

    Raises:
      ChecksumError: naming the first damaged variable in key order and the file.
      CorruptCheckpointError: a value the storage does not hold (truncated, missing file).
    """
    session = ReadSession()
    session.packed = reader.packed_blob()
    names = reader.keys()
    on_blob, failure = _check_on_blob(reader, session.packed, names)
    loop = [name for k, name in enumerate(names) if k not in on_blob and (failure is None or k < failure[0])]
    total = done = 0
    if progress is not None:
        total = sum(reader.record(name).nbytes for name in names)
        done = sum(reader.record(names[k]).nbytes for k in on_blob)
        progress(0, total, "")
        if on_blob:
            progress(done, total, names[max(on_blob)])
    lent = reader.in_session(session)
    lent.__enter__()
    try:
        session.read_ahead = reader.start_read_ahead(loop, LAZY_READ_AHEAD_BYTES)
        buffer: npt.NDArray[np.uint8] | None = None
        for name in loop:
            record = reader.record(name)
            reader.check_stored(record)  # before the buffer grows for what the manifest claims
            buffer, out = scratch_view(buffer, record)
            reader.fill(record, out, True)
            if progress is not None:
                done += record.nbytes
                progress(done, total, name)
        if failure is not None:  # no variable before it in key order is damaged
            reader.checksum_error(reader.record(names[failure[0]]), failure[1])
    finally:
        if session.read_ahead is not None:
            session.read_ahead.stop()  # before the reader's descriptors may be closed
            session.read_ahead = None
        lent.__exit__(None, None, None)


def _check_on_blob(reader: VerifiedReader, blob: bytearray | None, names: list[str]
                   ) -> tuple[set[int], tuple[int, int] | None]:
    """(key positions of the packed variables checked on `blob`, (key position, crc32c found or -1 when
    outside the blob) of the first damaged one in key order, or None). Packed variables without a
    checksum are left to the loop, which still reads them."""
    if blob is None:
        return set(), None
    manifest = reader.manifest
    index_of, paths, checksums = manifest.index, manifest.columns["path"], manifest.columns["checksum"]
    position_of: dict[int, int] = {}
    for k, name in enumerate(names):
        index = index_of.get(name)
        if index is not None and paths[index] is None and checksums[index] is not None:
            position_of[index] = k
    found = packed_checksum_failure(blob, manifest.columns, list(position_of))
    return set(position_of.values()), None if found is None else (position_of[found[0]], found[1])

"""A lazy reader's loops over the keys in order: read-ahead of what comes next, the packed blob read once.

`KeyOrder` watches the single reads of one VarstoreReader (reader.py): from
the second read in key order on it starts the storage's read-ahead over every
later variable, once per run of reads in order, and reads the packed blob of
small variables whole when the loop is on packed variables; a jump stops the
read-ahead. Once that blob is read, every packed variable's crc32c is checked
on it in one pass and each gets a view of it (`packed_view`), so each later
read of a packed variable is one copy out of the blob. `copy_packed` makes a
new array of one packed variable out of the blob, its crc32c checked first
(the path when the one-pass check found a damaged variable). The new arrays
of such a loop over own-array variables are made and faulted in ahead of it
(residency.ArraysAhead). Never writes; owns no thread itself (the storage's
read-ahead and ArraysAhead do).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import ManifestColumns, Record
from varstore.checkpoint.format.packed import packed_checksum_failure, packed_views
from varstore.checkpoint.read.residency import ArraysAhead
from varstore.errors import CorruptCheckpointError
from varstore.storage import ReadAhead

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

__all__ = ["KeyOrder", "copy_packed", "LAZY_READ_AHEAD_BYTES", "LAZY_PACKED_CACHE_BYTES"]

#: A loop reading the keys in order has the storage read this many bytes ahead of it.
LAZY_READ_AHEAD_BYTES = 64 << 20
#: Such a loop reads the packed blob of small variables whole (once) when it has at most this many bytes.
LAZY_PACKED_CACHE_BYTES = 64 << 20


class OrderedReader(Protocol):
    """What KeyOrder needs of its reader (VarstoreReader implements it)."""

    @property
    def manifest(self) -> ManifestColumns: ...

    def start_read_ahead(self, names: list[str], window: int) -> ReadAhead | None: ...

    def resident(self, names: list[str]) -> bool: ...

    def packed_blob(self, limit: int = ...) -> bytearray | None: ...

    def new_array(self, index: int) -> npt.NDArray[Any]: ...


class KeyOrder:
    """Follows one reader's single reads (see the module docstring).

    Attributes:
      ahead: the running read-ahead of a loop in key order, or None.
      blob: the packed blob, read once for such a loop, or None.
    """

    def __init__(self, reader: OrderedReader) -> None:
        self._reader = reader
        self._last = -2
        self._following = False
        self.ahead: ReadAhead | None = None
        self._arrays: ArraysAhead | None = None  # the loop's next new arrays (own-array variables)
        self.blob: bytearray | None = None
        #: per manifest position: a view of `blob` (packed variables) or None; None until the blob is read.
        self._views: list[npt.NDArray[Any] | None] | None = None
        self._checked = False  # every packed variable's crc32c matched on `blob`
        #: the manifest position `next_copy` serves (the one after the last read of a loop in key order
        #: over the checked blob), else -1
        self._next = -1

    def follow(self, index: int) -> None:
        """Notes a read of the variable at manifest position `index`."""
        if index != self._last + 1:
            self.stop()
            self._following = False
        elif not self._following and index + 1 < len(self._reader.manifest.names):
            self._following = True  # once per run of reads in order: planning looks at every later name
            reader = self._reader
            self._arrays = self._start_arrays(index + 1)  # first: it asks whether the bytes are memory already
            self.ahead = reader.start_read_ahead(reader.manifest.names[index:], LAZY_READ_AHEAD_BYTES)
            if self.blob is None and reader.manifest.columns["path"][index] is None:
                # small variables packed in one blob: one read for the whole loop, not one per variable
                self.blob = reader.packed_blob(LAZY_PACKED_CACHE_BYTES)
                if self.blob is not None:
                    self._view_blob(self.blob)
        self._last = index
        self._next = index + 1 if self._following and self._checked and self._views is not None else -1

    def _start_arrays(self, start: int) -> ArraysAhead | None:
        """New arrays for the own-array variables from manifest position `start` on, made ahead (residency.py)."""
        reader = self._reader
        columns = reader.manifest.columns
        paths, sizes = columns["path"], columns["nbytes"]
        new_array = weakref.WeakMethod(reader.new_array)  # an abandoned reader is still collected (and closed)

        def make(index: int) -> npt.NDArray[Any]:
            method = new_array()
            if method is None:
                raise ReferenceError("the reader is gone")
            return method(index)

        plan: list[tuple[int, int, Callable[[], Any]]] = [
            (i, sizes[i], functools.partial(make, i))
            for i in range(start, len(paths)) if paths[i] is not None and sizes[i]]
        names = reader.manifest.names
        resident = functools.partial(reader.resident, [names[i] for i, _, _ in plan])
        return ArraysAhead.start(plan, LAZY_READ_AHEAD_BYTES, resident) if plan else None

    def new_array(self, index: int) -> npt.NDArray[Any] | None:
        """The new array made ahead for the own-array variable at `index` (a loop in key order), or None."""
        arrays = self._arrays
        return None if arrays is None else arrays.take(index)

    def next_copy(self, index: int) -> npt.NDArray[Any] | None:
        """A new array of the packed variable at `index` when it is the next one of a loop in key order
        over the checked blob (one copy out of its view; the read noted as `follow` would), else None.

        The fast path of `ck[name]` for 50,000 small variables: no Record,
        no checks repeated (the blob's crc32cs all matched when it was read).
        """
        if index != self._next:
            return None
        views = self._views
        view = None if views is None else views[index]
        if view is None:
            return None
        self._last = index
        self._next = index + 1
        return view.copy()

    def _view_blob(self, blob: bytearray) -> None:
        """Checks every packed variable on `blob` in one pass and makes a view of each.

        A damaged variable leaves `_checked` False (reads then check each
        variable on its own and name the bad one); a variable outside the blob
        leaves no views at all (copy_packed reports it).
        """
        manifest = self._reader.manifest
        columns = manifest.columns
        paths = columns["path"]
        packed = list(itertools.compress(range(len(paths)), map(operator.is_, paths, itertools.repeat(None))))
        try:
            views = packed_views(blob, columns, manifest.names, packed, manifest.where)
        except CorruptCheckpointError:
            return
        table: list[npt.NDArray[Any] | None]
        if len(packed) == len(paths):  # every variable packed (W2): the views are the table
            table = list(views)
        else:
            table = [None] * len(paths)
            for i, view in zip(packed, views):
                table[i] = view
        self._views = table
        self._checked = packed_checksum_failure(blob, columns, packed) is None

    def packed_view(self, index: int, verify: bool) -> npt.NDArray[Any] | None:
        """The view of the blob of the packed variable at `index` (copy it before use), or None.

        None when the blob was not read, the variable is not packed, or
        `verify` is asked and the one-pass check did not pass.
        """
        views = self._views
        if views is None or (verify and not self._checked):
            return None
        return views[index]

    def stop(self) -> None:
        """Stops the read-ahead (before the reader's descriptors are closed) and the arrays made ahead."""
        self._next = -1
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.stop()
        arrays, self._arrays = self._arrays, None
        if arrays is not None:
            arrays.stop()

    def close(self) -> None:
        """Stops the read-ahead and lets the blob go."""
        self.stop()
        self.blob = None
        self._views = None


def copy_packed(record: Record, blob: bytearray, verify: bool, where: str,
                checksum_error: Callable[[Record, int], Any]) -> npt.NDArray[Any]:
    """A new array of a packed variable out of `blob`, its checksum checked on the blob first.

    Raises:
      CorruptCheckpointError: its bytes lie outside the blob or disagree with its shape and dtype.
      Whatever `checksum_error(record, found)` raises for a damaged value (a ChecksumError).
    """
    start, nbytes = int(record.offset or 0), record.nbytes
    if start + nbytes > len(blob):
        raise CorruptCheckpointError(
            f"variable '{record.name}' in '{where}' lies outside the packed blob: it claims bytes "
            f"{start}..{start + nbytes}, the blob has {len(blob)}")
    dtype = record.numpy_dtype
    count = math.prod(record.shape)
    if count * dtype.itemsize != nbytes:
        raise CorruptCheckpointError(
            f"variable '{record.name}' in '{where}': the manifest says {nbytes} bytes, its shape "
            f"{record.shape} and dtype {record.dtype} make {count * dtype.itemsize}")
    if verify and record.checksum is not None:
        found = crc32c_raw(memoryview(blob)[start:start + nbytes]) if nbytes else 0
        if found != record.checksum:
            checksum_error(record, found)
    return np.frombuffer(blob, dtype, count, start).reshape(record.shape).copy()

"""New host arrays that start on a page boundary, so the kernel's copies into them run at full speed.

A read copies a file's bytes out of the page cache into the destination array
inside `preadv` (the kernel's `rep movsb` on this project's AMD EPYC hosts).
That copy is sensitive to how the destination lines up with the file offset:
W1's 318 MiB read from a tmpfs into arrays 16 bytes past a page boundary (where
glibc puts every NumPy array it maps, behind its malloc header) costs 67 ms of
CPU from page-aligned chunk files (Zarr), against 48-53 ms into page-aligned
arrays (`docs/benchmarks/README.md`, issue 39, "Round 3, seventh pass"). Every
data file varstore writes starts its values on a 64-byte boundary (Zarr
chunk files at offset 0; HDF5 datasets at offsets HDF5 aligns, see
backends/hdf5/store.py), so a page-aligned destination is an aligned copy.

`host_empty` allocates arrays of `ALIGN_MIN_BYTES` and more (smaller ones of
4 KiB and more: on a 64-byte line) up to `PAGE_BYTES` further into a private
uint8 buffer and returns the aligned view: the array is
C-contiguous, writeable and the only user of that buffer, but NumPy reports
`flags.owndata` False and `.base` is the buffer. `owns_memory` is the test
that accepts both (a fresh NumPy array, or one made here), for callers that
adopt a fresh array instead of copying it. Smaller arrays are plain `np.empty`.
Knows nothing about files, variables or devices.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import (a lazy reader never needs it)
    import numpy.typing as npt

__all__ = ["host_empty", "owns_memory", "held_by_one_name", "ALIGN_MIN_BYTES", "PAGE_BYTES", "CACHE_LINE_BYTES"]

#: Host pages on every platform varstore runs on (Linux x86-64 and arm64 with 4 KiB pages).
PAGE_BYTES = 4096
#: Arrays of at least this many bytes start on a page boundary (at most 1.6% more memory each).
ALIGN_MIN_BYTES = 256 << 10
#: Smaller arrays of 4 KiB and more start on a cache line (at most 64 bytes more each).
CACHE_LINE_BYTES = 64


def host_empty(shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialized C-contiguous host array of `shape` and `dtype`: starting on a page boundary from
    ALIGN_MIN_BYTES, on a CACHE_LINE_BYTES boundary from CACHE_LINE_BYTES * 64 (4 KiB), else as np.empty.

    Raises:
      MemoryError, ValueError: as np.empty for a size it cannot allocate or index.
    """
    dt = np.dtype(dtype)
    count = 1
    for n in shape:
        count *= int(n)
    nbytes = count * dt.itemsize
    if nbytes < 64 * CACHE_LINE_BYTES or dt.hasobject:
        return np.empty(shape, dtype=dt)
    boundary = PAGE_BYTES if nbytes >= ALIGN_MIN_BYTES else CACHE_LINE_BYTES
    raw = np.empty(nbytes + boundary, dtype=np.uint8)
    start = -raw.ctypes.data % boundary
    return raw[start:start + nbytes].view(dt).reshape(shape)


# Adoption tests by reference count. A count written down (3 for "only the caller's name") breaks where the
# interpreter takes or borrows references differently (CPython 3.14 borrows where it can and documents smaller
# getrefcount values, so a constant would pass a shared object), so each test is calibrated at import through
# the same chain of calls on an object known to be held once. A real extra holder is a strong reference and
# counts on every interpreter.


def _count(obj: object) -> int:
    return sys.getrefcount(obj)


def _as_held_by_one_name(obj: object) -> int:  # held_by_one_name's frame, for the calibration below
    return _count(obj)


def _one_name_probe() -> int:
    probe = object()  # the caller's one name, as `value` in Variable._run_initializer
    return _as_held_by_one_name(probe)


def _buffer_count(array: npt.NDArray[Any]) -> int:
    raw = array.base
    return _count(raw)


_ONE_NAME = _one_name_probe()
#: A host_empty-shaped view whose buffer nothing else holds (the np.empty temporary is gone after slicing).
_SOLE_BUFFER = _buffer_count(np.empty(2 * PAGE_BYTES, dtype=np.uint8)[CACHE_LINE_BYTES:][:PAGE_BYTES])


def held_by_one_name(obj: object) -> bool:
    """True when nothing but the caller's one name references `obj`: a fresh initializer result that can be
    adopted without a copy, as `Variable._run_initializer` does."""
    return _count(obj) <= _ONE_NAME


def owns_memory(array: npt.NDArray[Any]) -> bool:
    """True when `array` is the whole of memory no other array shares: a fresh NumPy array, or one of
    `host_empty`'s (a view of the whole of a private uint8 buffer, but for its alignment, with no other
    view of that buffer alive). A fresh NumPy array's own views are the caller's to rule out (refcount)."""
    if array.flags.owndata:
        return True
    if _buffer_count(array) > _SOLE_BUFFER:  # counted before this frame holds the buffer too
        return False
    raw = array.base
    return (type(raw) is np.ndarray and raw.base is None and raw.flags.owndata and raw.dtype == np.uint8
            and raw.ndim == 1 and 0 <= raw.nbytes - array.nbytes <= PAGE_BYTES and array.flags.c_contiguous
            and raw.ctypes.data <= array.ctypes.data < raw.ctypes.data + PAGE_BYTES)

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

__all__ = ["host_empty", "owns_memory", "ALIGN_MIN_BYTES", "PAGE_BYTES", "CACHE_LINE_BYTES"]

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


def _buffer_refs(array: npt.NDArray[Any]) -> int:
    """sys.getrefcount of `array.base`, taken the same way for `owns_memory` and for its calibration."""
    return sys.getrefcount(array.base)


#: `_buffer_refs` of a view that alone holds its buffer, measured at import (2 on CPython 3.11: the view's
#: `.base` and getrefcount's argument). Measured rather than written down because CPython 3.14 borrows
#: references where it can and documents smaller counts (a constant 3 would then pass a shared buffer).
_SOLE_HOLDER_REFS = _buffer_refs(np.empty(2 * PAGE_BYTES, dtype=np.uint8)[CACHE_LINE_BYTES:PAGE_BYTES])


def owns_memory(array: npt.NDArray[Any]) -> bool:
    """True when `array` is the whole of memory no other array shares: a fresh NumPy array, or one of
    `host_empty`'s (a view of the whole of a private uint8 buffer, but for its alignment, with no other
    view of that buffer alive). A fresh NumPy array's own views are the caller's to rule out (refcount)."""
    if array.flags.owndata:
        return True
    raw = array.base
    return (type(raw) is np.ndarray and raw.base is None and raw.flags.owndata and raw.dtype == np.uint8
            and raw.ndim == 1 and 0 <= raw.nbytes - array.nbytes <= PAGE_BYTES and array.flags.c_contiguous
            and raw.ctypes.data <= array.ctypes.data < raw.ctypes.data + PAGE_BYTES
            and _buffer_refs(array) - 1 <= _SOLE_HOLDER_REFS)  # -1: this frame's `raw`

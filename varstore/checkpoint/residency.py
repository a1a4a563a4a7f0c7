"""Making new destination arrays resident ahead of the reads that fill them, from a helper thread.

A new NumPy array is address space only: each page is faulted in (zeroed, and
with transparent huge pages, which NumPy asks for on arrays of 4 MiB and more,
sometimes compacted first) by its first write. For a read into a new array that
write is the kernel's copy out of the page cache inside `preadv`, so the
reading thread takes the faults one after another between its waits on the
disk. `populated` hands the arrays to a helper thread that asks the kernel to
fault them in, in read order, with madvise(MADV_POPULATE_WRITE) (Linux 5.14+):
each page is mapped writable without being written, so a page the reader has
already filled keeps its bytes and the two threads may race freely. The faults
then overlap the disk instead of following it.

Each range of an array of 4 MiB and more is first marked MADV_NOHUGEPAGE: with the common `defrag = madvise`
setting, the huge pages NumPy asks for are sometimes compacted on the fault,
which made such loads bimodal. W1 at 0.25 scale (303 MB, 384 arrays), an HDF5
checkpoint, `load_varstore` in fresh processes, cold cache, 10 runs each:
0.195-0.437 s with huge pages (4 of 10 over 0.36 s), 0.186-0.232 s without;
before this module, 0.28-1.19 s (docs/benchmarks/README.md). Arrays filled
this way therefore live on 4 KiB pages.

Anywhere else (another system, an older kernel, a refused call) it does
nothing and the reads fault the pages as before. Never reads or writes array
contents; owns only its one thread, ended when the `with` block ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["populated", "MIN_POPULATE_BYTES"]

#: Arrays together smaller than this (bytes) are left to the reads: a thread costs more than it saves.
MIN_POPULATE_BYTES = 16 << 20
#: madvise advice from linux/mman.h (MADV_POPULATE_WRITE is not in Python's mmap module before 3.13).
_MADV_POPULATE_WRITE = 23
_MADV_NOHUGEPAGE = 15
#: NumPy asks for transparent huge pages (MADV_HUGEPAGE) on arrays of this many bytes and more
#: (numpy/_core/src/multiarray/alloc.c); only those are marked MADV_NOHUGEPAGE, on the same ranges,
#: so the marking splits no more memory mappings than NumPy's own did.
NUMPY_HUGEPAGE_BYTES = 4 << 20
#: Bytes asked for per madvise call, so that the end of the `with` block stops the thread promptly.
_STEP_BYTES = 8 << 20
_PAGE = 4096

_madvise: Any = None  # libc's madvise (ctypes), loaded on first use; False where there is none


def _libc_madvise() -> Any:
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes
                import mmap

                global _PAGE
                _PAGE = mmap.PAGESIZE
                function = ctypes.CDLL(None, use_errno=True).madvise
                function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                function.restype = ctypes.c_int
                _madvise = function
            except (OSError, AttributeError):  # no libc symbol: stay without
                _madvise = False
    return _madvise


def _page_ranges(array: Any) -> list[tuple[int, int]]:
    """(start address, bytes) of the whole pages inside `array`'s buffer, in steps of _STEP_BYTES."""
    address = array.ctypes.data
    start = -(-address // _PAGE) * _PAGE
    end = (address + array.nbytes) // _PAGE * _PAGE
    ranges = []
    while start < end:
        step = min(_STEP_BYTES, end - start)
        ranges.append((start, step))
        start += step
    return ranges


def _populate(madvise: Any, arrays: list[Any], stop: threading.Event) -> None:
    for array in arrays:
        huge = array.nbytes >= NUMPY_HUGEPAGE_BYTES
        for address, nbytes in _page_ranges(array):
            if stop.is_set():
                return
            if huge:  # best effort: without it, faults as NumPy asked
                madvise(address, nbytes, _MADV_NOHUGEPAGE)
            if madvise(address, nbytes, _MADV_POPULATE_WRITE) != 0:
                return  # the kernel refused (EINVAL before 5.14, ENOMEM): the reads fault the rest


@contextmanager
def populated(arrays: Sequence[Any]) -> Iterator[None]:
    """Faults in `arrays` (NumPy arrays the block is about to fill, in the order it fills them) from a
    helper thread while the block runs; a hint only.

    Args:
      arrays: new arrays; C-contiguous ones of at least a page are faulted in, the rest left to the block.

    Does nothing when the arrays hold fewer than MIN_POPULATE_BYTES bytes together or the system
    cannot (see the module docstring). The thread is stopped and joined when the block ends, also by
    an exception; no error of its own is ever raised. Peak memory is unchanged: every page it faults
    in is one the block writes.
    """
    chosen = [a for a in arrays if a.nbytes >= _PAGE and a.flags.c_contiguous]
    madvise = _libc_madvise() if sum(a.nbytes for a in chosen) >= MIN_POPULATE_BYTES else False
    if not madvise:
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_populate, args=(madvise, chosen, stop),
                              name="varstore-populate", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()

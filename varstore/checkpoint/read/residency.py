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

When the bytes to read must come from a disk, each range of an array of 4 MiB and
more is first marked MADV_NOHUGEPAGE: with the common `defrag = madvise`
setting, the huge pages NumPy asks for made cold loads bimodal. W1 at 0.25
scale (303 MB, 384 arrays), an HDF5 checkpoint, `load_varstore` in fresh
processes, cold cache, 10 runs each: 0.195-0.437 s with huge pages (4 of 10
over 0.36 s), 0.186-0.232 s without; before this module, 0.28-1.19 s
(docs/benchmarks/README.md). When the caller says the bytes are memory already
(`resident`: a tmpfs, or the page cache; the reader asks its storage before the
first read), the arrays keep NumPy's huge pages, and faulting them costs less:
W1 `vs.load` from a tmpfs in fresh processes, 140 ms of CPU against 211 ms;
from the page cache of an ext4 disk, median wall 81-96 ms against 131-145 ms,
with a longer tail (9 of 84 loads over 200 ms, at most 275 ms; 1 of 84 on
4 KiB pages). Issue 39, docs/benchmarks/README.md.

`ArraysAhead` does the same for a loop that makes one new array per read
(`ck[name]` in key order): its helper makes the next arrays and faults them in,
a bounded window ahead of the loop.

Anywhere else (another system, an older kernel, a refused call) neither does
anything and the reads fault the pages as before. Never reads or writes array
contents; each owns only its one thread, ended when the block ends or `stop`.
"""

from __future__ import annotations

import functools
import mmap
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # threading is imported when a thread is started: a one-array read never needs it
    import threading

__all__ = ["populated", "ArraysAhead", "MIN_POPULATE_BYTES"]

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
_PAGE = mmap.PAGESIZE

_madvise: Any = None  # libc's madvise (ctypes), loaded on first use; False where there is none


def _libc_madvise() -> Any:
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

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


def _populate_one(madvise: Any, array: Any, stopped: Callable[[], bool], huge_pages: bool) -> bool:
    """Faults in one C-contiguous array (on 4 KiB pages unless `huge_pages`); False when stopped or the
    kernel refused (the reads fault the rest)."""
    small_pages = array.nbytes >= NUMPY_HUGEPAGE_BYTES and not huge_pages
    for address, nbytes in _page_ranges(array):
        if stopped():
            return False
        if small_pages:  # best effort: without it, faults as NumPy asked
            madvise(address, nbytes, _MADV_NOHUGEPAGE)
        if madvise(address, nbytes, _MADV_POPULATE_WRITE) != 0:
            return False  # EINVAL before Linux 5.14, ENOMEM
    return True


def _itself(array: Any) -> Any:
    return array


@contextmanager
def populated(arrays: Sequence[Any], resident: Callable[[], bool] | None = None) -> Iterator[None]:
    """Faults in `arrays` (NumPy arrays the block is about to fill, in the order it fills them) from a
    helper thread while the block runs; a hint only.

    Args:
      arrays: new arrays; C-contiguous ones of at least a page are faulted in, the rest left to the block.
      resident: called once, before the thread starts, when there is one: True when the bytes the block
        reads are memory already (the arrays then keep NumPy's huge pages); None: as False.

    Does nothing when the arrays hold fewer than MIN_POPULATE_BYTES bytes together or the system
    cannot (see the module docstring). The thread (an ArraysAhead whose window holds them all) is
    stopped and joined when the block ends, also by an exception; no error of its own is ever raised.
    Peak memory is unchanged: every page it faults in is one the block writes.
    """
    chosen = [a for a in arrays if a.nbytes >= _PAGE and a.flags.c_contiguous]
    plan: list[tuple[int, int, Callable[[], Any]]] = [
        (position, a.nbytes, functools.partial(_itself, a)) for position, a in enumerate(chosen)]
    ahead = ArraysAhead.start(plan, window=sum(a.nbytes for a in chosen), resident=resident)
    try:
        yield
    finally:
        if ahead is not None:
            ahead.stop()


class ArraysAhead:
    """New arrays for the next reads of a loop, each made, faulted in and handed over by a helper thread
    that stays at most `window` bytes ahead of the reads (`take`).

    Serves a loop that makes one array per read (`ck[name]` for every name in key order: `convert`,
    `diff`, `ls --stats`), and `populated` (arrays that exist up front, a window holding them all).
    Each plan item's `make`
    runs in the helper: it checks whatever must be checked before allocating (it raises to stop the
    helper; the loop's own read then meets and reports the problem) and returns the new array. Memory:
    at most `window` bytes plus one array made ahead of the loop, released by `stop`.

    Args:
      plan: (position, bytes, make) per upcoming read, in read order.
      window: bytes (the loop's read-ahead window).
    """

    def __init__(self, plan: list[tuple[int, int, Callable[[], Any]]], window: int, huge_pages: bool = False) -> None:
        import threading

        self._plan = plan
        self._huge_pages = huge_pages
        self._window = window
        self._ready: dict[int, tuple[Any, int]] = {}
        self._ahead_bytes = 0
        self._taken = -1
        self._stopped = False
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def start(cls, plan: list[tuple[int, int, Callable[[], Any]]], window: int,
              resident: Callable[[], bool] | None = None) -> ArraysAhead | None:
        """A running ArraysAhead, or None when the plan holds fewer than MIN_POPULATE_BYTES bytes or the
        system cannot fault memory in (see the module docstring). `resident` is asked once, here, before
        any read: True keeps NumPy's huge pages (the bytes to read are memory already)."""
        if sum(nbytes for _, nbytes, _ in plan) < MIN_POPULATE_BYTES or not _libc_madvise():
            return None
        import threading

        ahead = cls(plan, window, huge_pages=resident is not None and resident())
        ahead._thread = threading.Thread(target=ahead._run, name="varstore-populate", daemon=True)
        ahead._thread.start()
        return ahead

    def _run(self) -> None:
        madvise = _libc_madvise()
        condition = self._condition
        for position, nbytes, make in self._plan:
            with condition:
                while not self._stopped and self._ahead_bytes and self._ahead_bytes + nbytes > self._window:
                    condition.wait()
                if self._stopped:
                    return
                if position <= self._taken:
                    continue  # the loop got there first
            try:
                array = make()
            except Exception:  # noqa: BLE001 - a hint only: the loop's own read reports the problem
                return
            if array.flags.c_contiguous and not _populate_one(madvise, array, self._is_stopped, self._huge_pages):
                return
            with condition:
                if self._stopped:
                    return
                if position > self._taken:
                    self._ready[position] = (array, nbytes)
                    self._ahead_bytes += nbytes

    def _is_stopped(self) -> bool:
        return self._stopped

    def take(self, position: int) -> Any:
        """The array made for the read at `position`, or None (not made yet, or not planned): the
        caller then makes its own. Arrays for earlier positions are let go."""
        with self._condition:
            self._taken = max(self._taken, position)
            found = self._ready.pop(position, None)
            for earlier in [p for p in self._ready if p < position]:
                self._ahead_bytes -= self._ready.pop(earlier)[1]
            if found is not None:
                self._ahead_bytes -= found[1]
            self._condition.notify_all()
        return None if found is None else found[0]

    def stop(self) -> None:
        """Ends the helper (joined) and lets every array not taken go."""
        with self._condition:
            self._stopped = True
            self._ready.clear()
            self._ahead_bytes = 0
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

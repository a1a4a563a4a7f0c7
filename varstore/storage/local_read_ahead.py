"""Read-ahead on a local file system: threads announcing what a reader will read next to the kernel.

LocalReadAhead announces planned extents of one file (POSIX_FADV_WILLNEED),
LocalFilesReadAhead whole files (opening them ahead, then WILLNEED), each at
most a window ahead of the reader; `cached_already`, `extents_cached` and
`range_cached` tell whether files or byte ranges are in the page cache already
(then no thread is worth its cost, new arrays may take huge pages:
residency.py, and a read may take its checksum on the way: local.py). Never reads
values and never opens a FIFO, socket or device (special_files.py);
LocalStorage (local.py) decides when to start them.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

from varstore.storage.special_files import open_for_reading

__all__ = ["LocalReadAhead", "LocalFilesReadAhead", "cached_already", "extents_cached", "range_cached",
           "CACHE_SAMPLE_FILES", "CACHE_SAMPLE_EXTENTS"]


class LocalReadAhead:
    """A thread announcing planned extents to the kernel (POSIX_FADV_WILLNEED), at most `window` bytes ahead.

    `done(offset)` is called after each read of a planned extent; `stop()`
    ends the thread and waits for it (before the descriptor is closed).
    """

    def __init__(self, fd: int, extents: Sequence[tuple[int, int]], window: int) -> None:
        self._pending = dict(extents)  # file offset -> nbytes, planned and not yet read
        self._consumed = 0
        self._stopped = False
        import threading  # read-ahead threads only: opening a checkpoint and reading one value needs none

        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(fd, list(extents), window),
                                        name="varstore-readahead", daemon=True)
        self._thread.start()

    def _run(self, fd: int, extents: list[tuple[int, int]], window: int) -> None:
        issued = 0
        for offset, nbytes in extents:
            with self._cond:
                while not self._stopped and issued - self._consumed >= window:
                    self._cond.wait()
                if self._stopped:
                    return
            try:
                os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_WILLNEED)
            except (OSError, AttributeError):
                return
            issued += nbytes

    def done(self, offset: int) -> None:
        nbytes = self._pending.pop(offset, None)
        if nbytes is not None:
            with self._cond:
                self._consumed += nbytes
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


#: Files `cached_already` looks at (evenly spread over the list), and extents `extents_cached` looks at.
CACHE_SAMPLE_FILES = 8
CACHE_SAMPLE_EXTENTS = 16


def cached_already(paths: Sequence[str]) -> bool:
    """True when up to `CACHE_SAMPLE_FILES` of `paths` (evenly spread) are in the page cache, each whole
    (see `_file_cached`). False when one is not, a file cannot be opened, or nothing can tell."""
    step = max(1, len(paths) // CACHE_SAMPLE_FILES)
    return bool(paths) and all(_file_cached(path, None) for path in paths[::step][:CACHE_SAMPLE_FILES])


def extents_cached(path: str, extents: Sequence[tuple[int, int]]) -> bool:
    """True when up to `CACHE_SAMPLE_EXTENTS` of `extents` ((offset, nbytes) in `path`, evenly spread) are in
    the page cache (see `_file_cached`). False when one is not, or nothing can tell."""
    step = max(1, len(extents) // CACHE_SAMPLE_EXTENTS)
    sample = [(offset, nbytes) for offset, nbytes in extents[::step][:CACHE_SAMPLE_EXTENTS] if nbytes > 0]
    return bool(sample) and _file_cached(path, sample)


def _file_cached(path: str, ranges: list[tuple[int, int]] | None) -> bool:
    """Whether `ranges` ((offset, nbytes); None: the whole file) of `path` are in the page cache: every page
    (range_cached) where the kernel has cachestat(2), else the first and last byte of each, read with
    RWF_NOWAIT, which fails instead of waiting for the disk (a miss starts read-ahead of its own)."""
    nowait: int = getattr(os, "RWF_NOWAIT", 0)
    exact = bool(_cachestat_call())
    if not exact and not nowait:
        return False  # nothing can tell
    try:
        fd = open_for_reading(path)
    except OSError:  # also SpecialFileError: the reader reports it
        return False
    try:
        if ranges is None:
            size = os.fstat(fd).st_size
            ranges = [(0, size)] if size else []
        if exact:
            return all(range_cached(fd, offset, nbytes) for offset, nbytes in ranges)
        probe = bytearray(1)
        for offset, nbytes in ranges:
            for at in {offset, offset + nbytes - 1}:
                os.preadv(fd, [probe], at, nowait)
    except OSError:  # BlockingIOError: on the disk, not in memory; or RWF_NOWAIT unsupported here
        return False
    finally:
        os.close(fd)
    return True


#: cachestat(2)'s number (Linux 6.5+) on the architectures whose table has it at 451.
_SYS_CACHESTAT = {"x86_64": 451, "aarch64": 451, "arm64": 451}
_cachestat: Any = None  # (libc's syscall, its number), loaded on first use; False where there is none


def _cachestat_call() -> Any:
    global _cachestat
    if _cachestat is None:
        _cachestat = False
        number = _SYS_CACHESTAT.get(platform.machine()) if sys.platform.startswith("linux") else None
        if number is not None:
            try:
                import ctypes
                import errno

                function = ctypes.CDLL(None, use_errno=True).syscall
                function.restype = ctypes.c_long
                ctypes.set_errno(0)  # EBADF for fd -1 where it runs; ENOSYS before 6.5, EPERM under a seccomp filter
                function(ctypes.c_long(number), ctypes.c_uint(0xFFFFFFFF), None, None, ctypes.c_uint(0))
                if ctypes.get_errno() == errno.EBADF:
                    _cachestat = (function, number, ctypes)
            except (OSError, AttributeError):  # no libc symbol: stay without
                _cachestat = False
    return _cachestat


def range_cached(fd: int, offset: int, length: int) -> bool:
    """True when every page of bytes [offset, offset + length) of the open file `fd` is in the page cache,
    asked with cachestat(2) (Linux 6.5+), which, unlike a read with RWF_NOWAIT, starts no read-ahead and
    so leaves the kernel's sequential read-ahead of the file as it was. False when a page is not, or the
    kernel cannot tell (an older kernel, another system: the caller then treats the bytes as on the disk)."""
    call = _cachestat_call()
    if not call or length <= 0:
        return False
    function, number, ctypes = call
    page = mmap.PAGESIZE
    first, end = offset // page * page, -(-(offset + length) // page) * page
    span = (ctypes.c_uint64 * 2)(first, end - first)  # struct cachestat_range {off, len}
    stat = (ctypes.c_uint64 * 5)()  # struct cachestat: nr_cache, nr_dirty, nr_writeback, nr_evicted, ...
    found = function(ctypes.c_long(number), ctypes.c_uint(fd), ctypes.byref(span), ctypes.byref(stat), ctypes.c_uint(0))
    if found != 0:
        return False  # ENOSYS (older kernel), EBADF, EOPNOTSUPP (hugetlbfs)
    return int(stat[0]) >= (end - first) // page


class LocalFilesReadAhead:
    """Threads announcing whole files to the kernel (POSIX_FADV_WILLNEED), at most `window` bytes ahead.

    For containers with one file per value (Zarr chunk files): the files are
    read in the planned order, so `done(offset)` consumes the next planned
    file of non-zero size whatever the offset (entries of size 0 are small
    companions announced whole, such as an array's zarr.json, and count for
    nothing). Opening a file on a cold cache waits on the disk for each
    directory and inode on its path, so `threads` threads open every planned
    file in order (announcing the companions), however far ahead, several
    such waits in flight; one more thread announces the values' bytes behind
    them, at most `window` bytes ahead of the reader. `stop()` ends the
    threads and waits for them. A file that cannot be opened is skipped (the
    reader reports it).
    """

    def __init__(self, files: Sequence[tuple[str, int]], window: int, threads: int = 6) -> None:
        self._files = list(files)
        self._opened = [False] * len(self._files)
        self._taken = 0  # files handed to an opening thread
        self._issued = 0  # value bytes announced
        self._next = 0  # the next planned file the reader consumes
        self._consumed = 0
        self._window = window
        self._stopped = False
        import threading  # as LocalReadAhead

        self._cond = threading.Condition()
        openers = max(1, min(threads, len(self._files)))
        self._threads = [threading.Thread(target=self._open_ahead, name="varstore-readahead", daemon=True)
                         for _ in range(openers)]
        self._threads.append(threading.Thread(target=self._announce, name="varstore-readahead", daemon=True))
        for thread in self._threads:
            thread.start()

    def _open_ahead(self) -> None:
        files = self._files
        while True:
            with self._cond:
                if self._stopped or self._taken >= len(files):
                    return
                j = self._taken
                self._taken += 1
            path, nbytes = files[j]
            try:
                fd = open_for_reading(path)
            except OSError:  # also SpecialFileError: the reader reports it
                fd = -1
            if fd >= 0:
                try:
                    if not nbytes:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                except (OSError, AttributeError):
                    pass
                finally:
                    os.close(fd)
            with self._cond:
                self._opened[j] = True
                self._cond.notify_all()

    def _announce(self) -> None:
        for j, (path, nbytes) in enumerate(self._files):
            if not nbytes:
                continue
            with self._cond:
                while not self._stopped and (not self._opened[j] or self._issued - self._consumed >= self._window):
                    self._cond.wait()
                if self._stopped:
                    return
                self._issued += nbytes
            try:
                fd = open_for_reading(path)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, nbytes, os.POSIX_FADV_WILLNEED)
            except (OSError, AttributeError):
                return
            finally:
                os.close(fd)

    def done(self, offset: int) -> None:
        with self._cond:
            files = self._files
            while self._next < len(files):
                nbytes = files[self._next][1]
                self._next += 1
                if nbytes:
                    self._consumed += nbytes
                    self._cond.notify_all()
                    break

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

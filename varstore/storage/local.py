"""LocalStorage: the Storage protocol on a local file system, with positional I/O.

Reads are preadv straight into the caller's buffer; writes are pwrite straight
from it, large ones in 8 MiB pieces each handed to the disk at once
(sync_file_range write-back) into blocks reserved with posix_fallocate
(not on a tmpfs, where that only zero-fills pages: _fs_types.py).
Read-ahead announces planned extents to the kernel (POSIX_FADV_WILLNEED)
from a helper thread. Descriptors of single-file containers are cached.
Reads never open a FIFO, socket or device (special_files.py refuses them).
Never renames, never fsyncs, never creates temporaries (the commit is the
checkpoint layer's: varstore/checkpoint/publish/atomic.py); knows nothing about
formats, manifests or checksums.
"""

from __future__ import annotations

import _thread
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from varstore.errors import CorruptCheckpointError
from varstore.storage._fs_types import has_room, in_memory, path_in_memory
from varstore.storage._local_errors import permission_denied
from varstore.storage.protocol import Buffer
from varstore.storage.special_files import check_regular_file, open_for_reading

__all__ = ["LocalStorage", "LocalWriter", "LocalReadAhead", "LocalFilesReadAhead", "bytes_of", "pread_into", "pwrite_all", "start_writeback",
           "remove_path"]

#: Bytes per preadv/pwrite call (Linux caps single transfers near 2 GiB).
_MAX_IO = 1 << 30
#: Extents of at least this many bytes get their blocks reserved (posix_fallocate) before writing.
_FALLOCATE_BYTES = 1 << 20
#: Bytes written through one writer (in pieces of at most this size) before they are handed to disk
#: write-back together (durable saves).
_WRITEBACK_BYTES = 8 << 20
#: A file of its own (a Zarr chunk) holding at least this many unsent bytes is handed over when finished.
_WRITEBACK_MIN_FILE_BYTES = 64 << 10


def bytes_of(data: Buffer) -> memoryview:
    """A flat byte view of a bytes-like object or a C-contiguous array (no copy; 0-d and bfloat16 too)."""
    if isinstance(data, np.ndarray):
        data = data.reshape(-1).view(np.uint8)
    return memoryview(data).cast("B")  # type: ignore[arg-type]  # ndarray has the buffer protocol


def pwrite_all(fd: int, data: Buffer, offset: int) -> None:
    """Writes all of `data` (bytes-like or C-contiguous array) at byte `offset` of `fd`."""
    view = bytes_of(data)
    done = 0
    total = len(view)
    while done < total:
        done += os.pwrite(fd, view[done:done + _MAX_IO], offset + done)


def pread_into(fd: int, out: Buffer, offset: int, name: str) -> None:
    """Fills `out` (writable bytes-like or C-contiguous array) from byte `offset` of `fd`.

    Raises:
      CorruptCheckpointError: the file ends early (truncated); `name` names the file.
    """
    view = bytes_of(out)
    done = 0
    total = len(view)
    while done < total:
        count = os.preadv(fd, [view[done:done + _MAX_IO]], offset + done)
        if count == 0:
            raise CorruptCheckpointError(
                f"'{name}' is truncated: needed {total} bytes at offset {offset}, the file ends after {done}")
        done += count


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # looked up at the first write: a process that only reads never loads the C library

    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


#: sync_file_range once looked up (None where unavailable); _UNSET until the first write-back.
_UNSET: object = object()
_SYNC_FILE_RANGE: object = _UNSET
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Asks the kernel to start writing `nbytes` dirty bytes at `offset` of `fd` to disk now, without waiting.

    Linux sync_file_range(SYNC_FILE_RANGE_WRITE): the disk writes while the
    caller goes on copying the next values into the page cache, so the final
    fsync finds little left to do (a 1.2 GB save then beats one write + fsync).
    Durability still comes from fsync. A no-op where unavailable or refused.
    """
    global _SYNC_FILE_RANGE
    if nbytes <= 0:
        return
    function = _SYNC_FILE_RANGE
    if function is _UNSET:
        function = _SYNC_FILE_RANGE = _sync_file_range()
    if function is not None:
        function(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]  # errors ignored: fsync reports them


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


#: Files `_cached_already` looks at (evenly spread over the list).
_CACHE_SAMPLE_FILES = 8


def _cached_already(paths: Sequence[str]) -> bool:
    """True when the first and last byte of each of up to `_CACHE_SAMPLE_FILES` of `paths` (evenly spread)
    are in the page cache: read with RWF_NOWAIT, which fails instead of waiting for the disk. False when
    one is not, a file cannot be opened, or the kernel or file system cannot tell (no RWF_NOWAIT)."""
    nowait = getattr(os, "RWF_NOWAIT", None)
    if nowait is None or not paths:
        return False
    step = max(1, len(paths) // _CACHE_SAMPLE_FILES)
    probe = bytearray(1)
    for path in paths[::step][:_CACHE_SAMPLE_FILES]:
        try:
            fd = open_for_reading(path)
        except OSError:  # also SpecialFileError: the reader reports it
            return False
        try:
            size = os.fstat(fd).st_size
            for offset in {0, max(0, size - 1)} if size else ():
                os.preadv(fd, [probe], offset, nowait)
        except OSError:  # BlockingIOError: on the disk, not in memory; or RWF_NOWAIT unsupported here
            return False
        finally:
            os.close(fd)
    return True


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


class LocalWriter:
    """Positional writes into one local file (see StorageWriter)."""

    def __init__(self, storage: LocalStorage, key: str, fd: int, shared: bool) -> None:
        self.key = key
        self._storage = storage
        self._fd = fd
        self._shared = shared  # the descriptor belongs to the storage (kept open for later writers)
        self._reserved = False
        # bytes written since the last write-back request, and the range they lie in
        self._unsent = 0
        self._unsent_start = 0
        self._unsent_end = 0

    def reserve(self, nbytes: int) -> None:
        """Allocates the first `nbytes` bytes at once (posix_fallocate) when at least 1 MiB; best effort."""
        if nbytes < _FALLOCATE_BYTES:
            return
        try:
            # not on a tmpfs (it would zero-fill every page the writes then fill, issue 39), never past the free space
            if not in_memory(self._fd) and has_room(self._fd, nbytes):
                os.posix_fallocate(self._fd, 0, nbytes)
        except OSError:
            return
        self._reserved = True
        self._storage._reserved.add(self.key)

    def write_at(self, offset: int, data: Buffer) -> None:
        fd = self._fd
        view = bytes_of(data)
        nbytes = len(view)
        if nbytes >= _FALLOCATE_BYTES and not self._reserved and self.key not in self._storage._reserved:
            if in_memory(fd):  # nothing to reserve on a tmpfs: writes to this file never try again
                self._reserved = True
            elif has_room(fd, nbytes):
                try:  # reserve the blocks first: writes into allocated extents run ~2x faster on ext4
                    os.posix_fallocate(fd, offset, nbytes)
                except OSError:
                    pass
        if not self._storage.writeback:
            pwrite_all(fd, view, offset)
            return
        for start in range(0, nbytes, _WRITEBACK_BYTES):
            piece = view[start:start + _WRITEBACK_BYTES]
            pwrite_all(fd, piece, offset + start)
            self._written(offset + start, len(piece))

    def _written(self, offset: int, nbytes: int) -> None:
        """Counts bytes just written; every `_WRITEBACK_BYTES` of them go to disk write-back at once.

        Values of a few MiB each (a model's layers) used to be left to the final fsync, which then
        wrote the whole checkpoint: W1 at 0.25 scale (384 variables of ~0.8 MB) still had all
        289 MB dirty when its fsync began.
        """
        if self._unsent:
            self._unsent_start = min(self._unsent_start, offset)
            self._unsent_end = max(self._unsent_end, offset + nbytes)
        else:
            self._unsent_start, self._unsent_end = offset, offset + nbytes
        self._unsent += nbytes
        if self._unsent >= _WRITEBACK_BYTES:
            self._send()

    def _send(self) -> None:
        start_writeback(self._fd, self._unsent_start, self._unsent_end - self._unsent_start)
        self._unsent = 0

    def finish(self) -> None:
        if not self._shared and self._fd >= 0:
            if self._unsent >= _WRITEBACK_MIN_FILE_BYTES:  # a file of its own (a Zarr chunk): its bytes go now
                self._send()
            os.close(self._fd)
        self._fd = -1

    def abort(self) -> None:
        try:
            self.finish()
        except OSError:
            pass


class LocalStorage:
    """Files under a root directory of the local file system (see varstore.storage.protocol.Storage).

    Keys are paths relative to `root`; absolute paths (as the backends'
    RawExtent reports them) are taken as they are, so `LocalStorage()` takes
    ordinary paths. Thread-safe for reads and writes of different keys.

    Args:
      root: the directory keys are relative to (default: the working directory).
    """

    renames = True
    #: Large writes are handed to disk write-back at once (False for saves that skip fsync).
    writeback = True

    def __init__(self, root: os.PathLike[str] | str = ".") -> None:
        self.root = Path(root)
        self._root = os.fspath(self.root)
        self.url = self.root.absolute().as_uri()
        self._read_fds: dict[str, int] = {}   # keys held open for reading (keep_open)
        self._write_fds: dict[str, int] = {}  # keys shared by several writers
        self._reserved: set[str] = set()
        self._lock = _thread.allocate_lock()  # threading.Lock itself, without importing threading

    def path(self, key: str | os.PathLike[str]) -> Path:
        """The local path of `key`."""
        return self.root / key

    def _os_path(self, key: str) -> str:
        return os.path.join(self._root, key)  # an absolute key stays as it is

    def _open(self, key: str, flags: int) -> int:
        """os.open of `key` (new files 0o644; reads through open_for_reading, which never blocks on a FIFO);
        a refused access becomes CheckpointPermissionError naming it."""
        try:
            if flags == os.O_RDONLY:
                return open_for_reading(self._os_path(key))
            return os.open(self._os_path(key), flags, 0o644)
        except PermissionError as err:
            raise permission_denied(self._os_path(key), "write" if flags & os.O_WRONLY else "read") from err

    def __repr__(self) -> str:
        return f"<LocalStorage {self.url}>"

    # -- queries
    def exists(self, key: str) -> bool:
        return os.path.exists(self.path(key))

    def size(self, key: str) -> int:
        info = check_regular_file(self._os_path(key))  # a FIFO's 0 bytes would read as "truncated"
        if info is None:
            raise FileNotFoundError(2, "No such file or directory", self._os_path(key))
        return info.st_size

    def list(self, prefix: str) -> list[str]:
        base = self.path(prefix) if prefix else self.root
        if base.is_file():
            return [str(prefix)]
        found = []
        for directory, _, files in os.walk(base):
            for name in files:
                found.append(Path(directory, name).relative_to(self.root).as_posix())
        return sorted(found)

    # -- reads
    def keep_open(self, key: str) -> None:
        """Keeps `key`'s descriptor open until close() (a single-file checkpoint read many times), read sequentially.

        Raises:
          FileNotFoundError: no such file.
        """
        with self._lock:
            if key in self._read_fds:
                return
            fd = self._open(key, os.O_RDONLY)
            self._read_fds[key] = fd
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except (OSError, AttributeError):
            pass

    def read_range(self, key: str, offset: int, length: int, out: Buffer | None = None) -> Buffer:
        buffer: Buffer = bytearray(length) if out is None else out
        fd = self._read_fds.get(key)
        if fd is not None:
            pread_into(fd, buffer, offset, key)
            return buffer
        fd = self._open(key, os.O_RDONLY)
        try:
            pread_into(fd, buffer, offset, key)
        finally:
            os.close(fd)
        return buffer

    def read_all(self, key: str) -> bytes:
        with os.fdopen(self._open(key, os.O_RDONLY), "rb") as handle:
            return handle.read()

    def read_ahead(self, key: str, extents: Sequence[tuple[int, int]], window_bytes: int) -> LocalReadAhead | None:
        """None: the kernel's own read-ahead of a kept-open key (POSIX_FADV_SEQUENTIAL) does better.

        Measured on W1 (issue 11, cold cache): restore 69 ms without the
        LocalReadAhead thread, 110 ms with it (its WILLNEED requests compete
        with the reader's own large preadv calls). LocalReadAhead stays for
        storages whose reads are small.
        """
        return None

    def read_ahead_files(self, files: Sequence[tuple[str, int]], window_bytes: int) -> LocalFilesReadAhead | None:
        """Announces whole files ((key, nbytes) in the order they will be read) ahead of the reader;
        None for fewer than two files, on a tmpfs/ramfs, where the pages are memory already and the
        seven threads only cost CPU (W1 Zarr restore: ~15 ms of ~100, issue 39), or when a sample of the
        files is in the page cache already (`_cached_already`: W1 at 0.05 scale, 384 chunk files on
        ext4, page cache warm: restore 65-73 ms with the threads, 48-52 without)."""
        if len(files) < 2 or path_in_memory(self._os_path(files[0][0])):
            return None
        paths = [(self._os_path(key), nbytes) for key, nbytes in files]
        if _cached_already([path for path, _ in paths]):
            return None
        return LocalFilesReadAhead(paths, window_bytes)

    # -- writes
    def writer(self, key: str, *, keep_open: bool = False) -> LocalWriter:
        """A writer for `key` (created with its missing parent directories, as an object needs none;
        never truncated: writes land at their offsets)."""
        if keep_open:
            with self._lock:
                fd = self._write_fds.get(key)
                if fd is None:
                    fd = self._write_fds[key] = self._create(key)
            return LocalWriter(self, key, fd, True)
        return LocalWriter(self, key, self._create(key), False)

    def _create(self, key: str) -> int:
        try:
            return self._open(key, os.O_WRONLY | os.O_CREAT)
        except FileNotFoundError:  # a missing parent directory: made, then one more try
            os.makedirs(os.path.dirname(self._os_path(key)) or ".", exist_ok=True)
            return self._open(key, os.O_WRONLY | os.O_CREAT)

    def delete(self, key: str) -> None:
        remove_path(self.path(key))

    def close(self) -> None:
        with self._lock:
            fds = list(self._read_fds.values()) + list(self._write_fds.values())
            self._read_fds, self._write_fds = {}, {}
            self._reserved.clear()
        for fd in fds:
            os.close(fd)


def remove_path(path: Path) -> None:
    """Removes a file or directory tree (a symlink itself, never its target); a missing path is fine."""
    try:
        if path.is_dir() and not path.is_symlink():
            import shutil  # (which imports bz2, lzma and zlib) only when a tree is removed

            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except FileNotFoundError:
        pass

"""LocalStorage: the Storage protocol on a local file system, with positional I/O.

Reads are preadv straight into the caller's buffer; writes are pwrite straight
from it, large ones in 8 MiB pieces each handed to the disk at once
(sync_file_range write-back) into blocks reserved with posix_fallocate
(not on a tmpfs, where that only zero-fills pages: _fs_types.py).
Read-ahead (local_read_ahead.py) announces planned files to the kernel
(POSIX_FADV_WILLNEED) from helper threads, unless they are cached already.
Descriptors of single-file containers are cached.
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
from varstore.storage.local_read_ahead import (LocalFilesReadAhead, LocalReadAhead, cached_already, extents_cached,
                                               range_cached)
from varstore.storage.special_files import check_regular_file, open_for_reading

__all__ = ["LocalStorage", "LocalWriter", "LocalReadAhead", "LocalFilesReadAhead", "bytes_of", "pread_into",
           "pread_digest_into", "pwrite_all", "start_writeback", "remove_path", "DIGEST_PIECE_BYTES"]

#: Bytes per preadv/pwrite call (Linux caps single transfers near 2 GiB).
_MAX_IO = 1 << 30
#: Bytes read per piece when a read is digested on the way (pread_digest_into): the L2 cache of one core.
DIGEST_PIECE_BYTES = 1 << 20
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


def pread_digest_into(fd: int, out: Buffer, offset: int, name: str,
                      digest: Callable[[Buffer, int], int]) -> int | None:
    """`pread_into`, with `digest(piece, value)` (crc32c_raw's signature, from 0) run over each piece of
    DIGEST_PIECE_BYTES right after its read, while the piece is in the CPU's cache; returns the digest.
    Only when the bytes are memory already (a tmpfs, or every page in the page cache: range_cached);
    otherwise they are read in one call, undigested, and None is returned (the caller checks `out`).

    From memory the digest is nearly free: W1 (318 MiB in 75 values) from a tmpfs, one process: reads
    alone 48 ms of CPU; each value read, then its crc32c taken in a helper thread 73 ms; pieces of 1 MiB
    read then digested 53 ms, at the same wall time (issue 39). From a disk, one large read lets the
    kernel read ahead as far as it asks, and a helper thread's check overlaps the disk: W1 HDF5 restore
    after drop_caches, 1 MiB pieces cost 40% more wall time than one read per value.

    Raises:
      CorruptCheckpointError: the file ends early (truncated); `name` names the file.
    """
    view = bytes_of(out)
    total = len(view)
    if total and not (in_memory(fd) or range_cached(fd, offset, total)):
        pread_into(fd, view, offset, name)
        return None
    value = done = 0
    while done < total:
        piece = view[done:done + DIGEST_PIECE_BYTES]
        pread_into(fd, piece, offset + done, name)
        value = digest(piece, value)
        done += len(piece)
    return value


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

    def _reserve_for(self, offset: int, nbytes: int) -> None:
        """Reserves the blocks of a write of `nbytes` at `offset` first (writes into allocated extents run
        ~2x faster on ext4), unless the file was reserved whole, lies on a tmpfs, or the disk is short."""
        if nbytes >= _FALLOCATE_BYTES and not self._reserved and self.key not in self._storage._reserved:
            if in_memory(self._fd):  # nothing to reserve on a tmpfs: writes to this file never try again
                self._reserved = True
            elif has_room(self._fd, nbytes):
                try:
                    os.posix_fallocate(self._fd, offset, nbytes)
                except OSError:
                    pass

    def write_at(self, offset: int, data: Buffer) -> None:
        fd = self._fd
        view = bytes_of(data)
        nbytes = len(view)
        self._reserve_for(offset, nbytes)
        if not self._storage.writeback:
            pwrite_all(fd, view, offset)
            return
        for start in range(0, nbytes, _WRITEBACK_BYTES):
            piece = view[start:start + _WRITEBACK_BYTES]
            pwrite_all(fd, piece, offset + start)
            self._written(offset + start, len(piece))

    def write_at_digest(self, offset: int, data: Buffer, digest: Callable[[Buffer, int], int]) -> int:
        """`write_at`, returning `digest(piece, value)` (crc32c_raw's signature, from 0) taken over each piece
        of DIGEST_PIECE_BYTES just before the piece is written, so both read it from the CPU's cache. W1's 318
        MiB into a tmpfs, one thread: +7 ms of CPU over the writes alone, against +11 ms for a crc32c of each
        whole value first, and 20-25 ms in the engine's former split (the caller's crc32c from memory beside
        a writer thread; issue 39)."""
        fd = self._fd
        view = bytes_of(data)
        total = len(view)
        self._reserve_for(offset, total)
        writeback = self._storage.writeback
        value = done = 0
        while done < total:
            piece = view[done:done + DIGEST_PIECE_BYTES]
            value = digest(piece, value)
            pwrite_all(fd, piece, offset + done)
            if writeback:
                self._written(offset + done, len(piece))
            done += len(piece)
        return value

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

    def read_range_digest(self, key: str, offset: int, length: int, out: Buffer,
                          digest: Callable[[Buffer, int], int]) -> int | None:
        """`read_range` into `out`, returning `digest` taken over the bytes as they are read, or None when they
        were not all in memory and were read undigested (pread_digest_into)."""
        fd = self._read_fds.get(key)
        if fd is not None:
            return pread_digest_into(fd, out, offset, key, digest)
        fd = self._open(key, os.O_RDONLY)
        try:
            return pread_digest_into(fd, out, offset, key, digest)
        finally:
            os.close(fd)

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
        files is in the page cache already (`local_read_ahead.cached_already`: W1 at 0.05 scale, 384 chunk files on
        ext4, page cache warm: restore 65-73 ms with the threads, 48-52 without)."""
        if len(files) < 2 or path_in_memory(self._os_path(files[0][0])):
            return None
        paths = [(self._os_path(key), nbytes) for key, nbytes in files]
        if cached_already([path for path, _ in paths]):
            return None
        return LocalFilesReadAhead(paths, window_bytes)

    def resident(self, key: str, extents: Sequence[tuple[int, int]]) -> bool:
        """True when the planned `extents` ((offset, nbytes)) of `key` are memory already: the file lies on a
        tmpfs/ramfs, or a sample of the extents is in the page cache (`local_read_ahead.extents_cached`).
        A hint for residency.py (new arrays may take huge pages); False when it cannot tell."""
        path = self._os_path(key)
        return path_in_memory(path) or extents_cached(path, extents)

    def resident_files(self, files: Sequence[tuple[str, int]]) -> bool:
        """As `resident`, for whole files ((key, nbytes) in read order, Zarr chunk files)."""
        paths = [self._os_path(key) for key, _ in files]
        return bool(paths) and (path_in_memory(paths[0]) or cached_already(paths))

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

"""What format detection may look at, read once: a path's kind, size, first bytes, zip directory, HDF5 walk.

A Probe is made once per detection and handed to every format's sniff
function in turn (see varstore.formats.registry), so a file is opened once
however many formats look at it: the head (first 4 KiB) is read
when the probe is made, the tail, zip directory and HDF5 walk only when a
sniff first asks, and then cached. The HDF5 walk can be handed on to the
reader that claims the file (`take_hdf5`), so an HDF5 file is walked once.
Knows no format; decides nothing; never parses beyond what it is asked for.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from varstore.errors import CheckpointPermissionError, CorruptCheckpointError
from varstore.storage._local_errors import check_readable, naming_permission_errors
from varstore.storage.special_files import check_regular_file, open_for_reading

if TYPE_CHECKING:
    from types import TracebackType

    from varstore.backends.hdf5.walker import HDF5Walker

__all__ = ["Probe", "HEAD_BYTES", "HDF5_SIGNATURE"]

#: Bytes read from the start of a file when the probe is made (bytes).
HEAD_BYTES = 4096
#: HDF5 superblock signature; found at byte 0, 512, 1024, 2048, ... (a user block precedes it).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_TAIL_BYTES = 64


class Probe:
    """One path as format detection sees it; opens the file at most once.

    Attributes:
      path: the path probed (need not exist: a TF bundle prefix does not).
      exists, is_dir, is_file: what is at `path`.
      size: file size in bytes (0 for directories and missing paths).
      head: the first min(size, 4096) bytes of a file (b"" otherwise), read when the probe is made.
      name: the file name in lower case ("model.weights.h5"); suffix: its last suffix (".h5").

    Use as a context manager, or call close(): it closes the file handle and an
    HDF5 walk no reader took.
    """

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Stats `path` and, for a file, opens it and reads its head (one read).

        Raises nothing for a missing path (exists says so).

        Raises:
          CheckpointPermissionError: the file or directory may not be read ("cannot read '<path>': permission denied").
          SpecialFileError: a FIFO, socket, device or symlink loop (refused after a stat, never opened).
        """
        check_regular_file(path, "file to import")
        self.path = Path(path)
        self.name = self.path.name.lower()
        self.suffix = self.path.suffix.lower()
        self.exists = self.path.exists()
        self.is_dir = self.exists and self.path.is_dir()
        self.is_file = self.exists and not self.is_dir
        self.size = 0
        self.head = b""
        self._tail: bytes | None = None
        self._handle: IO[bytes] | None = None
        self._zip_names: list[str] | None = None
        self._zip_done = False
        self._is_hdf5: bool | None = None
        self._walker: HDF5Walker | None = None
        self._walker_error: CorruptCheckpointError | None = None
        if self.is_dir:  # a file is checked by the one open below (permission and special files alike)
            check_readable(self.path)
        if self.is_file:
            try:
                with naming_permission_errors(self.path):
                    self._handle = os.fdopen(open_for_reading(self.path), "rb")  # closed in close()
                    self.size = os.fstat(self._handle.fileno()).st_size
                    self.head = self._handle.read(HEAD_BYTES)
            except CheckpointPermissionError:
                self.close()
                raise
            except OSError:
                self.close()
                self.size = self.path.stat().st_size if self.path.exists() else 0

    def read_at(self, offset: int, count: int) -> bytes:
        """Up to `count` bytes at byte `offset` of the file (b"" for directories and unreadable files)."""
        if offset + count <= len(self.head):
            return self.head[offset:offset + count]
        if self._handle is None:
            return b""
        self._handle.seek(offset)
        return self._handle.read(count)

    @property
    def tail(self) -> bytes:
        """The last min(size, 64) bytes of the file (b"" for directories); read on first use, cached."""
        if self._tail is None:
            self._tail = self.read_at(max(0, self.size - _TAIL_BYTES), min(self.size, _TAIL_BYTES))
        return self._tail

    @property
    def is_zip(self) -> bool:
        """True when the file starts with a zip signature (its directory may still be unreadable)."""
        return self.head[:4] in _ZIP_MAGICS

    @property
    def zip_names(self) -> list[str] | None:
        """The member names of a readable zip archive, or None (not a zip, or a damaged one). Cached."""
        if not self._zip_done:
            self._zip_done = True
            if self.is_zip and self._handle is not None:
                try:
                    self._handle.seek(0)
                    with zipfile.ZipFile(self._handle) as archive:
                        self._zip_names = archive.namelist()
                except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
                        NotImplementedError, RuntimeError):  # NotImplementedError: a damaged "version needed"
                    self._zip_names = None
        return self._zip_names

    @property
    def is_hdf5(self) -> bool:
        """True when an HDF5 superblock signature is at byte 0, 512, 1024, 2048, ... of the file. Cached."""
        if self._is_hdf5 is None:
            found = False
            offset = 0
            while offset + len(HDF5_SIGNATURE) <= self.size:
                if self.read_at(offset, len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    found = True
                    break
                offset = 512 if offset == 0 else offset * 2
            self._is_hdf5 = found
        return self._is_hdf5

    def hdf5(self) -> HDF5Walker:
        """The file walked as HDF5 (metadata only), opened on first call and cached.

        Raises:
          CorruptCheckpointError: h5py cannot open or walk the file (raised again on every call).
        """
        if self._walker is None:
            if self._walker_error is not None:
                raise self._walker_error
            from varstore.backends.hdf5.walker import HDF5Walker

            try:
                self._walker = HDF5Walker(self.path)
            except CorruptCheckpointError as err:
                self._walker_error = err
                raise
        return self._walker

    def take_hdf5(self) -> HDF5Walker | None:
        """Hands the cached HDF5 walk to the caller (who must close it), or None when none was made."""
        walker, self._walker = self._walker, None
        return walker

    def close(self) -> None:
        """Closes the file handle and any HDF5 walk not taken."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._walker is not None:
            self._walker.close()
            self._walker = None

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

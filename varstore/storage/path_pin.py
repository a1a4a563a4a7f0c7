"""Pinning a local checkpoint path while it is read: CheckpointReplacedError once a save has replaced it.

A save replaces a checkpoint by an atomic rename (a file) or exchange (a Zarr
directory), so the path names a new inode afterwards while the old one lives
on as long as a descriptor holds it. A pin holds a descriptor of what the path
named at open and remembers its (device, inode); a read is whole when the
path still names that inode after it (the held descriptor keeps the number
from being reused, and a replaced path never names the old inode again).
A single file needs that check only where something opens it by name again:
every read through a descriptor of the pinned inode is whole, so a file pin's
guard() is free and an HDF5 reader keeps reading a file retention deleted.
`pin_local` gives a reader what it asks of local storage, in one call: the
pin, a LocalStorage and, for a file, its descriptor kept open. Reads nothing
itself, never writes; object stores pin with ETags instead (object_storage.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import functools
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

from varstore.errors import CheckpointReplacedError
from varstore.storage.local import LocalStorage
from varstore.storage.special_files import open_for_reading

__all__ = ["PathPin", "NO_PIN", "pinned", "pin_local"]


class _HasClose(Protocol):
    def close(self) -> None: ...


_Closable = TypeVar("_Closable", bound=_HasClose)


class PathPin:
    """What a local path named when it was opened.

    Args:
      path: the checkpoint file or Zarr directory, local.

    Raises:
      SpecialFileError: a FIFO, socket, device or symlink loop at `path`.
      OSError: `path` cannot be opened (FileNotFoundError when it is gone).
    """

    def __init__(self, path: os.PathLike[str] | str | None) -> None:
        self.path = None if path is None else os.fspath(path)
        self._fd = -1
        self._token: tuple[int, int] | None = None
        self._by_name = False  # a directory: its files are opened by name on every read
        if self.path is not None:
            self._fd = open_for_reading(self.path)
            info = os.fstat(self._fd)
            self._token = (info.st_dev, info.st_ino)
            self._by_name = stat.S_ISDIR(info.st_mode)

    @property
    def guards_reads(self) -> bool:
        """True when reads need `check` after them (a directory's files are opened by name; see guard)."""
        return self._by_name

    def replaced(self) -> bool:
        """True when the path no longer names the pinned file or directory (replaced or removed)."""
        if self._token is None:
            return False
        try:
            info = os.stat(self.path)  # type: ignore[arg-type]  # set whenever _token is
        except OSError:
            return True
        return (info.st_dev, info.st_ino) != self._token

    def check(self, cause: BaseException | None = None) -> None:
        """Raises CheckpointReplacedError when the path was replaced since the pin (chained to `cause`)."""
        if self.replaced():
            raise CheckpointReplacedError(self._message()) from cause

    def _message(self) -> str:
        return (f"checkpoint '{self.path}' was replaced (or removed) by another save while it was being "
                f"read; nothing read from it was returned. Open it again")

    def vouch(self, opened: _Closable) -> _Closable:
        """Returns `opened` (something that just opened the path by name, e.g. an h5py file) when the path
        still names the pinned file; else closes it and raises CheckpointReplacedError."""
        try:
            self.check()
        except CheckpointReplacedError:
            opened.close()
            raise
        return opened

    @contextlib.contextmanager
    def opening(self, close: Callable[[], None]) -> Iterator[None]:
        """Runs the open of a checkpoint (reading its metadata): raises CheckpointReplacedError when the
        path was replaced by its end (for a file too: whatever opened it by name meanwhile may hold the
        new one), also in place of the open's own error; calls `close` on any failure."""
        try:
            yield
            self.check()
        except BaseException as err:
            replaced = isinstance(err, Exception) and not isinstance(err, CheckpointReplacedError) and self.replaced()
            close()
            if replaced:
                raise CheckpointReplacedError(self._message()) from err
            raise

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Runs a read of a directory's files by name; raises CheckpointReplacedError when the path was
        replaced by its end, also in place of the read's own error (a chunk of the old checkpoint deleted
        under it, a manifest that no longer matches): neither half-read values nor a healthy checkpoint
        blamed as corrupt. Free for a file pin (its reads go through descriptors: see check)."""
        if not self._by_name:
            yield
            return
        try:
            yield
        except Exception as err:
            self.check(err)
            raise
        self.check()

    def close(self) -> None:
        """Releases the descriptor (idempotent)."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


#: The pin of a checkpoint read some other way (an object store, whose ETags do this job): never replaced.
NO_PIN = PathPin(None)


def pin_local(path: os.PathLike[str] | str) -> tuple[LocalStorage, str, PathPin]:
    """(storage, key, pin) for reading the local checkpoint at `path`: the PathPin taken first, then a
    LocalStorage with a regular file's descriptor kept open (keep_open: every read through it); a
    directory's files are opened by name as they are read.

    Raises:
      SpecialFileError, OSError: as PathPin (the pin is released when keeping the file open fails).
    """
    pin = PathPin(path)
    storage, key = LocalStorage(), os.fspath(path)
    if not pin.guards_reads:
        try:
            storage.keep_open(key)
        except BaseException:
            pin.close()
            raise
    return storage, key, pin


_Method = TypeVar("_Method", bound=Callable[..., Any])


def pinned(method: _Method) -> _Method:
    """Runs a reader's method inside its pin's guard() (the reader keeps its PathPin as `_pin`)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._pin.guard():
            return method(self, *args, **kwargs)

    return cast(_Method, run)

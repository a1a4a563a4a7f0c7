"""Refusing special files: a FIFO, socket or device (or a symlink loop) where a checkpoint file should be.

Checks with a stat, or opens with O_NONBLOCK and checks the descriptor with
fstat, so nothing blocks on a FIFO and nothing reads from a device. Raises
SpecialFileError naming the path and what stands there. Never reads file
content, never writes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from varstore.errors import SpecialFileError

__all__ = ["check_regular_file", "check_tree", "is_special", "open_for_reading", "read_regular_file"]

_KINDS = ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"))


def _kind(mode: int) -> str | None:
    """What a special file is, or None for a regular file or directory."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "special file"


def _refuse(path: os.PathLike[str] | str, kind: str, what: str) -> SpecialFileError:
    return SpecialFileError(
        f"'{os.fspath(path)}' ({what}) is a {kind}, not a regular file or directory: varstore never opens "
        f"one for reading (it could block forever or read a device); replace it with the real file")


def _loop(path: os.PathLike[str] | str, what: str, err: OSError) -> SpecialFileError:
    return SpecialFileError(
        f"'{os.fspath(path)}' ({what}) is a symlink loop (too many levels of symbolic links); "
        f"point the link at the real file")


def check_regular_file(path: os.PathLike[str] | str, what: str = "checkpoint file") -> os.stat_result | None:
    """Stats `path` (following symlinks) and refuses anything but a regular file or directory.

    Args:
      path: the local path about to be opened.
      what: what the path is for, for the message ("checkpoint file", "chunk of 'w'").

    Returns:
      The stat result, or None when nothing is there (the caller reports a missing file its own way).

    Raises:
      SpecialFileError: a FIFO, socket or device stands there, or a symlink loop.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _loop(path, what, err) from err
        raise
    kind = _kind(info.st_mode)
    if kind is not None:
        raise _refuse(path, kind, what)
    return info


def is_special(path: os.PathLike[str] | str) -> bool:
    """True when a FIFO, socket, device or symlink loop stands at `path` (one stat; never opens it)."""
    try:
        check_regular_file(path)
    except SpecialFileError:
        return True
    except OSError:
        return False
    return False


def open_for_reading(path: os.PathLike[str] | str, what: str = "checkpoint file") -> int:
    """os.open(path, O_RDONLY) that never blocks on a FIFO: opened with O_NONBLOCK, checked with fstat.

    Returns:
      A descriptor of a regular file or directory (blocking mode restored).

    Raises:
      SpecialFileError: a FIFO, socket or device, or a symlink loop.
      OSError: as os.open (FileNotFoundError for a missing file).
    """
    fd = _open_checked(path, what)
    try:
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_checked(path: os.PathLike[str] | str, what: str) -> int:
    """open_for_reading's descriptor, still non-blocking (which changes nothing for a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _loop(path, what, err) from err
        if err.errno == errno.ENXIO:  # a socket (or a device with no driver): opening it fails this way
            check_regular_file(path, what)
        raise
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _refuse(path, kind, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: os.PathLike[str] | str, what: str = "checkpoint file") -> bytes:
    """The whole content of a (small) file, opened as open_for_reading opens it and read through that
    one descriptor: no Python file object, no blocking-mode round trip (a Zarr reader's zarr.json
    documents, one per array: issue 39).

    Raises:
      SpecialFileError: a FIFO, socket or device, or a symlink loop (never read).
      OSError: as os.open and os.read (IsADirectoryError for a directory).
    """
    fd = _open_checked(path, what)
    try:
        parts: list[bytes] = []
        while True:
            part = os.read(fd, 1 << 16)
            if not part:
                return b"".join(parts)
            parts.append(part)
    finally:
        os.close(fd)


def check_tree(root: os.PathLike[str] | str, what: str = "checkpoint") -> None:
    """Refuses a directory tree (a Zarr checkpoint) holding any FIFO, socket, device or symlink loop.

    One os.scandir walk: entries' types come from the directory listing, only
    symlinks are stat'ed (a symlinked directory is checked, not descended into).

    Raises:
      SpecialFileError: naming the first such entry.
    """
    pending = [Path(root)]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_symlink():
                check_regular_file(entry.path, f"in {what} '{os.fspath(root)}'")
            elif entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                kind = _kind(entry.stat(follow_symlinks=False).st_mode) or "special file"
                raise _refuse(entry.path, kind, f"in {what} '{os.fspath(root)}'")

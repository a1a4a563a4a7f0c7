"""Symlinks inside a checkpoint: a file read from it must resolve inside it; the manager's own files are never links.

Readers of directory checkpoints (TF data shards, DCP and Orbax files, Zarr chunks) ask `check_inside` before
they open a file, or `refuse_links_leading_out` once for a whole tree before a library (zarr-python,
tensorstore) opens files itself. A symlink whose target stays inside the checkpoint is allowed (a
de-duplicated checkpoint); one leading out raises PathOutsideCheckpointError naming the link and its
target. The checkpoint path the user gives may itself be a symlink: only links inside it are checked.
`open_unlinked` opens a CheckpointManager's lock and pointer with O_NOFOLLOW. Reads no file content.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from varstore.errors import PathOutsideCheckpointError, SpecialFileError
from varstore.storage.special_files import check_regular_file

__all__ = ["check_inside", "links_leading_out", "open_unlinked", "refuse_links_leading_out"]


def _real(path: os.PathLike[str] | str) -> str:
    return os.path.realpath(path)


def _outside(root_real: str, target_real: str) -> bool:
    return target_real != root_real and not target_real.startswith(root_real.rstrip(os.sep) + os.sep)


def check_inside(root: os.PathLike[str] | str, path: os.PathLike[str] | str, what: str) -> Path:
    """`path` (a file of the checkpoint at `root`), checked to resolve inside `root` (symlinks followed).

    Args:
      root: the checkpoint directory (itself possibly a symlink: resolved first).
      path: the file about to be opened, `root` joined with the names the format gives.
      what: what the file is, for the message ("data shard of 'w'").

    Raises:
      PathOutsideCheckpointError: `path`, or a directory on the way, is a symlink leading out of `root`;
        the message names the file, where it leads and the checkpoint. Nothing is opened.
    """
    root_real, target = _real(root), _real(path)
    if _outside(root_real, target):
        raise PathOutsideCheckpointError(
            f"'{os.fspath(path)}' ({what}) is a symlink, or lies under one, leading to '{target}', outside the "
            f"checkpoint '{os.fspath(root)}'; varstore never reads outside the checkpoint it opens: replace "
            f"the link with the file itself")
    return Path(path)


def links_leading_out(root: os.PathLike[str] | str) -> list[str]:
    """Relative paths of the symlinks under `root` whose targets lie outside it (links are not descended)."""
    root_real = _real(root)
    found = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            full = os.path.join(directory, name)
            if os.path.islink(full) and _outside(root_real, _real(full)):
                found.append(Path(full).relative_to(root).as_posix())
    return sorted(found)


def refuse_links_leading_out(root: os.PathLike[str] | str, what: str) -> None:
    """Refuses a checkpoint directory holding any symlink that leads out of it (one walk, nothing opened).

    Args:
      root: the checkpoint directory.
      what: the format's words for it ("Orbax checkpoint").

    Raises:
      PathOutsideCheckpointError: naming the first such link, its target and how many there are.
    """
    found = links_leading_out(root)
    if found:
        first = Path(root) / found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise PathOutsideCheckpointError(
            f"{what} '{os.fspath(root)}': '{found[0]}'{more} is a symlink leading to '{_real(first)}', outside "
            f"the checkpoint; varstore never reads outside the checkpoint it opens: replace the link with the "
            f"file itself")


def open_unlinked(path: os.PathLike[str] | str, what: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """os.open(path, flags | O_NOFOLLOW) for a file only varstore writes (a manager's lock or pointer).

    Opened with O_NONBLOCK and checked with fstat, so a FIFO never blocks; O_CREAT in `flags` creates
    the file in its directory, never a symlink's target.

    Returns:
      A descriptor of a regular file (blocking mode restored).

    Raises:
      PathOutsideCheckpointError: `path` is a symlink (nothing is opened or created through it).
      SpecialFileError: a FIFO, socket, device or directory stands there.
      OSError: as os.open (FileNotFoundError without O_CREAT).
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.EEXIST and os.path.islink(path)):
            target = os.readlink(path) if os.path.islink(path) else "?"
            raise PathOutsideCheckpointError(
                f"'{os.fspath(path)}' ({what}) is a symlink to '{target}'; varstore never follows a link "
                f"for its own files, so nothing was opened or created through it: remove the link") from err
        if err.errno == errno.EISDIR:
            raise SpecialFileError(f"'{os.fspath(path)}' ({what}) is a directory, not a regular file: "
                                   f"remove it") from err
        raise
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            check_regular_file(path, what)  # names a FIFO, socket or device as special_files words it
            raise SpecialFileError(f"'{os.fspath(path)}' ({what}) is not a regular file; varstore never "
                                   f"opens one there: remove it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd

"""Finding the checkpoints of a CheckpointManager directory without a manager: latest and listing.

`latest_checkpoint(directory)` is tf.train.latest_checkpoint for varstore
directories: the "latest" pointer's target when it exists, else the highest
"<name>-<step>.h5/.zarr". `list_checkpoints` gives each one's step, creation
time, size and whether it is the latest (for `varstore ls DIR --checkpoints`).
Reads the pointer, directory listings and checkpoint headers; never writes.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
from pathlib import Path

from varstore.checkpoint.atomic import is_temporary
from varstore.storage.special_files import is_special

__all__ = ["ManagedCheckpoint", "is_manager_directory", "latest_checkpoint", "list_checkpoints"]

_POINTER = "latest"
_MANAGED = re.compile(r"^(?P<name>.+)-(?P<step>\d+)(?P<suffix>\.h5|\.zarr)$")


@dataclasses.dataclass(frozen=True)
class ManagedCheckpoint:
    """One checkpoint of a manager directory.

    Attributes:
      path: the checkpoint file or directory.
      step: the step in its name.
      created_utc: when it was written ("2026-01-02T03:04:05.123456Z": the
        checkpoint's own record, or the file's modification time when unreadable).
      nbytes: bytes on disk (all files of a Zarr directory).
      latest: True for the one the "latest" pointer (or the highest step) names.
    """

    path: Path
    step: int
    created_utc: str
    nbytes: int
    latest: bool


def _pointer(directory: Path) -> str | None:
    try:
        with open(directory / _POINTER, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    name = state.get("latest") if isinstance(state, dict) else None
    return name if isinstance(name, str) and "/" not in name and _MANAGED.match(name) else None


def _scan(directory: Path) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [(int(m.group("step")), name) for name in names
             if (m := _MANAGED.match(name)) is not None and not is_temporary(name)
             and not is_special(directory / name)]  # a FIFO or a symlink loop is no checkpoint
    return sorted(found)


def is_manager_directory(path: os.PathLike[str] | str) -> bool:
    """True for a directory (not itself a Zarr checkpoint) with a "latest" pointer or "<name>-<step>.h5/.zarr" entries."""
    path = Path(path)
    if not path.is_dir() or (path / "zarr.json").exists():
        return False
    return _pointer(path) is not None or bool(_scan(path))


def latest_checkpoint(directory: os.PathLike[str] | str) -> Path | None:
    """The newest checkpoint of a CheckpointManager directory (as tf.train.latest_checkpoint), or None.

    The "latest" pointer's target when it exists; else the highest step among
    "<name>-<step>.h5" / ".zarr" entries (temporaries never count).
    """
    directory = Path(directory)
    name = _pointer(directory)
    if name is not None and (directory / name).exists():
        return directory / name
    scanned = _scan(directory)
    return directory / scanned[-1][1] if scanned else None


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum((Path(root) / f).lstat().st_size for root, _, files in os.walk(path) for f in files)  # links not followed


def _created(path: Path) -> str:
    from varstore.checkpoint.reader import open_varstore
    from varstore.errors import VarstoreError

    try:
        reader = open_varstore(path)
        try:
            if isinstance(reader.created_utc, str):
                return reader.created_utc
        finally:
            reader.close()
    except (VarstoreError, OSError):
        pass
    stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def list_checkpoints(directory: os.PathLike[str] | str) -> list[ManagedCheckpoint]:
    """Every "<name>-<step>.h5/.zarr" checkpoint in `directory`, oldest step first, the latest marked
    (a FIFO, socket, device or symlink loop under such a name is not listed)."""
    directory = Path(directory)
    latest = latest_checkpoint(directory)
    out = []
    for step, name in _scan(directory):
        path = directory / name
        try:
            out.append(ManagedCheckpoint(path, step, _created(path), _size(path), path == latest))
        except FileNotFoundError:  # removed by retention meanwhile
            continue
    return out

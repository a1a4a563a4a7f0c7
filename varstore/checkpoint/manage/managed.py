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
from collections.abc import Mapping
from pathlib import Path

from varstore.checkpoint.publish.atomic import is_temporary
from varstore.storage import is_remote
from varstore.storage.links import open_unlinked
from varstore.storage._local_errors import check_readable
from varstore.storage.special_files import is_special

__all__ = ["ManagedCheckpoint", "is_manager_directory", "latest_checkpoint", "list_checkpoints"]

_POINTER = "latest"
_MANAGED = re.compile(r"^(?P<name>.+)-(?P<step>\d+)(?P<suffix>\.h5|\.zarr)$")


@dataclasses.dataclass(frozen=True)
class ManagedCheckpoint:
    """One checkpoint of a manager directory.

    Attributes:
      path: the checkpoint file or directory (its URL, a str, on an object store).
      step: the step in its name.
      created_utc: when it was written ("2026-01-02T03:04:05.123456Z": the
        checkpoint's own record, or the file's modification time when unreadable).
      nbytes: bytes on disk (all files of a Zarr directory).
      latest: True for the one the "latest" pointer (or the highest step) names.
    """

    path: Path | str
    step: int
    created_utc: str
    nbytes: int
    latest: bool


def _pointer(directory: Path) -> str | None:
    try:
        # never through a symlink (the manager writes its pointer by rename only), never more than 16 MiB
        with os.fdopen(open_unlinked(directory / _POINTER, "the manager's \"latest\" pointer"), "rb") as handle:
            state = json.loads(handle.read(16 << 20))
    except (OSError, ValueError, RecursionError):  # nested too deep: no usable pointer, as a missing one
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


def is_manager_directory(path: os.PathLike[str] | str,
                         storage_options: Mapping[str, object] | None = None) -> bool:
    """True for a directory (not itself a Zarr checkpoint) with a "latest" pointer or "<name>-<step>.h5/.zarr" entries.

    An object-store URL (s3://bucket/runs/b2) counts as it would on a local disk:
    its "latest" pointer object or committed "<name>-<step>" checkpoints
    directly under it (one HEAD and one LIST; `storage_options` as for save).

    Raises:
      CheckpointPermissionError: `path` is a directory that may not be read.
    """
    if is_remote(path):
        return _remote_latest(path, storage_options) is not None
    path = Path(path)
    if not path.is_dir() or not check_readable(path) or (path / "zarr.json").exists():
        return False
    return _pointer(path) is not None or bool(_scan(path))


def latest_checkpoint(directory: os.PathLike[str] | str,
                      storage_options: Mapping[str, object] | None = None) -> Path | str | None:
    """The newest checkpoint of a CheckpointManager directory (as tf.train.latest_checkpoint), or None.

    The "latest" pointer's target when it exists; else the highest step among
    "<name>-<step>.h5" / ".zarr" entries (temporaries never count). For an
    object-store URL the same rules give the checkpoint's URL (a str).
    """
    if is_remote(directory):
        return _remote_latest(directory, storage_options)
    directory = Path(directory)
    name = _pointer(directory)
    if name is not None and (directory / name).exists():
        return directory / name
    scanned = _scan(directory)
    return directory / scanned[-1][1] if scanned else None


def _remote_latest(url: os.PathLike[str] | str, storage_options: Mapping[str, object] | None) -> str | None:
    """latest_checkpoint for a manager directory on an object store (see remote_manager.py), or None."""
    from varstore.checkpoint.manage.remote_manager import remote_directory  # the object-store client: only for URLs

    remote = remote_directory(url, storage_options)
    if remote is None:
        return None
    state, _ = remote.read_state(_POINTER)
    name = state.get("latest")
    if isinstance(name, str) and "/" not in name and _MANAGED.match(name) and remote.exists(name):
        return remote.location(name)
    found = sorted((int(m.group("step")), entry) for entry in remote.names()
                   if (m := _MANAGED.match(entry)) is not None and not is_temporary(entry))
    return remote.location(found[-1][1]) if found else None


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum((Path(root) / f).lstat().st_size for root, _, files in os.walk(path) for f in files)  # links not followed


def _created(path: Path) -> str:
    from varstore.checkpoint.read.reader import open_varstore
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


def list_checkpoints(directory: os.PathLike[str] | str,
                     storage_options: Mapping[str, object] | None = None) -> list[ManagedCheckpoint]:
    """Every "<name>-<step>.h5/.zarr" checkpoint in `directory`, oldest step first, the latest marked
    (a FIFO, socket, device or symlink loop under such a name is not listed).

    An object-store URL is listed as a local directory is (its checkpoints' paths are URLs; sizes from
    one listing; creation times from each checkpoint's record, else the newest object's time).
    """
    if is_remote(directory):
        return _remote_list(directory, storage_options)
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


def _remote_list(url: os.PathLike[str] | str, storage_options: Mapping[str, object] | None) -> list[ManagedCheckpoint]:
    """list_checkpoints for a manager directory on an object store: one LIST, one manifest read per checkpoint."""
    from varstore.checkpoint.read.reader import open_varstore
    from varstore.checkpoint.manage.remote_manager import remote_directory  # the object-store client: only for URLs
    from varstore.errors import VarstoreError

    remote = remote_directory(url, storage_options)
    if remote is None:
        return []
    latest = _remote_latest(url, storage_options)
    sizes: dict[str, int] = {}
    times: dict[str, datetime.datetime] = {}
    base = f"{remote.prefix}/" if remote.prefix else ""
    for info in remote.storage.list_info(remote.prefix):
        entry = info.name[len(base):].split("/", 1)[0]
        sizes[entry] = sizes.get(entry, 0) + info.size
        times[entry] = max(times.get(entry, info.last_modified), info.last_modified)
    out = []
    for entry in sorted(remote.names(), key=lambda n: int(m.group("step")) if (m := _MANAGED.match(n)) else -1):
        match = _MANAGED.match(entry)
        if match is None or is_temporary(entry) or entry not in sizes:
            continue
        location = remote.location(entry)
        created = times[entry].astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            reader = open_varstore(location, storage_options=storage_options)
            try:
                if isinstance(reader.created_utc, str):
                    created = reader.created_utc
            finally:
                reader.close()
        except (VarstoreError, OSError):
            pass
        out.append(ManagedCheckpoint(location, int(match.group("step")), created, sizes[entry], location == latest))
    return out

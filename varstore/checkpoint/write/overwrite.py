"""May a save replace what is at its destination? The one rule for save, convert and CheckpointManager.

Only a varstore checkpoint of the same format (an HDF5 file for "h5", a Zarr
v3 directory for "zarr"), an empty directory (Zarr) or nothing at all may be
replaced without `overwrite=True`. Anything else, a plain file, a directory
with other content, another tool's HDF5 file (a Keras `.h5`), a varstore
checkpoint of the other format, or a symlink (whose target a replacement
would hide), raises CheckpointExistsError naming the path and what is there.
Only looks; never writes, renames or deletes (atomic.py does the replacing).
"""

from __future__ import annotations

import os
from pathlib import Path

from varstore.backends import get_backend
from varstore.checkpoint.publish.remote import check_replaceable_remote
from varstore.errors import CheckpointExistsError
from varstore.storage import ObjectStore, Storage, is_remote
from varstore.storage import url_from_path

__all__ = ["describe", "check_replaceable", "same_file"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_FORMAT_WORDS = {"h5": "HDF5", "zarr": "Zarr"}


def _is_hdf5(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            offset = 512
            while head != _HDF5_SIGNATURE and offset <= (1 << 20):
                handle.seek(offset)
                head = handle.read(8)
                if not head:
                    return False
                offset *= 2
    except OSError:
        return False
    return head == _HDF5_SIGNATURE


def _has_varstore_index_header(path: Path) -> bool:
    """True when the file starts with varstore's index header (one 512-byte read; the manifest is not read)."""
    from varstore.checkpoint.format.manifest import INDEX_HEADER_BYTES, decode_index_header

    try:
        with open(path, "rb") as handle:
            return decode_index_header(handle.read(INDEX_HEADER_BYTES)) is not None
    except OSError:
        return False


def _hdf5_kind(path: Path) -> str:
    """"a Keras HDF5 file" or "an HDF5 file not written by varstore"."""
    try:
        from varstore.backends.hdf5.walker import HDF5Walker

        walker = HDF5Walker(path)
        try:
            top = {g.path for g in walker.groups if g.path and "/" not in g.path}
            root = walker.root_attrs
            keras = ("layer_names" in root or "keras_version" in root or walker.group_attrs("model_weights")
                     is not None or bool(top & {"layers", "vars", "_layer_checkpoint_dependencies"}))
        finally:
            walker.close()
    except Exception:  # noqa: BLE001 - a damaged HDF5 file is still not ours to replace
        return "an HDF5 file not written by varstore"
    return "a Keras HDF5 file" if keras else "an HDF5 file not written by varstore"


def describe(path: os.PathLike[str] | str) -> str | None:
    """What is at `path` in words ("a plain file (12 bytes)", "a varstore Zarr checkpoint", ...); None: nothing."""
    from varstore.checkpoint.read.detection import is_varstore_checkpoint

    path = Path(path)
    if path.is_symlink():
        return f"a symlink to '{os.readlink(path)}'"
    if not path.exists():
        return None
    if path.is_dir():
        if is_varstore_checkpoint(path):
            return "a varstore Zarr checkpoint"
        try:
            count = len(os.listdir(path))
        except OSError:
            count = -1
        if count == 0:
            return "an empty directory"
        entries = "" if count < 0 else f" with {count} {'entry' if count == 1 else 'entries'}"
        return f"a directory{entries} that is not a varstore checkpoint"
    if not path.is_file():
        return "a special file (not a regular file or directory)"
    if _is_hdf5(path):
        if _has_varstore_index_header(path) or is_varstore_checkpoint(path):
            return "a varstore HDF5 checkpoint"
        return _hdf5_kind(path)
    size = path.stat().st_size
    return f"a plain file ({size} bytes) that is not a checkpoint"


def check_replaceable(path: os.PathLike[str] | str, fmt: str, overwrite: bool = False,
                      advice: str = "pass overwrite=True to replace it", storage: Storage | None = None) -> None:
    """Raises unless a checkpoint of format `fmt` ("h5" or "zarr") may be written at `path`.

    Args:
      path: the final path of the save.
      fmt: "h5" (a file) or "zarr" (a directory).
      overwrite: True allows replacing anything (the caller asked explicitly).
      advice: the end of the message (the CLI says "pass --force").
      storage: where `path` is, when it is an object-store URL (the same rule, checkpoint/publish/remote.py).

    Raises:
      CheckpointExistsError: something other than nothing, an empty directory
        (zarr) or a varstore checkpoint of format `fmt` is at `path`.
    """
    if overwrite:
        return
    if is_remote(path):
        check_replaceable_remote(str(url_from_path(path)), fmt,
                                 storage if isinstance(storage, ObjectStore) else None, advice)
        return
    found = describe(path)
    if found is None:
        return
    backend = get_backend(fmt)
    words = _FORMAT_WORDS.get(backend.name, backend.name)
    if found == f"a varstore {words} checkpoint" or (backend.is_directory and found == "an empty directory"):
        return
    if found.startswith("a varstore "):
        found = f"{found} (not {words})"
    raise CheckpointExistsError(
        f"'{path}' exists and is {found}; a varstore {words} checkpoint would "
        f"replace it: choose another path or {advice}", path=str(path), found=found)


def same_file(a: os.PathLike[str] | str, b: os.PathLike[str] | str) -> bool:
    """True when `a` and `b` both exist and are the same file or directory (same inode, through symlinks)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

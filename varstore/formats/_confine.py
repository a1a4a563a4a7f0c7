"""Paths read from file content stay inside the checkpoint: one check for every index, state and metadata file.

A shard name in an index, a TF `checkpoint` state file's prefix, an Orbax leaf folder, a DCP data
file name: each is joined to the checkpoint's directory and resolved (symlinks followed); if the
result is not inside the directory, PathOutsideCheckpointError names the file and the field.
Opens nothing; knows no format.
"""

from __future__ import annotations

import os
from pathlib import Path

from varstore.errors import PathOutsideCheckpointError

__all__ = ["inside"]


def inside(root: os.PathLike[str] | str, name: str, *, file: os.PathLike[str] | str, field: str) -> Path:
    """`root / name`, checked to resolve inside `root`.

    Args:
      root: the checkpoint (or manager) directory.
      name: the path as the file gives it (relative; absolute ones are refused unless inside `root`).
      file: the file `name` was read from, for the message.
      field: the field that holds it ("model_checkpoint_path", "weight_map['w']").

    Raises:
      PathOutsideCheckpointError: the path (after resolving `..` and symlinks) leaves `root`,
        or names `root` itself.
    """
    base = Path(root).resolve()
    if "\x00" in name:
        raise PathOutsideCheckpointError(f"'{os.fspath(file)}': {field} names {name!r}, which holds a NUL byte")
    target = (base / name).resolve()
    if target == base or not target.is_relative_to(base):
        raise PathOutsideCheckpointError(
            f"'{os.fspath(file)}': {field} names {name!r}, outside the checkpoint directory '{os.fspath(root)}'; "
            f"nothing outside it is read")
    return Path(root) / name

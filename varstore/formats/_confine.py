"""Paths read from file content stay inside the checkpoint: one check for every index, state and metadata file.

Names a writer stores as members or folders (npz members, Orbax leaf folders, any foreign writer's keys)
are checked by `written_names` with varstore's one name rule, so none climbs out with "..".

A shard name in an index, a TF `checkpoint` state file's prefix, an Orbax leaf folder, a DCP data
file name: each is joined to the checkpoint's directory and resolved (symlinks followed); if the
result is not inside the directory, PathOutsideCheckpointError names the file and the field.
Opens nothing; knows no format.
"""

from __future__ import annotations

import os
from pathlib import Path

from varstore.store._naming import validate_name
from varstore.errors import InvalidNameError, PathOutsideCheckpointError

__all__ = ["inside", "written_names"]


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


def written_names(names: list[str], *, file: os.PathLike[str] | str) -> None:
    """Refuses a name no writer may store: empty, absolute ("/abs/evil"), with an empty, "." or ".." part
    ("../../evil"), a NUL or a lone surrogate (not UTF-8): `validate_name`'s rule (other control characters
    are kept: foreign formats store them, the CLI escapes them on output).

    Args:
      names: the names about to be written (after convert's renames).
      file: the destination, for the message.

    Raises:
      InvalidNameError: naming the variable, the destination and what to do; nothing is written.
    """
    for name in names:
        try:
            validate_name(name, allow_control=True)
        except InvalidNameError as err:
            raise InvalidNameError(f"cannot write '{os.fspath(file)}': {err}; no member or file is written "
                                   f"under such a name: rename the variable (convert's rename/separator)") from err

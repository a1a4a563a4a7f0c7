"""What convert's `force` may replace: only a checkpoint of the destination's own format, never a user's file.

`force=True` (`--force`) replaces a destination that sniffs as the format being written (a `.npz` over an
`.npz`, a DCP directory over a DCP directory), varstore's own checkpoint of the same container for `.h5` /
`.zarr` (checkpoint/write/overwrite.py's rule), or an empty directory where the format is a directory.
Anything else (a user's directory tree at a `.pt` path, a text file at an `.npz` path, a Keras `.h5`)
raises CheckpointExistsError and nothing is deleted. Only looks (one Probe); never writes or deletes.
"""

from __future__ import annotations

import os
from pathlib import Path

from varstore.errors import CheckpointExistsError, VarstoreError
from varstore.formats.format_entry import FormatEntry
from varstore.formats.probe import Probe

__all__ = ["check_force_replaceable"]

#: varstore's own writers, by registry name: the container checkpoint/write/overwrite.py checks.
_OWN = {"varstore-hdf5": "h5", "varstore-zarr": "zarr"}
#: Formats written as a directory: an empty directory at the destination may be replaced.
_DIRECTORIES = {"varstore-zarr", "dcp", "orbax", "safetensors-sharded"}


def _sniffed_name(path: Path) -> str | None:
    """The registry name of the format whose sniff claims `path` (no suffix fallback), or None."""
    from varstore.formats.registry import sniffed

    try:
        with Probe(path) as probe:
            found = sniffed(probe)
    except (VarstoreError, OSError, ValueError):  # damaged, refused or unreadable: not a checkpoint of ours
        return None
    return None if found is None else found[0].name


def check_force_replaceable(dst: Path, dest: FormatEntry, found: str) -> None:
    """Raises unless `force` may replace what is at `dst` with a `dest` checkpoint.

    Args:
      dst: the existing destination (a file, directory or symlink; a symlink is judged by its target and
        replaced itself, never its target).
      dest: the format convert writes.
      found: what is at `dst` in words (overwrite.describe), for the message.

    Raises:
      CheckpointExistsError: `dst` is not a checkpoint of `dest`'s format; names the path, what is there
        and the format; nothing was written or deleted.
    """
    if dest.name in _OWN:
        from varstore.checkpoint.write.overwrite import check_replaceable

        check_replaceable(dst, _OWN[dest.name], advice="remove it yourself if it may go; force=True "
                                                         "replaces only a varstore checkpoint of that format")
        return
    if dest.name in _DIRECTORIES and dst.is_dir() and not dst.is_symlink() and not os.listdir(dst):
        return
    if _sniffed_name(dst) == dest.name:
        return
    words = dest.names_for_writing()[0]
    raise CheckpointExistsError(
        f"'{dst}' exists and is {found}; force=True replaces only a checkpoint of the "
        f"destination's own format ({words}), never another file or directory: nothing was written or "
        f"deleted. Choose another path, or remove it yourself if it may go", path=str(dst), found=found)

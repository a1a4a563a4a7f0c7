"""What a folder that is no checkpoint holds, for the end of an error message about it.

Probes at most a fixed number of entries (the message's cost stays bounded) through the detector it is
given; knows no format itself and opens no reader.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from varstore.errors import VarstoreError

__all__ = ["folder_contents"]

#: At most this many entries of a folder are probed to say what is in it (an error message's cost stays bounded).
_FOLDER_PROBES = 64


def folder_contents(path: Path, detected_name: Callable[[Path], str]) -> str:
    """"; it holds 2 checkpoints: a.h5 (varstore-hdf5), b.zarr (varstore-zarr): open one of them", or what
    else the folder holds: the end of an error about a folder that is no checkpoint itself."""
    try:
        names = sorted(entry.name for entry in os.scandir(path) if not entry.name.startswith("."))
    except OSError:
        return ""
    if not names:
        return "; the folder is empty"
    found = []
    for name in names[:_FOLDER_PROBES]:
        try:
            found.append(f"{name} ({detected_name(path / name)})")
        except (VarstoreError, OSError):
            continue
    more = f" (of the first {_FOLDER_PROBES} of {len(names)} entries)" if len(names) > _FOLDER_PROBES else ""
    if found:
        return (f"; it holds {len(found)} checkpoint{'s' if len(found) != 1 else ''}{more}: "
                f"{', '.join(found)}: open one of them")
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"; it holds no checkpoint{more}, only {shown}"

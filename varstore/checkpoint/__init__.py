"""Checkpoints: save, restore, open_varstore, CheckpointManager.

HDF5 files and Zarr v3 directories that plain h5py and zarr users can read;
atomic, crc32c-checksummed, lazy. See docs/checkpoint-format.md and the
module map in docs/architecture.md. `varstore.open_checkpoint` (in
varstore.convert) opens every format; `open_varstore` opens varstore's own.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from varstore.checkpoint.detection import is_varstore_checkpoint
from varstore.checkpoint.reader import CheckpointValue, VarstoreReader, open_varstore

if TYPE_CHECKING:
    from varstore.checkpoint.manager import CheckpointManager
    from varstore.checkpoint.restore import RestoreResult, restore
    from varstore.checkpoint.snapshot import SaveHandle
    from varstore.checkpoint.writer import save, save_entries


def _manager() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.manager")


def _restore() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.restore")


def _snapshot() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.snapshot")


def _writer() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.writer")


#: Imported on first access: reading a checkpoint loads neither the writer nor the manager (issue 11).
_LAZY = {"CheckpointManager": _manager, "restore": _restore, "RestoreResult": _restore,
         "SaveHandle": _snapshot, "save": _writer, "save_entries": _writer}


def __getattr__(name: str) -> Any:
    loader = _LAZY.get(name)
    if loader is None:
        raise AttributeError(f"module 'varstore.checkpoint' has no attribute {name!r}")
    value = getattr(loader(), name)
    globals()[name] = value
    return value


class _Package(ModuleType):
    """This package's module type: `varstore.checkpoint.restore` stays the restore() function when the
    restore submodule is imported (the import system then sets the package attribute)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "restore" and isinstance(value, ModuleType):
            value = value.restore
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "save",
    "save_entries",
    "restore",
    "RestoreResult",
    "SaveHandle",
    "CheckpointManager",
    "open_varstore",
    "is_varstore_checkpoint",
    "VarstoreReader",
    "CheckpointValue",
]

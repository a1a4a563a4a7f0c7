"""Checkpoints: save, restore, open_varstore (alias open_checkpoint), CheckpointManager.

HDF5 files and Zarr v3 directories that plain h5py and zarr users can read;
atomic, crc32c-checksummed, lazy. See docs/checkpoint-format.md.
"""

from __future__ import annotations

from varstore.checkpoint.manager import CheckpointManager
from varstore.checkpoint.reader import CheckpointValue, VarstoreReader, is_varstore_checkpoint, open_varstore
from varstore.checkpoint.restore import RestoreResult, restore
from varstore.checkpoint.writer import SaveHandle, save, save_entries

#: Reader for varstore's own files; varstore.convert.open_checkpoint adds the foreign formats.
open_checkpoint = open_varstore

__all__ = [
    "save",
    "save_entries",
    "restore",
    "RestoreResult",
    "SaveHandle",
    "CheckpointManager",
    "open_varstore",
    "open_checkpoint",
    "is_varstore_checkpoint",
    "VarstoreReader",
    "CheckpointValue",
]

"""Checkpoints: save, restore, open_varstore, CheckpointManager.

HDF5 files and Zarr v3 directories that plain h5py and zarr users can read;
atomic, crc32c-checksummed, lazy. See docs/checkpoint-format.md and the
module map in docs/architecture.md. `varstore.open_checkpoint` (in
varstore.convert) opens every format; `open_varstore` opens varstore's own.
"""

from __future__ import annotations

from varstore.checkpoint.detection import is_varstore_checkpoint
from varstore.checkpoint.manager import CheckpointManager
from varstore.checkpoint.reader import CheckpointValue, VarstoreReader, open_varstore
from varstore.checkpoint.restore import RestoreResult, restore
from varstore.checkpoint.snapshot import SaveHandle
from varstore.checkpoint.writer import save, save_entries

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

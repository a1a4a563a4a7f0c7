"""Checkpoints, the engines behind varstore.save / restore / CheckpointManager (their one public face).

HDF5 files and Zarr v3 directories that plain h5py and zarr users can read;
atomic, crc32c-checksummed, lazy. See docs/checkpoint-format.md and the
module map in docs/architecture.md. This package exports the reader of
varstore's own checkpoints (`open_varstore`, `VarstoreReader`,
`is_varstore_checkpoint`) and `save_entries` (a checkpoint from SaveEntries,
what the format writers use); save, restore and the manager are
varstore.save, varstore.restore and varstore.CheckpointManager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from varstore.checkpoint.read.detection import is_varstore_checkpoint
from varstore.checkpoint.read.reader import CheckpointValue, VarstoreReader, open_varstore

if TYPE_CHECKING:
    from varstore.checkpoint.write.writer import save_entries


def __getattr__(name: str) -> Any:
    if name != "save_entries":  # imported on first access: reading a checkpoint never loads the writer
        raise AttributeError(f"module 'varstore.checkpoint' has no attribute {name!r}")
    from varstore.checkpoint.write.writer import save_entries

    globals()[name] = save_entries
    return save_entries


__all__ = ["save_entries", "open_varstore", "VarstoreReader", "CheckpointValue", "is_varstore_checkpoint"]

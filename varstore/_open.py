"""`varstore.open_checkpoint`: varstore's own checkpoints opened without loading the converter registry; `latest_checkpoint` of a directory.

A fresh process that opens a varstore checkpoint and reads one array should
pay for the checkpoint reader only (issue 11, target 6). This module
recognises varstore's own containers with the check the registry's varstore
entries make first (varstore.checkpoint.read.detection.own_container) and hands
them to `open_varstore`; everything else (foreign formats, URLs, `format=`, reader
options, a registry changed at run time) goes to
`varstore.formats.open_any` (the registry's path). Reads
at most 512 bytes or one zarr.json; never writes, never imports h5py, zarr
or the converters itself. `latest_checkpoint` finds in a directory what
open_checkpoint opens there: a CheckpointManager's newest, else the bundle a
TF `checkpoint` state file names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from varstore.checkpoint.read.reader_api import CheckpointReader

__all__ = ["latest_checkpoint", "open_checkpoint"]


def _registry_unchanged() -> bool:
    """True when the varstore entries are still the first formats detection asks (no format registered
    ahead of them, neither replaced); always true while the registry was never imported."""
    registry = sys.modules.get("varstore.formats.registry")
    return registry is None or bool(registry.own_formats_first())


def open_checkpoint(path: os.PathLike[str] | str, format: str | None = None, *,
                    storage_options: Mapping[str, object] | None = None,
                    **options: Any) -> CheckpointReader:
    """Opens a checkpoint of any registered format, read-only and lazily: the one open_checkpoint.

    A local varstore HDF5 file or Zarr v3 directory opened without `format`,
    `storage_options` or reader options (but `max_bytes` and `max_expansion`) is opened by
    `varstore.checkpoint.open_varstore` directly, without importing the
    format registry; everything else goes through it (varstore.formats.open_any:
    arguments, detection, result and errors are described there).

    Raises:
      CheckpointNotFoundError, NotACheckpointError, UnsafeFormatError, CorruptCheckpointError,
      ChecksumError, UnsupportedFormatError, ObjectStoreError: as varstore.formats.open_checkpoint.
    """
    from varstore.storage import is_remote  # the URL rules only (no object-store client)

    if format is None and storage_options is None and set(options) <= {"max_bytes", "max_expansion"} and not is_remote(path):
        from varstore.checkpoint.read.detection import own_container

        container = own_container(path)
        if container is not None and _registry_unchanged():
            from varstore._limits import max_bytes, max_expansion
            from varstore.checkpoint.read.reader import open_varstore

            limit = options.get("max_bytes")
            if limit is not None:
                max_bytes(limit)  # a bad limit is refused before the file is opened
            expansion = options.get("max_expansion")
            if expansion is not None:
                max_expansion(expansion)
            reader = open_varstore(Path(path), container)
            reader.max_bytes = limit
            reader.max_expansion = expansion
            return reader
    from varstore.formats import open_any

    return open_any(path, format, storage_options=storage_options, **options)


def latest_checkpoint(directory: os.PathLike[str] | str,
                      storage_options: Mapping[str, object] | None = None) -> Path | str | None:
    """The newest checkpoint in `directory`, as tf.train.latest_checkpoint: what open_checkpoint(directory) opens.

    A CheckpointManager directory gives its newest checkpoint (the "latest"
    pointer's target, else the highest "<name>-<step>" entry; a URL for an
    object store). Else a TF `checkpoint` state file gives the bundle prefix
    its model_checkpoint_path names ("run/model.ckpt-300", a str), as
    tf.compat.v1.train.Saver's directories need for a resume loop.

    Returns:
      The checkpoint's path, or None when the directory holds neither (no
      managed checkpoint, no `checkpoint` state file), as TF returns None.

    Raises:
      CheckpointNotFoundError: the state file names a bundle whose .index file is missing (TF logs
        "Couldn't match files" and returns None: a resume would silently start from scratch).
      CorruptCheckpointError: the state file has no model_checkpoint_path line.
      PathOutsideCheckpointError: the state file names a bundle outside `directory`.
    """
    from varstore.checkpoint.manage.managed import latest_checkpoint as managed_latest
    from varstore.storage import is_remote

    found = managed_latest(directory, storage_options)
    if found is not None or is_remote(directory) or not (Path(directory) / "checkpoint").is_file():
        return found
    from varstore.formats.tensorflow.reader import resolve_prefix

    return resolve_prefix(directory)

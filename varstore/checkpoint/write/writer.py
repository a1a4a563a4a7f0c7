"""save and save_entries: write variables into a new HDF5 or Zarr v3 checkpoint, atomically and checksummed.

The public entry points of saving. Plans the layout from names, shapes and
dtypes alone (plan.py, manifest.assign_paths), then hands the plan to the
commit step (commit.py), which runs the bulk write engine (write_engine.py)
into a temporary and renames it into place; `blocking=False` hands it to an
async snapshot (snapshot.py). Saves run with the cyclic garbage collector
paused (_batch.py). Does no I/O itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from varstore.backends import format_for_path
from varstore.checkpoint._batch import paused_gc
from varstore.checkpoint.publish.commit import publish
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.format.manifest import DEFAULT_PACK_THRESHOLD_BYTES
from varstore.checkpoint.write.overwrite import check_replaceable
from varstore.checkpoint.write.plan import PlannedEntry, entries_from, header, plan_records, planned_layout
from varstore.checkpoint.write.snapshot import SaveHandle, save_async
from varstore.storage import is_remote, storage_for

__all__ = ["save", "save_entries", "save_async", "entries_from", "SaveHandle"]


def save_entries(path: os.PathLike[str] | str, entries: Iterable[SaveEntry | PlannedEntry], *, step: int | None = None,
                 metadata: Mapping[str, Any] | None = None, format: str | None = None,
                 checksum: bool = True,
                 pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
                 overwrite: bool = False, layout: str | None = None,
                 storage_options: Mapping[str, object] | None = None, durable: bool = True,
                 compression: str | None = None) -> Path | str:
    """Writes a checkpoint from SaveEntries, fetching each value only when it is written.

    Args:
      path: final path: "x.h5"/"x.hdf5" (HDF5 file) or "x.zarr" (Zarr v3 directory),
        or an object-store URL ("s3://bucket/runs/a7/x.zarr", gs://, az://; committed
        without rename, see docs/guide/object-storage.md). An existing varstore
        checkpoint of the same format there is replaced (atomically, except a Zarr
        prefix on an object store, which stops being a checkpoint until the new one
        commits); anything else there raises CheckpointExistsError unless `overwrite`.
      entries: the variables, in the order to store them; names must be unique.
      step: global step to record (int), or None.
      metadata: JSON-compatible dict to record.
      format: "h5" or "zarr"; None picks by suffix.
      checksum: record crc32c of every variable (on by default).
      pack_threshold_bytes: in the packed layout, variables smaller than this many
        bytes are packed into one blob (see docs/checkpoint-format.md); 0 gives every
        variable its own array.
      overwrite: replace whatever is at `path` (a plain file, another tool's
        file, a directory, a symlink); default False refuses all but a varstore
        checkpoint of the same format.
      layout: "per-variable" (every variable its own dataset/array at its name),
        "packed" (small variables in one blob), or None: "packed" above
        layout.PER_VARIABLE_MAX_VARIABLES (4,096) variables, else "per-variable".
      storage_options: for URLs: endpoint, region, credentials (see docs/guide/object-storage.md);
        None takes them from the standard environment (AWS_*, GOOGLE_*, AZURE_STORAGE_*).
      durable: True (default) fsyncs every file and directory before the rename
        and the parent directory after it, so the checkpoint survives a power
        loss once this returns. False skips fsync and early write-back: the
        rename is still atomic (a crash of the process leaves the old or the
        new checkpoint, never a torn one), but after a power loss or OS crash
        the final path may hold neither (see docs/reliability.md).
      compression: None (default: raw chunks, ranged reads, any Zarr reader) or "zstd"
        (Zarr only): every variable's chunk through the standard Zarr v3 chain "bytes" +
        "blosc" (zstd, level 5, bit shuffle by the stored dtype's size), which plain zarr
        decodes; the crc32c recorded is still over the decoded value bytes, and the
        manifest and the packed blob of small variables stay raw. Recorded in the
        manifest and root attributes as "compression".

    Returns:
      The final path (a str for a URL).

    Raises:
      InvalidNameError, UnsupportedDtypeError, ShapeMismatchError, DtypeMismatchError,
      InvalidMetadataError: before anything is written.
      UnsupportedFormatError: unknown format or suffix; compression for an HDF5 file.
      CheckpointExistsError: `path` holds something else (see `overwrite`); it is left untouched.
      CheckpointError: the file system refused (the final path is left as it was).
      ObjectStoreError: the object store refused or failed after retries (nothing new is listed).
    """
    final = Path(path)
    storage, where = storage_for(path, storage_options)
    fmt = format_for_path(final, format)
    check_replaceable(final, fmt, overwrite, storage=storage)
    with paused_gc():
        entries = list(entries)
        records = plan_records(entries)
        planned_header = header(fmt, step, metadata, final)
        if compression is not None:
            _check_compression(compression, fmt, final)
            planned_header["compression"] = compression
        packed_nbytes = planned_layout(planned_header, records, layout, pack_threshold_bytes)
        published = publish(final, fmt, entries, records, packed_nbytes, planned_header, checksum,
                            storage=storage, durable=durable)
        return where if is_remote(where) else published


def _check_compression(compression: str, fmt: str, final: Path) -> None:
    """Refuses compression for an HDF5 file and an unknown compression name, before anything is written."""
    from varstore.backends.zarr3.codecs import compression_codecs
    from varstore.errors import UnsupportedFormatError

    if fmt != "zarr":
        raise UnsupportedFormatError(f"cannot save '{final}' with compression={compression!r}: compression is "
                                     f"for Zarr checkpoints (.zarr); save an HDF5 file without it")
    compression_codecs(compression, np.dtype("u1"))


def save(path: os.PathLike[str] | str, target: Any, *, step: int | None = None,
         metadata: Mapping[str, Any] | None = None, format: str | None = None, checksum: bool = True,
         pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
         blocking: bool = True, max_snapshot_bytes: int | None = None,
         overwrite: bool = False, layout: str | None = None,
         storage_options: Mapping[str, object] | None = None, durable: bool = True,
         compression: str | None = None) -> Path | str | SaveHandle:
    """Saves variables to an HDF5 file or Zarr v3 directory, atomically and checksummed.

    Args:
      path: "model.h5"/"model.hdf5" or "model.zarr" (or pass `format`), or an
        object-store URL such as "s3://bucket/runs/a7/model.zarr" (as `save_entries`).
      target: a VariableStore (all its variables), a mapping of names to
        Variables or arrays, or a list of Variables.
      step, metadata, format, checksum, pack_threshold_bytes, overwrite, layout, storage_options, durable,
        compression (blocking saves only): as
        `save_entries` (overwrite=False never replaces what is not a varstore
        checkpoint of the same format; layout="packed" opts in to the packed layout).
      blocking: False copies every value (a snapshot, so the caller may
        change its variables as soon as the call returns) and writes in a
        background thread; returns a SaveHandle (wait(), done(), exception()).
        Host values are copied in host memory; a GPU variable's value on its
        own device while it keeps 1 GiB free (device_transfers.has_room), so
        the call waits only for device-side copies, else in host memory.
      max_snapshot_bytes: with blocking=False, the most bytes of snapshot
        copies alive at once (bytes; None: no limit, the call returns after
        one copy of the model). When the model is larger, the call blocks,
        writing the copies already taken, until the last value is copied.

    Returns:
      The final path (a str for a URL), or a SaveHandle when `blocking` is False.

    Raises:
      As `save_entries`; object arrays raise UnsupportedDtypeError naming the variable.
      With blocking=False, errors found while writing are raised by SaveHandle.wait().
    """
    with paused_gc():  # see _batch.py: collections walking 50,000 variables doubled small-variable saves
        entries = entries_from(target)
        if blocking:
            return save_entries(path, entries, step=step, metadata=metadata, format=format, checksum=checksum,
                                pack_threshold_bytes=pack_threshold_bytes, overwrite=overwrite, layout=layout,
                                storage_options=storage_options, durable=durable, compression=compression)
        if compression is not None:
            raise TypeError("compression is for blocking saves: an asynchronous save writes raw chunks")
        return save_async(Path(path), entries, step=step, metadata=metadata, format=format, checksum=checksum,
                          pack_threshold_bytes=pack_threshold_bytes, max_snapshot_bytes=max_snapshot_bytes,
                          overwrite=overwrite, layout=layout, storage=storage_for(path, storage_options)[0],
                          durable=durable)

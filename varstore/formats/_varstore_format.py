"""varstore's own HDF5 files and Zarr v3 directories as registry formats: open and write through the checkpoint layer.

Adapts `varstore.checkpoint.open_varstore` and `save_entries` to the
registry's open/write signatures (varstore.formats.registry). Knows nothing
of the on-disk layout; sniffing is in varstore.formats.detect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from varstore.storage import url_from_path

if TYPE_CHECKING:
    from varstore.checkpoint.entry import SaveEntry
    from varstore.checkpoint.reader_api import CheckpointReader
    from varstore.formats.probe import Probe
    from varstore.formats.format_entry import WriteRequest

__all__ = ["open_reader", "write_hdf5", "write_zarr"]


def open_reader(path: Path, *, probe: Probe | None = None, **options: Any) -> CheckpointReader:
    """Opens a varstore HDF5 file or Zarr v3 directory (detected from its contents) with open_varstore.

    After detection the probe says file or directory, so open_varstore does
    not sniff again; a walk the probe made (a file whose index header is
    damaged) is closed first: h5py refuses a second handle opened with other
    locking flags.
    """
    from varstore.checkpoint import open_varstore

    if probe is None:  # named by the user: open_varstore tells HDF5 from Zarr itself
        return open_varstore(path, **options)
    walker = probe.take_hdf5()
    if walker is not None:
        walker.close()
    return open_varstore(path, format="zarr" if probe.is_dir else "h5", **options)


def _write(path: Path, entries: Sequence[SaveEntry], request: WriteRequest, fmt: str) -> Sequence[str]:
    from varstore.checkpoint import save_entries

    source = url_from_path(request.source) or str(request.source)  # a URL stays a URL
    metadata: dict[str, Any] = {"converted_from": source, "source_format": request.source_format}
    if isinstance(request.metadata, dict):
        try:
            json.dumps(request.metadata)
            metadata["source_metadata"] = request.metadata
        except (TypeError, ValueError):
            pass
    save_entries(path, entries, step=request.step, metadata=metadata, format=fmt,
                 overwrite=request.overwrite, storage_options=request.storage_options)
    return ()


def write_hdf5(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """Writes a varstore HDF5 checkpoint with save_entries; metadata records the source (converted_from)."""
    return _write(path, entries, request, "h5")


def write_zarr(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """Writes a varstore Zarr v3 checkpoint with save_entries; metadata records the source (converted_from)."""
    return _write(path, entries, request, "zarr")

"""varstore's own HDF5 files and Zarr v3 directories as registry formats: open and write through the checkpoint layer.

Adapts `varstore.checkpoint.open_varstore` and `save_entries` to the
registry's open/write signatures (varstore.formats.registry). Knows nothing
of the on-disk layout; sniff_hdf5 / sniff_zarr tell its files from others by the index header.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from varstore.storage import url_from_path
from varstore.errors import CorruptCheckpointError

if TYPE_CHECKING:
    import numpy as np

    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.checkpoint.read.reader_api import CheckpointReader
    from varstore.formats.probe import Probe
    from varstore.formats.format_entry import WriteRequest
    from varstore.storage import ObjectStore

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


def open_url(key: str, storage: ObjectStore, storage_options: Mapping[str, object] | None) -> CheckpointReader:
    """A varstore checkpoint at object-store `key`: HDF5 or Zarr by its suffix, else by what is stored there."""
    from varstore.checkpoint import open_varstore

    return open_varstore(key, None, storage_options=storage_options)


def _write(path: Path, entries: Sequence[SaveEntry], request: WriteRequest, fmt: str) -> Sequence[str]:
    from varstore.checkpoint import save_entries

    source = url_from_path(request.source) or str(request.source)  # a URL stays a URL
    metadata: dict[str, Any] = {"converted_from": source, "source_format": request.source_format}
    if isinstance(request.metadata, dict):
        try:
            json.dumps(request.metadata)
        except (TypeError, ValueError):
            pass
        else:  # varstore -> varstore keeps the metadata as it was; another format's goes under source_metadata
            own = request.source_format in ("varstore-hdf5", "varstore-zarr")
            metadata = {**request.metadata, **metadata} if own else {**metadata, "source_metadata": request.metadata}
    save_entries(path, entries, step=request.step, metadata=metadata, format=fmt,
                 overwrite=request.overwrite, storage_options=request.storage_options)
    return ()


def write_hdf5(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """Writes a varstore HDF5 checkpoint with save_entries; metadata records the source (converted_from)."""
    return _write(path, entries, request, "h5")


def write_zarr(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """Writes a varstore Zarr v3 checkpoint with save_entries; metadata records the source (converted_from)."""
    return _write(path, entries, request, "zarr")


def holds_zarr(dtype: np.dtype) -> str | None:
    """None when a varstore Zarr checkpoint stores `dtype` (bfloat16, float8 and strings as views), else why not
    (float128, the x87 long double PyTables writes, has no Zarr v3 data type)."""
    from varstore.backends.zarr3.store import core_type_refusal
    from varstore.checkpoint.format.manifest import storage_layout

    return core_type_refusal(storage_layout(dtype, (), False)[0])


#: Root attribute and manifest dataset every varstore HDF5 file has (docs/checkpoint-format.md).
_HDF5_FORMAT = "varstore-hdf5"
_MANIFEST = "_varstore/manifest"


def sniff_hdf5(probe: Probe) -> Path | None:
    """A varstore HDF5 file: its 512-byte index header (no HDF5 parsing), else the root attributes.

    The header alone decides for files varstore wrote (time to first array
    matters); a file whose header is damaged is recognised from the shared
    HDF5 walk (root attribute varstore_format, or the manifest dataset).
    """
    if not probe.is_file:
        return None
    from varstore.checkpoint.read.detection import own_container

    if own_container(probe.path, probe.head) == "h5":
        return probe.path
    if not probe.is_hdf5:
        return None
    try:
        walker = probe.hdf5()
    except CorruptCheckpointError:
        # h5py cannot walk it: ask the checkpoint layer, whose reader then says what is damaged
        from varstore.checkpoint import is_varstore_checkpoint

        return probe.path if is_varstore_checkpoint(probe.path) else None
    if walker.root_attrs.get("varstore_format") == _HDF5_FORMAT or any(
            d.path == _MANIFEST for d in walker.datasets):
        return probe.path
    return None


def sniff_zarr(probe: Probe) -> Path | None:
    """A varstore Zarr v3 directory (asked of varstore.checkpoint.is_varstore_checkpoint)."""
    if not probe.is_dir or not (probe.path / "zarr.json").is_file():
        return None
    from varstore.checkpoint import is_varstore_checkpoint

    return probe.path if is_varstore_checkpoint(probe.path) else None

"""Open any supported checkpoint read-only, and convert between formats, streaming.

`open_checkpoint(path)` detects the format (varstore HDF5/Zarr, TensorFlow
bundle, Keras 3/2, safetensors, npz, plain HDF5/Zarr) and returns a lazy
CheckpointReader with the same keys()/info()/[name] interface for all.
`convert(src, dst)` copies variables from any of them into a varstore
.h5/.zarr checkpoint (through varstore.checkpoint.save_entries), a
.safetensors or an .npz file, one variable in memory at a time. Pickle-based
files are refused, never unpickled. No printing here: the CLI shows progress
through the `progress` callback.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore.checkpoint.entry import SaveEntry
from varstore.checkpoint.reader_api import CheckpointReader, SkippedEntry
from varstore.convert.detect import detect_format, sniff
from varstore.errors import ConversionError, UnsupportedFormatError
from varstore.storage import is_remote, storage_for

__all__ = ["open_checkpoint", "convert", "ConvertReport", "detect_format", "READ_FORMATS", "WRITE_FORMATS"]

#: Names accepted by open_checkpoint(format=...) / convert(from_format=...), with aliases.
READ_FORMATS = {
    "varstore": "varstore", "varstore-hdf5": "varstore", "varstore-zarr": "varstore",
    "tf": "tf", "tensorflow": "tf", "keras": "keras", "keras3": "keras3", "keras2": "keras2",
    "safetensors": "safetensors", "npz": "npz", "hdf5": "hdf5", "h5": "hdf5", "zarr": "zarr",
}
#: Names accepted by convert(to_format=...), and the destination suffixes that imply them.
WRITE_FORMATS = {"h5": "h5", "hdf5": "h5", "varstore-hdf5": "h5", "zarr": "zarr", "varstore-zarr": "zarr",
                 "safetensors": "safetensors", "npz": "npz"}
_SUFFIXES = {".h5": "h5", ".hdf5": "h5", ".zarr": "zarr", ".safetensors": "safetensors", ".npz": "npz"}


def _open_hdf5_family(path: Path) -> CheckpointReader:
    from varstore.backends.hdf5.walker import HDF5Walker
    from varstore.convert.generic import GenericHDF5Reader
    from varstore.convert.keras import reader_for_layout

    walker = HDF5Walker(path)
    reader = reader_for_layout(path, walker)
    if reader is not None:
        return reader
    walker.close()
    return GenericHDF5Reader(path)


def _open_own_hdf5(path: Path) -> CheckpointReader | None:
    """varstore's own HDF5 file, recognised by its index header before any other sniffing, or None.

    One 512-byte read tells it apart (time to first array matters: opening
    and reading one variable then costs three small reads). Anything else,
    or a header that does not check out, goes through the full detection.
    """
    from varstore.checkpoint.manifest import INDEX_HEADER_BYTES, decode_index_header
    from varstore.checkpoint.reader import open_varstore
    from varstore.errors import VarstoreError

    try:
        with open(path, "rb") as handle:
            if decode_index_header(handle.read(INDEX_HEADER_BYTES)) is None:
                return None
    except OSError:  # a directory, a TF prefix, nothing there: the full detection says what
        return None
    try:
        return open_varstore(path, format="h5")
    except VarstoreError:
        return None


def _open_remote(url: os.PathLike[str] | str, format: str | None,
                 storage_options: Mapping[str, object] | None, options: dict[str, Any]) -> CheckpointReader:
    """open_checkpoint for an object-store URL: varstore's formats, and safetensors through ranged GETs."""
    from varstore.checkpoint.reader import open_varstore
    from varstore.storage.object_storage import ObjectStorage

    storage, key = storage_for(url, storage_options)
    kind = READ_FORMATS.get(str(format).lower()) if format is not None else None
    suffix = Path(key).suffix.lower()
    if format is None and suffix in (".h5", ".hdf5", ".zarr", ""):
        kind = "varstore"
    elif format is None and suffix == ".safetensors":
        kind = "safetensors"
    if kind in ("varstore", "zarr", "hdf5") and not options:
        return open_varstore(key, None if format in (None, "varstore") else ("zarr" if kind == "zarr" else "h5"),
                             storage_options=storage_options)
    if kind == "safetensors" and isinstance(storage, ObjectStorage) and not options:
        from varstore.convert.safetensors import SafetensorsReader

        name = storage.name_of(key)
        size = storage.size(name)
        return SafetensorsReader(key, opener=lambda: io.BufferedReader(storage.open_reader(name), 1 << 16),
                                 size=size)
    raise UnsupportedFormatError(
        f"cannot open {key}: on an object store varstore reads its own checkpoints (.h5, .zarr) and "
        f".safetensors; copy the file to a local disk to open it as {format or suffix or 'this format'}")


def open_checkpoint(path: os.PathLike[str] | str, format: str | None = None, *,
                    storage_options: Mapping[str, object] | None = None,
                    **options: Any) -> CheckpointReader:
    """Opens a checkpoint of any supported format, read-only and lazily.

    Args:
      path: a varstore .h5/.zarr; a TF prefix, .index, .data shard or
        directory with a `checkpoint` state file (its latest); a Keras
        `.weights.h5`, `.keras` or Keras 2 `.h5`; a `.safetensors`; an `.npz`;
        any HDF5 file or Zarr v2/v3 group.
      format: skip detection: one of READ_FORMATS ("tf", "keras", "keras3",
        "keras2", "safetensors", "npz", "hdf5", "zarr", "varstore").
      storage_options: for object-store URLs (s3://, gs://, az://): endpoint, region,
        credentials; see docs/guide/object-storage.md. On a URL varstore opens its own
        .h5 (ranged GETs) and .zarr checkpoints and .safetensors (ranged GETs).
      **options: passed to the reader: `strip_attributes=True` (TF2 names
        without "/.ATTRIBUTES/VARIABLE_VALUE"), `skip_object_arrays=True` (npz).

    Returns:
      A CheckpointReader; `reader.format` names what was opened.

    Raises:
      CheckpointNotFoundError: nothing at `path`.
      NotACheckpointError: empty, or no format varstore reads.
      UnsafeFormatError: a pickle-based file (PyTorch, npz object arrays); nothing is unpickled.
      CorruptCheckpointError / ChecksumError: damaged metadata.
      UnsupportedFormatError: an unknown `format` name, or an unsupported feature (a
        foreign format other than safetensors on an object store).
      ObjectStoreError: the object store failed after retries (naming the URL).
    """
    if is_remote(path):
        return _open_remote(path, format, storage_options, options)
    path = Path(path)
    if format is None and not options:
        own = _open_own_hdf5(path)
        if own is not None:
            return own
    if format is None:
        found = sniff(path)
        kind, target = found.kind, found.path
    else:
        kind = READ_FORMATS.get(str(format).lower())
        if kind is None:
            raise UnsupportedFormatError(
                f"unknown checkpoint format {format!r}: use one of {', '.join(sorted(READ_FORMATS))}")
        target = path
    if kind == "varstore":
        from varstore.checkpoint.reader import open_varstore

        return open_varstore(target, **options)
    if kind == "tf":
        from varstore.convert.tf_checkpoint import TFCheckpointReader

        return TFCheckpointReader(target, **options)
    if kind in ("keras", "keras-archive"):
        from varstore.convert.keras import open_keras

        return open_keras(target)
    if kind == "keras3":
        from varstore.convert.keras import Keras3Reader, open_keras

        reader = open_keras(target)
        if not isinstance(reader, Keras3Reader):
            reader.close()
            return Keras3Reader(target)  # raises NotACheckpointError naming the file
        return reader
    if kind == "keras2":
        from varstore.convert.keras import Keras2Reader

        return Keras2Reader(target)
    if kind == "safetensors":
        from varstore.convert.safetensors import SafetensorsReader

        return SafetensorsReader(target)
    if kind == "npz":
        from varstore.convert.npz import NpzReader

        return NpzReader(target, **options)
    if kind == "zarr":
        from varstore.convert.generic import GenericZarrReader

        return GenericZarrReader(target)
    if format is None:
        return _open_hdf5_family(target)
    from varstore.convert.generic import GenericHDF5Reader

    return GenericHDF5Reader(target)


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What `convert` did.

    Attributes:
      source, destination: the paths.
      source_format: the reader's format name ("tf", "keras3", ...).
      destination_format: "h5", "zarr", "safetensors" or "npz".
      variables: number of variables written.
      bytes: bytes of variable data written (after any dtype cast).
      skipped: objects of the source that are not variables, with reasons.
      renamed: {source name: destination name} for names `rename` changed.
      notes: remarks about how values were stored (e.g. bfloat16 kept as bits in npz).
    """

    source: Path | str
    destination: Path | str
    source_format: str
    destination_format: str
    variables: int
    bytes: int
    skipped: tuple[SkippedEntry, ...] = ()
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _rename_pairs(rename: Iterable[tuple[str, str] | str]) -> list[tuple[str, str]]:
    pairs = []
    for item in rename:
        if isinstance(item, str):
            if "=" not in item:
                raise ConversionError(f"rename rule {item!r} needs the form OLD=NEW")
            old, new = item.split("=", 1)
        else:
            old, new = item
        pairs.append((str(old), str(new)))
    return pairs


def _renamed(name: str, pairs: Sequence[tuple[str, str]]) -> str:
    """The first matching prefix rule wins (as TF's assignment_map): "old/x" -> "new/x"."""
    for old, new in pairs:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _destination_format(dst: Path, to_format: str | None) -> str:
    if to_format is not None:
        key = WRITE_FORMATS.get(str(to_format).lower())
        if key is None:
            raise UnsupportedFormatError(
                f"cannot convert to format {to_format!r}: use one of {', '.join(sorted(WRITE_FORMATS))}")
        return key
    key = _SUFFIXES.get(dst.suffix.lower())
    if key is None:
        raise UnsupportedFormatError(
            f"cannot tell the destination format of '{dst}' from its suffix {dst.suffix!r}: name it "
            f".h5, .zarr, .safetensors or .npz, or pass to_format")
    return key


ProgressCallback = Callable[[int, int, str], None]


def convert(src: os.PathLike[str] | str, dst: os.PathLike[str] | str, *, from_format: str | None = None,
            to_format: str | None = None, filter: str | None = None,
            rename: Iterable[tuple[str, str] | str] = (), dtype: Any = None,
            progress: ProgressCallback | None = None, storage_options: Mapping[str, object] | None = None,
            **options: Any) -> ConvertReport:
    """Copies the variables of one checkpoint into a new one, one variable in memory at a time.

    Values are copied bit-exactly unless `dtype` casts floating variables.
    Names are kept as the source reports them, then renamed by `rename`.
    Everything is validated (names, dtypes the destination can hold) before
    anything is written, and the destination appears only when complete.

    Args:
      src: any path open_checkpoint accepts.
      dst: destination; .h5/.hdf5 and .zarr become varstore checkpoints,
        .safetensors and .npz the foreign formats.
      from_format: skip source detection (see open_checkpoint's `format`).
      to_format: "h5", "zarr", "safetensors" or "npz"; None picks by dst suffix.
      filter: shell glob on source names ("encoder/*"); None keeps all.
      rename: prefix rules (OLD, NEW) or "OLD=NEW" strings; the first rule
        whose OLD starts a name replaces that prefix with NEW.
      dtype: cast floating-point variables (float16/32/64, bfloat16, float8)
        to this dtype ("float16", "bfloat16", ...); others are kept.
      progress: called as progress(done_bytes, total_bytes, source_name) after
        each variable is read for writing (bytes after any cast), and once
        with (0, total_bytes, "") before the first; the CLI drives its bar with it.
      storage_options: for object-store URLs on either side (endpoint, region, credentials).
      **options: passed to open_checkpoint (strip_attributes, skip_object_arrays).

    Either side may be an object-store URL (s3://, gs://, az://): the source as
    open_checkpoint reads URLs; a .h5/.zarr destination is committed as vs.save
    does; a .safetensors/.npz destination is written to a local temporary file
    and uploaded (deleted afterwards).

    Returns:
      A ConvertReport (source and destination as given: str for URLs).

    Raises:
      Everything open_checkpoint raises; UnsupportedFormatError for an
      unknown destination format; ConversionError when renaming makes two names
      equal or a rename rule is malformed; UnsupportedDtypeError when the
      destination cannot hold a dtype (safetensors has no strings);
      the checkpoint layer's errors for invalid names.
    """
    src_label = str(src) if is_remote(src) else Path(src)
    dst_label = str(dst) if is_remote(dst) else Path(dst)
    src, dst = Path(src), Path(dst)
    dest_format = _destination_format(dst, to_format)
    pairs = _rename_pairs(rename)
    cast = _dtypes.as_dtype(dtype) if dtype is not None else None
    if cast is not None and not _dtypes.is_floating(cast):
        raise ConversionError(f"dtype={dtype!r} is not a floating-point dtype; convert casts floats only")
    with open_checkpoint(src, from_format, storage_options=storage_options, **options) as reader:
        names = reader.filter(filter) if filter is not None else reader.keys()
        plan: list[tuple[str, str, np.dtype, np.dtype, Any]] = []
        seen: dict[str, str] = {}
        for name in names:
            info = reader.info(name)
            new = _renamed(name, pairs)
            if new in seen:
                raise ConversionError(f"renaming makes '{seen[new]}' and '{name}' both '{new}' in '{dst}'")
            seen[new] = name
            stored = _dtypes.as_dtype(info.dtype)
            target = cast if cast is not None and _dtypes.is_floating(stored) else stored
            plan.append((name, new, stored, target, info))
        total = sum(int(np.prod(info.shape, dtype=object)) * target.itemsize
                    for _, _, _, target, info in plan)
        done = [0]
        if progress is not None:
            progress(0, total, "")

        def getter(name: str, stored: np.dtype, target: np.dtype, nbytes: int) -> Callable[[], npt.NDArray[Any]]:
            def get() -> npt.NDArray[Any]:
                value = reader.read(name)
                if target != stored:
                    value = value.astype(target)
                done[0] += nbytes
                if progress is not None:
                    progress(done[0], total, name)
                return value
            return get

        entries = [SaveEntry(name=new, shape=tuple(info.shape), dtype=target,
                             get=getter(name, stored, target,
                                        int(np.prod(info.shape, dtype=object)) * target.itemsize),
                             trainable=info.trainable if info.trainable is not None else True,
                             collections=tuple(info.collections), device=info.device)
                   for name, new, stored, target, info in plan]
        notes: list[str] = []
        if dest_format in ("h5", "zarr"):
            from varstore.checkpoint.writer import save_entries

            metadata = {"converted_from": str(src), "source_format": reader.format}
            if isinstance(reader.metadata, dict):
                try:
                    import json

                    json.dumps(reader.metadata)
                    metadata["source_metadata"] = reader.metadata
                except (TypeError, ValueError):
                    pass
            metadata["converted_from"] = str(src_label)
            save_entries(dst, entries, step=reader.step, metadata=metadata, format=dest_format,
                         storage_options=storage_options)
        else:
            staging = Path(tempfile.mkdtemp(prefix="varstore-convert-")) if is_remote(dst) else None
            local = dst if staging is None else staging / dst.name
            try:
                if dest_format == "safetensors":
                    from varstore.convert.safetensors import write_safetensors

                    meta = {"format": "np", "converted_from": src.name, "source_format": reader.format}
                    if reader.step is not None:
                        meta["step"] = str(reader.step)
                    write_safetensors(local, entries, metadata=meta)
                else:
                    from varstore.convert.npz import write_npz

                    _, notes = write_npz(local, entries)
                if staging is not None:
                    storage, key = storage_for(dst, storage_options)
                    storage.upload_file(key, local)  # type: ignore[attr-defined]  # an ObjectStorage
            finally:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
        return ConvertReport(
            source=src_label, destination=dst_label, source_format=reader.format, destination_format=dest_format,
            variables=len(entries), bytes=done[0], skipped=tuple(reader.skipped),
            renamed={name: new for name, new, *_ in plan if new != name}, notes=tuple(notes))

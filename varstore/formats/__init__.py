"""open_any (open_checkpoint's registry path) for every registered format, convert between formats (streaming), detect_format.

`open_any(path)` (varstore.open_checkpoint's registry path) detects the format through varstore.formats.registry
(varstore HDF5/Zarr, TensorFlow bundle, Keras 3/2, safetensors, npz, plain
HDF5/Zarr, and any format registered at run time) and returns a lazy
CheckpointReader with the same keys()/info()/[name] interface for all.
`convert(src, dst)` copies variables from any of them into any format whose
registry entry writes (varstore .h5/.zarr, .safetensors, .npz), one variable
in memory at a time. Knows no format itself: the registry's entries do.
Pickle-based files are refused, never unpickled. No printing here: the CLI
shows progress through the `progress` callback.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import max_bytes as _max_bytes
from varstore._limits import max_expansion as _max_expansion
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry
from varstore.formats import registry as _registry
from varstore.formats._confine import written_names
from varstore.formats.registry import FormatEntry, WriteRequest, register_format, unregister_format
from varstore.formats.rename import rename_pairs, rewrite
from varstore.errors import ConversionError, UnsupportedFormatError
from varstore.storage import is_remote, object_store_for, url_from_path

__all__ = ["open_any", "convert", "ConvertReport", "detect_format", "READ_FORMATS", "WRITE_FORMATS",
           "FormatEntry", "WriteRequest", "register_format", "unregister_format", "formats"]


def __getattr__(name: str) -> Any:
    """READ_FORMATS / WRITE_FORMATS: {accepted name: canonical name}, computed from the registry."""
    if name == "READ_FORMATS":
        return {alias: e.name for e in _registry.formats() if e.reads and not e.refuses
                for alias in (e.name, *e.aliases)}
    if name == "WRITE_FORMATS":
        return {alias: e.names_for_writing()[0] for e in _registry.formats() for alias in e.names_for_writing()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def formats() -> tuple[FormatEntry, ...]:
    """Every registered checkpoint format, in detection order (see varstore.formats.registry)."""
    return _registry.formats()


def detect_format(path: os.PathLike[str] | str, *, by_suffix: bool = True) -> str:
    """The name of the format at `path`, without opening a reader.

    One of the registry's names: "varstore-hdf5", "varstore-zarr", "tf",
    "keras3", "keras2", "safetensors", "npz", "hdf5", "zarr", or a registered
    format's. HDF5 files are walked once (metadata only) to tell Keras 3,
    Keras 2 and plain HDF5 apart. A file whose content no format's detector accepts is named by its
    suffix (its reader then reports what is wrong), unless `by_suffix` is False: then it is
    NotACheckpointError (`varstore ls DIR` lists a folder so).

    Raises:
      CheckpointNotFoundError: nothing at `path` (and it is no TF prefix).
      UnsafeFormatError: a pickle-based file (PyTorch .pt/.bin zip or raw pickle).
      NotACheckpointError: an empty file or one in no format varstore reads.
      CorruptCheckpointError: an HDF5 file h5py cannot walk.
    """
    return _registry.detected_name(path, by_suffix)


def _open_remote(url: os.PathLike[str] | str, format: str | None,
                 storage_options: Mapping[str, object] | None, options: dict[str, Any]) -> CheckpointReader:
    """open_any for an object-store URL: the registry entry with `open_url` that the name or suffix picks."""
    storage, key = object_store_for(url, storage_options)
    entry = _registry.url_format(key, format)
    if options:
        raise UnsupportedFormatError(f"cannot open {key} with reader options {sorted(options)}: on an object store "
                                     f"readers take none; copy the file to a local disk to pass them")
    assert entry.open_url is not None  # url_format gives only entries that open URLs
    return entry.open_url(key, storage, storage_options)


def open_any(path: os.PathLike[str] | str, format: str | None = None, *,
                    storage_options: Mapping[str, object] | None = None,
                    **options: Any) -> CheckpointReader:
    """Opens a checkpoint of any registered format, read-only and lazily: varstore.open_checkpoint's
    path through the registry (the public function opens varstore's own checkpoints without it).

    Detection looks at the path once (varstore.formats.probe.Probe): a
    varstore HDF5 file is told by its index header alone; any other HDF5 file
    is walked once and that walk is handed to the Keras or plain-HDF5 reader.

    Args:
      path: a varstore .h5/.zarr; a TF prefix, .index, .data shard or
        directory with a `checkpoint` state file (its latest); a Keras
        `.weights.h5`, `.keras` or Keras 2 `.h5`; a `.safetensors`; an `.npz`;
        any HDF5 file or Zarr v2/v3 group; or a registered format's file.
      format: skip detection: a registered name or alias ("tf", "keras",
        "keras3", "keras2", "safetensors", "npz", "hdf5", "zarr", "varstore", ...).
      storage_options: for object-store URLs (s3://, gs://, az://): endpoint, region,
        credentials; see docs/guide/object-storage.md. On a URL varstore opens its own
        .h5 (ranged GETs) and .zarr checkpoints, and .safetensors (ranged GETs).
      **options: passed to the reader: `strip_attributes=True` (TF2 names
        without "/.ATTRIBUTES/VARIABLE_VALUE"), `skip_object_arrays=True` (npz),
        `dequantize=True` (gguf: Q8_0/Q4_0/Q4_1 as float32), and for every reader
        `max_bytes=` (int, bytes): the most a value read without `out` may declare
        (default: VARSTORE_MAX_BYTES, else the available memory, and for values whose
        stored size is known at most that plus 64 MiB; docs/reliability.md), and
        `max_expansion=` (a number >= 1, or math.inf): a value may decode or fill to at most the bytes the
        file stores for it times this plus 64 MiB (default: VARSTORE_MAX_EXPANSION, else 64).

    Returns:
      A CheckpointReader; `reader.format` names what was opened.

    Raises:
      CheckpointNotFoundError: nothing at `path`.
      NotACheckpointError: empty, or no format varstore reads.
      UnsafeFormatError: a pickle that is not a torch.save file, a torch pickle
        naming a global outside the allow-list (malicious, or a whole nn.Module),
        npz object arrays; no code of the file is ever run.
      CorruptCheckpointError / ChecksumError: damaged metadata.
      UnsupportedFormatError: an unknown `format` name, or an unsupported feature (on an
        object store: a format other than varstore's and safetensors, naming the URL).
      ObjectStoreError: the object store failed after retries (naming the URL).
    """
    limit = options.pop("max_bytes", None)
    if limit is not None:
        _max_bytes(limit)  # a bad limit is refused before the file is opened
    expansion = options.pop("max_expansion", None)
    if expansion is not None:
        _max_expansion(expansion)  # a bad factor too
    reader = _open_any(path, format, storage_options, options)
    reader.max_bytes = limit
    reader.max_expansion = expansion
    return reader


def _open_any(path: os.PathLike[str] | str, format: str | None,
              storage_options: Mapping[str, object] | None, options: dict[str, Any]) -> CheckpointReader:
    """open_checkpoint without the read limit: the URL path, detection, or the named format's reader."""
    if format in (None, "icechunk"):
        from varstore.checkpoint.read.snapshot_reader import open_snapshot, split_location

        if format == "icechunk" or split_location(path) is not None:  # "<repository>@ckpt-<step>"
            return open_snapshot(path, storage_options)
    if is_remote(path):
        return _open_remote(path, format, storage_options, options)
    if format is None:
        return _registry.open_detected(path, **options)
    entry = _registry.reader_format(format)
    assert entry.open is not None  # reader_format returns readable entries only
    return entry.open(Path(path), probe=None, **options)


@dataclasses.dataclass(frozen=True)
class ConvertReport:
    """What `convert` did.

    Attributes:
      source, destination: the paths.
      source_format: the reader's format name ("tf", "keras3", ...).
      destination_format: "h5", "zarr", "safetensors", "safetensors-sharded" or "npz".
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


def _check_destination(src: Path, dst: Path, force: bool, dest: FormatEntry,
                       storage_options: Mapping[str, object] | None = None) -> None:
    """convert never writes over its source, and replaces an existing destination only with force, and then
    only a checkpoint of the destination's own format (_replace.py)."""
    from varstore.checkpoint.write.overwrite import describe, same_file
    from varstore.errors import CheckpointExistsError

    if is_remote(dst):
        from varstore.checkpoint.publish.remote import describe_remote

        if is_remote(src) and str(src) == str(dst):
            raise CheckpointExistsError(f"{url_from_path(dst)} is the source itself; convert never writes over its "
                                        f"source, even with force: choose another destination")
        storage, key = object_store_for(dst, storage_options)
        found = describe_remote(storage, storage.name_of(key))
        if found is not None and not force:
            raise CheckpointExistsError(
                f"{key} exists and is {found}; convert does not replace an existing destination: "
                f"choose another URL or pass force=True to replace it", path=key, found=found)
        return

    if same_file(src, dst):
        raise CheckpointExistsError(
            f"'{dst}' is the source '{src}' itself (the same file{' through a symlink' if dst.is_symlink() or src.is_symlink() else ''}); "
            f"convert never writes over its source, even with force: choose another destination",
            path=str(dst), found="the source")
    found = describe(dst)
    if found is not None and not force:
        raise CheckpointExistsError(
            f"'{dst}' exists and is {found}; convert does not replace an existing destination: "
            f"choose another path or pass force=True to replace it", path=str(dst), found=found)
    if found is not None:
        from varstore.formats._replace import check_force_replaceable

        check_force_replaceable(dst, dest, found)


def _destination_format(dst: Path, to_format: str | None, write_options: dict[str, Any]) -> FormatEntry:
    """The writer `to_format` names, else the one writer taking every option given, else dst's suffix's."""
    if to_format is None and write_options:
        taking = [e for e in _registry.formats() if e.writes and set(write_options) <= set(e.write_options)]
        if len(taking) == 1:
            return taking[0]
    dest = _registry.writer_format(to_format) if to_format is not None else _registry.writer_for_path(dst)
    unknown = sorted(set(write_options) - set(dest.write_options))
    if unknown:
        takers = [e.names_for_writing()[0] for e in _registry.formats() if set(unknown) & set(e.write_options)]
        raise ConversionError(f"{', '.join(unknown)} does not apply to {dest.names_for_writing()[0]} ('{dst}'): "
                              f"{'it is an option of ' + ', '.join(takers) if takers else 'no writer takes it'}; "
                              f"name that format as to_format, or drop the option")
    return dest


ProgressCallback = Callable[[int, int, str], None]


def convert(src: os.PathLike[str] | str, dst: os.PathLike[str] | str, *, from_format: str | None = None,
            to_format: str | None = None, filter: str | Iterable[str] | None = None,
            exclude: str | Iterable[str] = (),
            rename: Iterable[tuple[str, str] | str] = (), dtype: Any = None,
            progress: ProgressCallback | None = None, separator: str | None = None, force: bool = False,
            max_shard_size: int | str | None = None, write_options: Mapping[str, Any] | None = None,
            storage_options: Mapping[str, object] | None = None, **options: Any) -> ConvertReport:
    """Copies the variables of one checkpoint into a new one, streaming: one variable in memory at a time
    (for varstore .h5/.zarr destinations, plus at most the write engine's 8 queued writes).

    Values are copied bit-exactly unless `dtype` casts floating variables.
    Names are kept as the source reports them, then renamed by `rename`.
    Everything is validated (names, dtypes the destination can hold) before
    anything is written, and the destination appears only when complete.

    Args:
      src: any path open_checkpoint accepts.
      dst: destination; .h5/.hdf5 and .zarr become varstore checkpoints; .ckpt/.index (TF), .pt/.pth,
        .gguf, .distcp (DCP), .safetensors and .npz the foreign formats (the registry's write_suffixes).
      from_format: skip source detection (see open_checkpoint's `format`).
      to_format: a writing format's name ("h5", "zarr", "tf", "pt", "gguf", "dcp", "orbax", "safetensors",
        "safetensors-sharded", "npz");
        None picks by dst suffix.
      filter: shell glob on source names ("encoder/*"), or several (their union); None keeps all.
      exclude: shell glob, or several: source names matching one are left out (after `filter`).
      rename: prefix rules (OLD, NEW) or "OLD=NEW" strings; the first rule
        whose OLD starts a name replaces that prefix with NEW (after `separator`).
      separator: every occurrence of this string in a source name becomes "/"
        before `rename` ("." turns "encoder.layer.0.weight" into "encoder/layer/0/weight").
      force: replace an existing `dst` when it is a checkpoint of the destination's own format (a file
        that sniffs as it, varstore's own checkpoint for .h5/.zarr, an empty directory for a directory
        format); never a user's other file or directory (CheckpointExistsError, nothing deleted). Without
        it any existing destination raises CheckpointExistsError and is left untouched. `src`
        and `dst` being the same file (also through a symlink) is refused always.
      dtype: cast floating-point variables (float16/32/64, bfloat16, float8)
        to this dtype ("float16", "bfloat16", ...); others are kept.
      progress: called as progress(done_bytes, total_bytes, source_name) after
        each variable is read for writing (bytes after any cast), and once
        with (0, total_bytes, "") before the first; the CLI drives its bar with it.
      max_shard_size: for a sharded safetensors destination (implied when
        given without to_format): bytes per shard, int or "500MB"/"5GB"/"2GiB"
        (default 5GB); `dst` is then the directory to create.
      write_options: options of the destination format's writer, by name (the registry's
        `write_options`): `gguf_type` ("f32", "f16", "bf16", "q8_0") for GGUF; a writer refuses others.
      storage_options: for object-store URLs on either side (endpoint, region, credentials).
      **options: passed to open_checkpoint (strip_attributes, skip_object_arrays, dequantize, and the
        read limits max_bytes and max_expansion: see open_checkpoint).

    Either side may be an object-store URL (s3://, gs://, az://): the source as
    open_checkpoint reads URLs; a .h5/.zarr destination is committed as vs.save
    does; any other destination format is written to a local temporary file
    and uploaded (one object, or a prefix for a sharded directory; the local copy is deleted).

    Returns:
      A ConvertReport (source and destination as given: a str for a URL).

    Raises:
      Everything open_checkpoint raises; UnsupportedFormatError for an
      unknown destination format; ConversionError when renaming makes two names
      equal or a rename rule is malformed; CheckpointExistsError when `dst`
      exists (without force) or is `src`; UnsupportedDtypeError when the
      destination cannot hold a dtype (a writer with no `holds` rule; where the registry entry
      has one, as Zarr and safetensors do, such a variable is skipped instead, its reason in
      `ConvertReport.skipped`);
      the checkpoint layer's errors for invalid names.
    """
    src_label = url_from_path(src) or Path(src)
    dst_label = url_from_path(dst) or Path(dst)
    src, dst = Path(src), Path(dst)
    write_options = dict(write_options or {})
    if max_shard_size is not None:
        write_options["max_shard_size"] = max_shard_size
    dest = _destination_format(dst, to_format, write_options)
    pairs = rename_pairs(rename)
    _check_destination(src, dst, force, dest, storage_options)
    cast = _dtypes.as_dtype(dtype) if dtype is not None else None
    if cast is not None and not _dtypes.is_floating(cast):
        raise ConversionError(f"dtype={dtype!r} is not a floating-point dtype; convert casts floats only")
    with open_any(src, from_format, storage_options=storage_options, **options) as reader:
        names = reader.filter(filter, exclude)
        plan: list[tuple[str, str, np.dtype, np.dtype, Any]] = []
        seen: dict[str, str] = {}
        skipped = list(reader.skipped)
        for name in names:
            info = reader.info(name)
            new = rewrite(name, pairs, separator)
            if new in seen:
                raise ConversionError(f"renaming makes '{seen[new]}' and '{name}' both '{new}' in '{dst}'")
            seen[new] = name
            stored = _dtypes.as_dtype(info.dtype)
            target = cast if cast is not None and _dtypes.is_floating(stored) else stored
            refusal = dest.holds(target) if dest.holds is not None else None
            if refusal is not None:  # one variable the destination cannot hold never refuses the whole source
                skipped.append(SkippedEntry(name, f"not written to {dest.names_for_writing()[0]}: {refusal}"))
                continue
            plan.append((name, new, stored, target, info))
        written_names([new for _, new, *_ in plan], file=dst_label)  # no "..", "/abs", NUL, lone surrogate
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
                             trainable=info.trainable,  # None (unknown) stays unknown: never invented
                             collections=tuple(info.collections), device=info.device)
                   for name, new, stored, target, info in plan]
        assert dest.write is not None  # writer_format / writer_for_path return writable entries only
        request = WriteRequest(source=src, source_format=reader.format, step=reader.step,
                               metadata=reader.metadata if isinstance(reader.metadata, dict) else {},
                               overwrite=force, options=write_options, storage_options=storage_options)
        if is_remote(dst) and dest.name not in ("varstore-hdf5", "varstore-zarr"):
            notes = _write_and_upload(dest, dst, entries, request, storage_options)
        else:
            notes = dest.write(dst, entries, request)
        return ConvertReport(
            source=src_label, destination=dst_label, source_format=reader.format, destination_format=dest.names_for_writing()[0],
            variables=len(entries), bytes=done[0], skipped=tuple(skipped),
            renamed={name: new for name, new, *_ in plan if new != name}, notes=(*reader.notes, *notes))


def _write_and_upload(dest: FormatEntry, dst: Path, entries: list[SaveEntry], request: WriteRequest,
                      storage_options: Mapping[str, object] | None) -> Sequence[str]:
    """A foreign format to a URL: written to a local temporary file, uploaded as one object, the file deleted."""
    assert dest.write is not None
    storage, key = object_store_for(dst, storage_options)
    staging = Path(tempfile.mkdtemp(prefix="varstore-convert-"))
    try:
        local = staging / dst.name
        notes = dest.write(local, entries, request)
        if local.is_dir():  # a sharded destination: every file under the URL as a prefix
            for path in sorted(p for p in local.rglob("*") if p.is_file()):
                storage.upload_file(f"{key}/{path.relative_to(local).as_posix()}", path)
        else:
            storage.upload_file(key, local)
        return notes
    finally:
        shutil.rmtree(staging, ignore_errors=True)

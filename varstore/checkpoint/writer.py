"""save and save_entries: stream variables into a new HDF5 or Zarr v3 checkpoint.

Plans the layout from names, shapes and dtypes alone (no value is read
yet), then fetches one value at a time, computes its crc32c on the buffer
that is written, and writes it with one pwrite straight from the variable's
buffer to its place in the file (a background thread writes while the next
value is checksummed). Small variables are copied into a bounded staging
window of the packed blob. The manifest goes last, then fsync and the atomic
rename (checkpoint/atomic.py). Never holds a second copy of the model.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import __version__, devices
from varstore import dtypes as _dtypes
from varstore.backends import RawExtent, format_for_path, get_backend
from varstore.checkpoint import atomic
from varstore.checkpoint.checksum import crc32c_of, pwrite_all
from varstore.checkpoint.entry import SaveEntry
from varstore.checkpoint.manifest import (
    DEFAULT_PACK_THRESHOLD_BYTES,
    FORMAT_NAMES,
    FORMAT_VERSION,
    MANIFEST_PATH,
    PACKED_PATH,
    Record,
    assign_paths,
    check_dtype_name,
    encode_manifest,
    format_checksum,
    storage_layout,
    validate_name,
)
from varstore.errors import (
    DtypeMismatchError,
    InvalidMetadataError,
    InvalidNameError,
    ShapeMismatchError,
    UnsupportedDtypeError,
    VarstoreError,
)

__all__ = ["save", "save_entries", "entries_from", "SaveHandle"]

_STAGING_BYTES = 8 << 20
_MAX_PENDING = 8
_FALLOCATE_BYTES = 1 << 20


class SaveHandle:
    """A save running in a background thread (`blocking=False`).

    The values were copied (snapshot) before the call returned, so the caller
    may change its variables at once.

    Attributes:
      path: the final checkpoint path.
    """

    def __init__(self, path: Path, future: Future[Path]) -> None:
        self.path = path
        self._future = future

    def wait(self, timeout_s: float | None = None) -> Path:
        """Blocks until the checkpoint is durable under `path`; returns it or raises the save's error."""
        return self._future.result(timeout=timeout_s)

    def done(self) -> bool:
        """True once the save finished (successfully or not)."""
        return self._future.done()


def _is_variable(obj: Any) -> bool:
    return hasattr(obj, "host_view") and hasattr(obj, "name") and hasattr(obj, "trainable")


def _variable_entry(variable: Any, name: str | None = None) -> SaveEntry:
    return SaveEntry(
        name=name or variable.name,
        shape=tuple(variable.shape),
        dtype=np.dtype(variable.dtype),
        get=variable.host_view,
        trainable=bool(variable.trainable),
        collections=tuple(variable.collections),
        device=getattr(variable, "device", None),
    )


def _array_entry(name: str, value: Any) -> SaveEntry:
    if devices.is_device_array(value):
        device = devices.device_of_array(value)
        array = value
        return SaveEntry(name, tuple(value.shape), np.dtype(value.dtype),
                         lambda: devices.to_host(array), True, (), device)
    array = np.asarray(value)
    if array.dtype.kind == "O":
        raise UnsupportedDtypeError(
            f"cannot save variable '{name}': object arrays are not supported "
            f"(a checkpoint holds numbers and fixed-length strings)")
    return SaveEntry(name, tuple(array.shape), array.dtype, lambda: array, True, (), "cpu:0")


def entries_from(target: Any) -> list[SaveEntry]:
    """SaveEntries for a VariableStore, a mapping of names to Variables or arrays, or a list of Variables.

    Raises:
      UnsupportedDtypeError: an object array (naming it).
      InvalidNameError: a mapping key that is not a string.
    """
    if hasattr(target, "variables") and callable(target.variables) and not isinstance(target, Mapping):
        return [_variable_entry(v) for v in target.variables()]
    if isinstance(target, Mapping):
        entries = []
        for name, value in target.items():
            if not isinstance(name, str):
                raise InvalidNameError(f"checkpoint names must be strings, got {name!r}")
            entries.append(_variable_entry(value, name) if _is_variable(value) else _array_entry(name, value))
        return entries
    if isinstance(target, SaveEntry):
        return [target]
    if _is_variable(target):
        return [_variable_entry(target)]
    items = list(target)
    for item in items:
        if not (_is_variable(item) or isinstance(item, SaveEntry)):
            raise InvalidNameError(
                f"cannot save {type(item).__name__} without a name: pass a mapping of names to arrays, "
                f"a list of Variables or a VariableStore")
    return [item if isinstance(item, SaveEntry) else _variable_entry(item) for item in items]


def _plan(entries: list[SaveEntry]) -> list[Record]:
    records = []
    seen: set[str] = set()
    for entry in entries:
        name = validate_name(entry.name)
        if name in seen:
            raise InvalidNameError(f"variable name '{name}' appears twice in one checkpoint")
        seen.add(name)
        dtype = check_dtype_name(name, entry.dtype)
        shape = tuple(int(n) for n in entry.shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        records.append(Record(name, shape, _dtypes.dtype_name(dtype), nbytes, bool(entry.trainable),
                              tuple(entry.collections), entry.device))
    return records


def _host_value(entry: SaveEntry, record: Record, where: Path) -> npt.NDArray[Any]:
    value = entry.get()
    if devices.is_device_array(value):
        value = devices.to_host(value)
    value = np.asarray(value)
    if value.dtype.kind == "O":
        raise UnsupportedDtypeError(f"cannot save variable '{record.name}' to '{where}': it is an object array")
    if tuple(value.shape) != record.shape:
        raise ShapeMismatchError(
            f"cannot save variable '{record.name}' to '{where}': its value has shape {value.shape}, "
            f"it was declared with {record.shape}")
    logical = record.numpy_dtype
    if value.dtype != logical:
        if not np.can_cast(value.dtype, logical, "same_kind"):
            raise DtypeMismatchError(
                f"cannot save variable '{record.name}' to '{where}': its value is {value.dtype}, "
                f"declared {record.dtype}")
        value = value.astype(logical)
    return np.ascontiguousarray(value)


class _Writes:
    """A single background thread doing pwrite calls, with a bounded number in flight."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-write")
        self._slots = threading.BoundedSemaphore(_MAX_PENDING)
        self._futures: list[Future[None]] = []
        self._fds: dict[Path, int] = {}
        self.files: list[Path] = []

    def _fd(self, file: Path, keep: bool) -> int:
        fd = self._fds.get(file)
        if fd is None:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT, 0o644)
            if keep:
                self._fds[file] = fd
        return fd

    def _write(self, extent: RawExtent, data: Any, keep: bool) -> None:
        try:
            fd = self._fd(extent.file, keep)
            try:
                if extent.nbytes >= _FALLOCATE_BYTES:
                    try:  # reserve the blocks first: writes into allocated extents run ~2x faster on ext4
                        os.posix_fallocate(fd, extent.offset, extent.nbytes)
                    except OSError:
                        pass
                pwrite_all(fd, data, extent.offset)
            finally:
                if not keep:
                    os.close(fd)
        finally:
            self._slots.release()

    def submit(self, extent: RawExtent, data: Any, keep: bool) -> None:
        """Queues a write of `data` at `extent`; `keep` keeps the file open (a shared HDF5 file)."""
        if extent.file not in self._fds:
            self.files.append(extent.file)
        self._slots.acquire()
        self._futures.append(self._pool.submit(self._write, extent, data, keep))
        if len(self._futures) > 4 * _MAX_PENDING:
            self._reap()

    def _reap(self) -> None:
        pending = []
        for future in self._futures:
            if future.done():
                future.result()
            else:
                pending.append(future)
        self._futures = pending

    def drain(self) -> None:
        """Waits for every queued write; re-raises the first failure."""
        for future in self._futures:
            future.result()
        self._futures = []

    def close(self) -> None:
        """Drains (ignoring errors when already failing) and closes kept files."""
        self._pool.shutdown(wait=True)
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


class _Packer:
    """Copies small values into a staging window of the packed blob and writes full windows."""

    def __init__(self, writes: _Writes, extent: RawExtent | None, keep: bool) -> None:
        self._writes = writes
        self._extent = extent
        self._keep = keep
        self._size = min(extent.nbytes, _STAGING_BYTES) if extent else 0
        self._window = bytearray(self._size)
        self._start = 0
        self._used = 0

    def add(self, offset: int, value: npt.NDArray[Any]) -> None:
        nbytes = value.nbytes
        if nbytes == 0 or self._extent is None:
            return
        if offset + nbytes - self._start > self._size:
            self.flush()
            self._start = offset
            if nbytes > self._size:
                self._writes.submit(RawExtent(self._extent.file, self._extent.offset + offset, nbytes),
                                    value, self._keep)
                return
        position = offset - self._start
        self._window[position:position + nbytes] = value.reshape(-1).view(np.uint8).data
        self._used = position + nbytes

    def flush(self) -> None:
        if self._used and self._extent is not None:
            data = memoryview(self._window)[:self._used]
            self._writes.submit(RawExtent(self._extent.file, self._extent.offset + self._start, self._used),
                                data, self._keep)
            self._window = bytearray(self._size)
        self._used = 0


def _header(fmt: str, step: int | None, metadata: Mapping[str, Any] | None, where: Path) -> dict[str, Any]:
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise InvalidMetadataError(f"step for '{where}' must be an int, got {step!r}")
        step = int(step)
    metadata = dict(metadata or {})
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidMetadataError(
            f"metadata for '{where}' must be JSON-compatible (str keys; str, numbers, bools, None, "
            f"lists, dicts): {err}") from err
    return {
        "format": FORMAT_NAMES[fmt],
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "step": step,
        "metadata": metadata,
    }


def _array_attrs(record: Record, as_json_list: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "trainable": record.trainable,
        "collections": list(record.collections),
        "dtype": record.dtype,
    }
    if record.device is not None:
        attrs["device"] = record.device
    if record.checksum is not None:
        attrs["checksum"] = format_checksum(record.checksum)
    if record.path != record.name:
        attrs["name"] = record.name
    return attrs


def _write(tmp: Path, fmt: str, entries: list[SaveEntry], records: list[Record], packed_nbytes: int,
           header: dict[str, Any], checksum: bool) -> None:
    backend = get_backend(fmt)
    writer = backend.open_writer(tmp)
    writes = _Writes()
    shared_file = not backend.is_directory
    try:
        packed_extent = None
        if packed_nbytes:
            packed_extent = writer.create_array(
                PACKED_PATH, np.dtype("u1"), (packed_nbytes,),
                {"description": "small variables packed back to back; see _varstore/manifest"})
        packer = _Packer(writes, packed_extent, shared_file)
        native = writer.native_bytes_strings
        for entry, record in zip(entries, records):
            value = _host_value(entry, record, tmp)
            if checksum:
                record.checksum = crc32c_of(value)
            if record.path is None:
                packer.add(record.offset or 0, value)
                continue
            storage_dtype, storage_shape = storage_layout(value.dtype, record.shape, native)
            extent = writer.create_array(record.path, storage_dtype, storage_shape,
                                         _array_attrs(record, fmt == "h5"))
            if extent is None:
                writer.write_array(record.path, value.reshape(-1).view(storage_dtype).reshape(storage_shape))
            else:
                writes.submit(extent, value, shared_file)
        packer.flush()
        atomic.fault_point("after_data")
        writes.drain()
        atomic.fault_point("before_checksums")
        manifest = encode_manifest(header, records, packed_nbytes)
        extent = writer.create_array(MANIFEST_PATH, np.dtype("u1"), (len(manifest),),
                                     {"description": "JSON index of every variable; see docs"})
        if extent is not None:
            writes.submit(extent, manifest, shared_file)
        root = {f"varstore_{key}" if key in ("format", "format_version", "library_version") else key: value
                for key, value in header.items()}
        writer.set_root_attrs(root)
        writes.drain()
        paths = writer.close()
        writes.close()
        atomic.fsync_paths(paths + writes.files)
    except BaseException:
        writes.close()
        abort = getattr(writer, "abort", None)
        if abort is not None:
            abort()
        raise


def save_entries(path: os.PathLike[str] | str, entries: Iterable[SaveEntry], *, step: int | None = None,
                 metadata: Mapping[str, Any] | None = None, format: str | None = None,
                 checksum: bool = True,
                 pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES) -> Path:
    """Writes a checkpoint from SaveEntries, fetching each value only when it is written.

    Args:
      path: final path: "x.h5"/"x.hdf5" (HDF5 file) or "x.zarr" (Zarr v3 directory).
        An existing checkpoint there is replaced atomically.
      entries: the variables, in the order to store them; names must be unique.
      step: global step to record (int), or None.
      metadata: JSON-compatible dict to record.
      format: "h5" or "zarr"; None picks by suffix.
      checksum: record crc32c of every variable (on by default).
      pack_threshold_bytes: variables smaller than this many bytes are packed into
        one blob (see docs/checkpoint-format.md); 0 gives every variable its own array.

    Returns:
      The final path.

    Raises:
      InvalidNameError, UnsupportedDtypeError, ShapeMismatchError, DtypeMismatchError,
      InvalidMetadataError: before anything is written.
      UnsupportedFormatError: unknown format or suffix.
      CheckpointError: the file system refused (the final path is left as it was).
    """
    final = Path(path)
    fmt = format_for_path(final, format)
    entries = list(entries)
    records = _plan(entries)
    header = _header(fmt, step, metadata, final)
    packed_nbytes = assign_paths(records, max(0, int(pack_threshold_bytes)))
    try:
        with atomic.atomic_path(final) as tmp:
            _write(tmp, fmt, entries, records, packed_nbytes, header, checksum)
    except VarstoreError:
        raise
    except OSError as err:
        from varstore.errors import CheckpointError
        raise CheckpointError(f"cannot write checkpoint '{final}': {err}") from err
    return final


def _snapshot(entries: list[SaveEntry]) -> list[SaveEntry]:
    copied = []
    for entry in entries:
        value = np.array(devices.to_host(entry.get()) if devices.is_device_array(entry.get()) else entry.get(),
                         copy=True)
        copied.append(SaveEntry(entry.name, entry.shape, entry.dtype, (lambda v=value: v),
                                entry.trainable, entry.collections, entry.device))
    return copied


def save(path: os.PathLike[str] | str, target: Any, *, step: int | None = None,
         metadata: Mapping[str, Any] | None = None, format: str | None = None, checksum: bool = True,
         pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
         blocking: bool = True) -> Path | SaveHandle:
    """Saves variables to an HDF5 file or Zarr v3 directory, atomically and checksummed.

    Args:
      path: "model.h5"/"model.hdf5" or "model.zarr" (or pass `format`).
      target: a VariableStore (all its variables), a mapping of names to
        Variables or arrays, or a list of Variables.
      step, metadata, format, checksum, pack_threshold_bytes: as `save_entries`.
      blocking: False copies every value first (a snapshot, so the caller may
        change its variables at once) and writes in a background thread.

    Returns:
      The final path, or a SaveHandle when `blocking` is False.

    Raises:
      As `save_entries`; object arrays raise UnsupportedDtypeError naming the variable.
    """
    entries = entries_from(target)
    kwargs = dict(step=step, metadata=metadata, format=format, checksum=checksum,
                  pack_threshold_bytes=pack_threshold_bytes)
    if blocking:
        return save_entries(path, entries, **kwargs)
    _plan(entries)
    snapshot = _snapshot(entries)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-save")
    future = pool.submit(save_entries, path, snapshot, **kwargs)
    pool.shutdown(wait=False)
    return SaveHandle(Path(path), future)

"""save and save_entries: stream variables into a new HDF5 or Zarr v3 checkpoint.

Plans the layout from names, shapes and dtypes alone (no value is read
yet), then fetches one value at a time, computes its crc32c on the buffer
that is written, and writes it with one pwrite straight from the variable's
buffer to its place in the file (a background thread writes while the next
value is checksummed). Small variables are copied into a bounded staging
window of the packed blob. The manifest goes last, then fsync and the atomic
rename (checkpoint/atomic.py). Never holds a second copy of the model.

Per-variable Python work is kept to a few attribute reads: names are
validated in one pass, dtypes once per distinct dtype, and small variables
are packed with one concatenation per staging window, their checksums taken
on slices of that window. `blocking=False` snapshots values into host
memory bounded by `max_snapshot_bytes` and writes in a background thread.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import devices
from varstore import dtypes as _dtypes
from varstore._version import __version__
from varstore.backends import RawExtent, format_for_path, get_backend
from varstore.checkpoint import atomic
from varstore.checkpoint._batch import paused_gc
from varstore.checkpoint.checksum import crc32c_of, crc32c_raw as _crc32c_raw, pwrite_all, start_writeback
from varstore.checkpoint.entry import SaveEntry
from varstore.variables import Variable, host_views
from varstore.checkpoint.manifest import (
    c_strides,
    DEFAULT_PACK_THRESHOLD_BYTES,
    FORMAT_NAMES,
    FORMAT_VERSION,
    MANIFEST_PATH,
    PACKED_PATH,
    Record,
    assign_paths,
    check_dtype_name,
    INDEX_HEADER_BYTES,
    encode_index_header,
    encode_manifest,
    format_checksum,
    storage_layout,
    validate_names,
)
from varstore.errors import (
    DtypeMismatchError,
    InvalidMetadataError,
    InvalidNameError,
    ShapeMismatchError,
    UnsupportedDtypeError,
    VarstoreError,
)

__all__ = ["save", "save_entries", "save_async", "entries_from", "SaveHandle"]

_STAGING_BYTES = 8 << 20
_MAX_PENDING = 8
_FALLOCATE_BYTES = 1 << 20
#: Writes of at least this many bytes go in pieces of this size, each handed to disk writeback at once.
_WRITEBACK_BYTES = 8 << 20


class SaveHandle:
    """A save running in a background thread (`blocking=False`).

    Every value was copied (snapshot) before the call returned, so the caller
    may change its variables at once.

    Attributes:
      path: the final checkpoint path.
    """

    def __init__(self, path: Path, future: Future[Path]) -> None:
        self.path = path
        self._future = future

    def wait(self, timeout_s: float | None = None) -> Path:
        """Blocks until the checkpoint is durable under `path`; returns it or raises the save's error.

        Raises:
          TimeoutError: `timeout_s` (seconds) passed first.
          Any error of the save (as `save_entries`).
        """
        return self._future.result(timeout=timeout_s)

    def done(self) -> bool:
        """True once the save finished (successfully or not)."""
        return self._future.done()

    def exception(self, timeout_s: float | None = None) -> BaseException | None:
        """The save's error once it finished (None on success); waits up to `timeout_s` seconds."""
        return self._future.exception(timeout=timeout_s)

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<SaveHandle '{self.path}' {state}>"


class _Item:
    """A SaveEntry without the frozen-dataclass cost (50,000 of them are built per save)."""

    __slots__ = ("name", "shape", "dtype", "get", "trainable", "collections", "device", "variable")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: Any, get: Any, trainable: bool,
                 collections: tuple[str, ...], device: str | None, variable: Any = None) -> None:
        self.variable = variable  # the Variable, when the value is its host_view (batched in packing)
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.get = get
        self.trainable = trainable
        self.collections = collections
        self.device = device


def _is_variable(obj: Any) -> bool:
    return hasattr(obj, "host_view") and hasattr(obj, "name") and hasattr(obj, "trainable")


def _variable_entry(variable: Any, name: str | None = None) -> Any:
    return _Item(name or variable.name, tuple(variable.shape), variable.dtype, variable.host_view,
                 bool(variable.trainable), tuple(variable.collections), getattr(variable, "device", None),
                 variable if isinstance(variable, Variable) else None)


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
        return [_Item(v.name, v.shape, v.dtype, v.host_view, v.trainable, v.collections, v.device, v)
                if type(v) is Variable else _variable_entry(v) for v in target.variables()]
    if isinstance(target, Mapping):
        entries = []
        for name, value in target.items():
            if not isinstance(name, str):
                raise InvalidNameError(f"checkpoint names must be strings, got {name!r}")
            entries.append(_variable_entry(value, name) if _is_variable(value) else _array_entry(name, value))
        return entries
    if isinstance(target, (SaveEntry, _Item)):
        return [target]
    if _is_variable(target):
        return [_variable_entry(target)]
    items = list(target)
    for item in items:
        if not (_is_variable(item) or isinstance(item, (SaveEntry, _Item))):
            raise InvalidNameError(
                f"cannot save {type(item).__name__} without a name: pass a mapping of names to arrays, "
                f"a list of Variables or a VariableStore")
    return [item if isinstance(item, (SaveEntry, _Item)) else _variable_entry(item) for item in items]


def _plan(entries: list[Any]) -> list[Record]:
    validate_names([entry.name for entry in entries])
    logical: dict[Any, tuple[np.dtype, str]] = {}
    layouts: dict[Any, tuple[tuple[int, ...], str, int]] = {}  # (shape, dtype) -> (shape, name, nbytes)
    records = []
    append = records.append
    for entry in entries:
        key = (entry.shape, entry.dtype)
        try:
            layout = layouts.get(key)
        except TypeError:  # an unhashable shape (a list)
            layout, key = None, None
        if layout is None:
            dtype_key = entry.dtype
            known = logical.get(dtype_key)
            if known is None:
                dtype = check_dtype_name(entry.name, dtype_key)
                known = logical[dtype_key] = (dtype, _dtypes.dtype_name(dtype))
            shape = tuple(map(int, entry.shape))
            layout = (shape, known[1], math.prod(shape) * known[0].itemsize)
            if key is not None:
                layouts[key] = layout
        append(Record(entry.name, layout[0], layout[1], layout[2],
                      bool(entry.trainable), tuple(entry.collections), entry.device))
    return records


def _host_value(entry: Any, record: Record, where: Path) -> npt.NDArray[Any]:
    return _checked_value(entry.get(), record, where)


def _checked_value(value: Any, record: Record, where: Path) -> npt.NDArray[Any]:
    if type(value) is np.ndarray and value.shape == record.shape and value.flags.c_contiguous \
            and value.dtype == record.numpy_dtype:
        return value
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
        self._reserved: set[Path] = set()
        self.files: list[Path] = []

    def reserve(self, file: Path, nbytes: int) -> None:
        """Allocates the first `nbytes` bytes of `file` (kept open) at once; best effort."""
        if nbytes < _FALLOCATE_BYTES:
            return
        fd = self._fd(file, True)
        if file not in self.files:
            self.files.append(file)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError:
            return
        self._reserved.add(file)

    def _fd(self, file: Path, keep: bool) -> int:
        fd = self._fds.get(file)
        if fd is None:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT, 0o644)
            if keep:
                self._fds[file] = fd
        return fd

    def _write(self, extent: RawExtent, data: Any, keep: bool, done: Any) -> None:
        try:
            fd = self._fd(extent.file, keep)
            try:
                if extent.nbytes >= _FALLOCATE_BYTES and extent.file not in self._reserved:
                    try:  # reserve the blocks first: writes into allocated extents run ~2x faster on ext4
                        os.posix_fallocate(fd, extent.offset, extent.nbytes)
                    except OSError:
                        pass
                if extent.nbytes >= _WRITEBACK_BYTES:
                    view = memoryview(data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray)
                                      else data).cast("B")
                    for start in range(0, extent.nbytes, _WRITEBACK_BYTES):
                        piece = view[start:start + _WRITEBACK_BYTES]
                        pwrite_all(fd, piece, extent.offset + start)
                        start_writeback(fd, extent.offset + start, len(piece))
                else:
                    pwrite_all(fd, data, extent.offset)
            finally:
                if not keep:
                    os.close(fd)
        finally:
            self._slots.release()
            if done is not None:
                done()

    def submit(self, extent: RawExtent, data: Any, keep: bool, done: Any = None) -> None:
        """Queues a write of `data` at `extent`; `keep` keeps the file open (a shared HDF5 file);
        `done()` is called once the bytes were handed to the kernel (or the write failed)."""
        if extent.file not in self._fds and extent.file not in self.files:
            self.files.append(extent.file)
        self._slots.acquire()
        self._futures.append(self._pool.submit(self._write, extent, data, keep, done))
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


def _pack_window(records: list[Record], values: list[npt.NDArray[Any]], checksum: bool) -> Any:
    """One staging window of the packed blob from consecutive packed records.

    Runs of records of one shape and dtype at a regular stride are copied
    with one NumPy assignment each (a strided view of the window), so 50,000
    small variables cost a fraction of a microsecond each. Sets each
    record's checksum from its slice of the window. Returns None when all are empty.
    """
    base = records[0].offset or 0
    last = records[-1]
    size = (last.offset or 0) + last.nbytes - base
    if size <= 0:
        for record in records:
            record.checksum = 0 if checksum else None
        return None
    window = np.zeros(size, np.uint8)
    count = len(records)
    k = 0
    while k < count:
        record = records[k]
        nbytes = record.nbytes
        end = k + 1
        if not nbytes:
            k = end
            continue
        start = (record.offset or 0) - base
        stride = nbytes
        if end < count:
            step = (records[end].offset or 0) - (record.offset or 0)
            if step >= nbytes:
                stride = step
                shape, dtype_name = record.shape, record.dtype
                expected = (record.offset or 0) + stride
                while end < count:
                    other = records[end]
                    if other.offset != expected or other.shape != shape or other.dtype != dtype_name:
                        break
                    expected += stride
                    end += 1
        value = values[k]
        dst = np.ndarray((end - k,) + record.shape, dtype=value.dtype, buffer=window, offset=start,
                         strides=(stride,) + c_strides(record.shape, value.dtype.itemsize))
        if end - k == 1:
            dst[0] = value
        else:
            dst[...] = values[k:end]
        k = end
    data = window.data.cast("B")
    if checksum:
        crc = _crc32c_raw
        for record in records:
            start = (record.offset or 0) - base
            record.checksum = crc(data[start:start + record.nbytes])
    return data


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


def _write(tmp: Path, fmt: str, entries: list[Any], records: list[Record], packed_nbytes: int,
           header: dict[str, Any], checksum: bool, release: Any = None) -> None:
    """Writes every value into a new container at `tmp` and fsyncs it.

    `release(nbytes)` (async saves) is called once a value's bytes are no
    longer needed (written, or copied into a staging window).
    """
    backend = get_backend(fmt)
    single_file = not backend.is_directory
    writer = backend.open_writer(tmp, INDEX_HEADER_BYTES if single_file else 0)
    writes = _Writes()
    if single_file:
        # Reserve the data's blocks in one go before HDF5 lays out anything: the file's extents then
        # lie on disk in file order (per-dataset reservations interleaved with HDF5's metadata writes
        # scattered a 1.2 GB file over ~150 extents out of order, slowing the later sequential read).
        # HDF5 truncates the file to its end-of-allocation on close, so an overestimate leaves nothing.
        writes.reserve(tmp, INDEX_HEADER_BYTES + packed_nbytes
                       + sum(record.nbytes for record in records if record.path is not None))
    try:
        packed_extent = None
        if packed_nbytes:
            packed_extent = writer.create_array(
                PACKED_PATH, np.dtype("u1"), (packed_nbytes,),
                {"description": "small variables packed back to back; see _varstore/manifest"})
        native = writer.native_bytes_strings
        window: list[int] = []
        window_values: list[Any] = []  # fetched when reached: values stream in order
        window_variables: list[int] = []  # positions in the window whose Variable is fetched at flush
        window_bytes = 0

        def flush_window() -> None:
            nonlocal window_bytes
            if not window:
                return
            group = [records[i] for i in window]
            values = list(window_values)
            if window_variables:  # Variables' live buffers, fetched in one batch (host_views)
                views = host_views([entries[window[k]].variable for k in window_variables], read_only=False)
                for k, view in zip(window_variables, views):
                    values[k] = _checked_value(view, group[k], tmp)
                window_variables.clear()
            data = _pack_window(group, values, checksum)
            if release is not None:
                release(sum(r.nbytes for r in group))
            if data is not None and packed_extent is not None:
                start = group[0].offset or 0
                writes.submit(RawExtent(packed_extent.file, packed_extent.offset + start, len(data)),
                              data, single_file)
            window.clear()
            window_values.clear()
            window_bytes = 0

        for index, (entry, record) in enumerate(zip(entries, records)):
            if release is not None and window and not entry.ready():
                # Async: the caller may be waiting for snapshot memory held by this window.
                flush_window()
            if record.path is None:
                if window_bytes + record.nbytes > _STAGING_BYTES:
                    flush_window()
                if release is None and type(entry) is _Item and entry.variable is not None:
                    window_variables.append(len(window))
                    window.append(index)
                    window_values.append(None)
                    window_bytes += record.nbytes
                    continue
                window.append(index)
                value = _host_value(entry, record, tmp)
                if not isinstance(entry, (_Item, _Snapshot)):
                    value = value.copy()  # a producer's fresh array (convert) is released at once
                window_values.append(value)
                window_bytes += record.nbytes
                continue
            value = _host_value(entry, record, tmp)
            if checksum:
                record.checksum = crc32c_of(value)
            storage_dtype, storage_shape = storage_layout(value.dtype, record.shape, native)
            extent = writer.create_array(record.path, storage_dtype, storage_shape,
                                         _array_attrs(record, fmt == "h5"))
            done = None if release is None else (lambda n=record.nbytes: release(n))
            if extent is None:
                writer.write_array(record.path, value.reshape(-1).view(storage_dtype).reshape(storage_shape))
                if done is not None:
                    done()
            else:
                if single_file:
                    record.file_offset = extent.offset
                writes.submit(extent, value, single_file, done)
        flush_window()
        atomic.fault_point("after_data")
        writes.drain()
        atomic.fault_point("before_checksums")
        packed_file_offset = packed_extent.offset if (packed_extent is not None and single_file) else None
        manifest = encode_manifest(header, records, packed_nbytes, packed_file_offset)
        extent = writer.create_array(MANIFEST_PATH, np.dtype("u1"), (len(manifest),),
                                     {"description": "JSON index of every variable; see docs"})
        if extent is not None:
            writes.submit(extent, manifest, single_file)
        root = {f"varstore_{key}" if key in ("format", "format_version", "library_version") else key: value
                for key, value in header.items()}
        root["varstore_manifest_crc32c"] = _crc32c_raw(manifest)  # readers check the manifest with it
        writer.set_root_attrs(root)
        writes.drain()
        paths = writer.close()
        if single_file and extent is not None:
            # The HDF5 user block says where the manifest is, so readers can skip the HDF5 library.
            writes.submit(RawExtent(tmp, 0, INDEX_HEADER_BYTES),
                          encode_index_header(extent.offset, len(manifest), _crc32c_raw(manifest)), True)
            writes.drain()
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
    with paused_gc():
        entries = list(entries)
        records = _plan(entries)
        header = _header(fmt, step, metadata, final)
        packed_nbytes = assign_paths(records, max(0, int(pack_threshold_bytes)))
        return _save_planned(final, fmt, entries, records, packed_nbytes, header, checksum)


def _save_planned(final: Path, fmt: str, entries: list[Any], records: list[Record], packed_nbytes: int,
                  header: dict[str, Any], checksum: bool, release: Any = None) -> Path:
    try:
        with atomic.atomic_path(final) as tmp:
            _write(tmp, fmt, entries, records, packed_nbytes, header, checksum, release)
    except VarstoreError:
        raise
    except OSError as err:
        from varstore.errors import CheckpointError
        raise CheckpointError(f"cannot write checkpoint '{final}': {err}") from err
    return final


class _SnapshotBudget:
    """Bytes of snapshot copies alive at once, at most `limit` (None: no limit).

    One value larger than the limit is still admitted when nothing else is
    held, so every save can finish. `fail()` wakes a blocked caller when the
    writer thread died.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.failed = False
        self._cond = threading.Condition()

    def acquire(self, nbytes: int) -> bool:
        """Blocks until `nbytes` fit; False when the writer failed meanwhile."""
        with self._cond:
            while (self.limit is not None and self.used and self.used + nbytes > self.limit
                   and not self.failed):
                self._cond.wait()
            if self.failed:
                return False
            self.used += nbytes
            self.peak = max(self.peak, self.used)
            return True

    def release(self, nbytes: int) -> None:
        with self._cond:
            self.used -= nbytes
            self._cond.notify_all()

    def fail(self) -> None:
        with self._cond:
            self.failed = True
            self._cond.notify_all()


class _Snapshot:
    """An entry whose value is a host copy handed over from the caller's thread."""

    __slots__ = ("name", "shape", "dtype", "trainable", "collections", "device", "_value", "_ready")

    def __init__(self, entry: Any) -> None:
        self.name = entry.name
        self.shape = entry.shape
        self.dtype = entry.dtype
        self.trainable = entry.trainable
        self.collections = entry.collections
        self.device = entry.device
        self._value: Any = None
        self._ready = threading.Event()

    def put(self, value: Any) -> None:
        """Hands over the copy (or the exception taking it raised)."""
        self._value = value
        self._ready.set()

    def ready(self) -> bool:
        """True once the copy was handed over (get() will not block)."""
        return self._ready.is_set()

    def get(self) -> npt.NDArray[Any]:
        self._ready.wait()
        value, self._value = self._value, None
        if isinstance(value, BaseException):
            raise value
        return value


def _host_copy(value: Any) -> npt.NDArray[Any]:
    if devices.is_device_array(value):
        return np.ascontiguousarray(devices.to_host(value))
    return np.array(value, order="C", copy=True)


def save_async(final: Path, entries: list[Any], *, step: int | None = None,
               metadata: Mapping[str, Any] | None = None, format: str | None = None,
               checksum: bool = True, pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
               max_snapshot_bytes: int | None = None, after: Any = None) -> SaveHandle:
    """Snapshots `entries` into host memory and writes them in a background thread.

    Returns once every value has been copied (so the caller may mutate its
    variables at once). With `max_snapshot_bytes` (bytes), at most that many
    bytes of copies are alive: the call then blocks while the background
    thread writes the copies already taken and frees them, and returns when
    the last value has been copied. Nothing of the caller's runs between the
    first and the last copy, so the snapshot is consistent. `after(path)`
    runs in the background thread after a successful save (the manager's
    pointer and retention); its result is ignored.

    Raises:
      As `save_entries`, for names, dtypes and metadata (before anything is copied).
    """
    fmt = format_for_path(final, format)
    records = _plan(entries)
    header = _header(fmt, step, metadata, final)
    packed_nbytes = assign_paths(records, max(0, int(pack_threshold_bytes)))
    budget = _SnapshotBudget(None if max_snapshot_bytes is None else max(0, int(max_snapshot_bytes)))
    snapshots = [_Snapshot(entry) for entry in entries]

    def run() -> Path:
        try:
            path = _save_planned(final, fmt, snapshots, records, packed_nbytes, header, checksum,
                                 budget.release)
            if after is not None:
                after(path)
            return path
        finally:
            budget.fail()  # unblocks a caller still copying when the writer stopped early

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-save")
    future = pool.submit(run)
    pool.shutdown(wait=False)
    for entry, record, snapshot in zip(entries, records, snapshots):
        if not budget.acquire(record.nbytes):
            break  # the writer failed; wait() reports why
        try:
            snapshot.put(_host_copy(entry.get()))
        except BaseException as err:
            snapshot.put(err)
            future.exception()  # let the writer stop before the caller sees the error
            raise
    return SaveHandle(final, future)


def save(path: os.PathLike[str] | str, target: Any, *, step: int | None = None,
         metadata: Mapping[str, Any] | None = None, format: str | None = None, checksum: bool = True,
         pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
         blocking: bool = True, max_snapshot_bytes: int | None = None) -> Path | SaveHandle:
    """Saves variables to an HDF5 file or Zarr v3 directory, atomically and checksummed.

    Args:
      path: "model.h5"/"model.hdf5" or "model.zarr" (or pass `format`).
      target: a VariableStore (all its variables), a mapping of names to
        Variables or arrays, or a list of Variables.
      step, metadata, format, checksum, pack_threshold_bytes: as `save_entries`.
      blocking: False copies every value into host memory (a snapshot, so the
        caller may change its variables as soon as the call returns) and
        writes in a background thread; returns a SaveHandle (wait(), done(),
        exception()).
      max_snapshot_bytes: with blocking=False, the most bytes of snapshot
        copies alive at once (bytes; None: no limit, the call returns after
        one copy of the model). When the model is larger, the call blocks,
        writing the copies already taken, until the last value is copied.

    Returns:
      The final path, or a SaveHandle when `blocking` is False.

    Raises:
      As `save_entries`; object arrays raise UnsupportedDtypeError naming the variable.
      With blocking=False, errors found while writing are raised by SaveHandle.wait().
    """
    kwargs = dict(step=step, metadata=metadata, format=format, checksum=checksum,
                  pack_threshold_bytes=pack_threshold_bytes)
    with paused_gc():  # see _batch.py: collections walking 50,000 variables doubled small-variable saves
        entries = entries_from(target)
        if blocking:
            return save_entries(path, entries, **kwargs)
        return save_async(Path(path), entries, max_snapshot_bytes=max_snapshot_bytes, **kwargs)

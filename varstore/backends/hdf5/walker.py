"""Read-only walker for HDF5 files that varstore did not write (Keras weights, plain h5py files).

Lists every dataset with its shape, dtype and attributes (those over
ATTRIBUTE_CAP_BYTES listed by type and shape, not read), and every object
that is not a plain array (soft, dangling and external links, compound,
variable-length, reference, opaque and virtual datasets, named datatypes)
with the reason it is not read. Reads one dataset at a time. Never follows
external links, never writes. A dataset whose installed filter is outside the
allow-list of varstore.backends.codecs is refused (UnsafeCheckpointError);
deflate chunks are inflated first by a bounded decoder (never past the
chunk's size) before HDF5, which grows its buffer to the whole stream, reads
them. The importers in varstore.formats (keras.py,
generic.py) use it so they never import h5py themselves; it knows nothing
about variables, names rules or checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
from typing import IO, Any

import h5py
import numpy as np
from h5py import h5t, h5z
import numpy.typing as npt

from varstore._limits import ATTRIBUTE_CAP_BYTES
from varstore.backends.codecs import bounded_decode, check_hdf5_filter
from varstore.errors import (CorruptCheckpointError, UnknownVariableError, UnsafeCheckpointError,
                             UnsupportedFormatError, VarstoreError)

#: Registered HDF5 filter ids (https://github.com/HDFGroup/hdf5_plugins) -> names, for messages.
_FILTER_NAMES = {307: "bzip2", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle", 32013: "zfp",
                 32015: "zstd", 32017: "sz", 32026: "blosc2"}
_TYPE_CLASSES = {h5t.INTEGER: "integer", h5t.FLOAT: "float", h5t.TIME: "time", h5t.STRING: "string",
                 h5t.BITFIELD: "bitfield", h5t.OPAQUE: "opaque", h5t.COMPOUND: "compound",
                 h5t.REFERENCE: "reference", h5t.ENUM: "enum", h5t.VLEN: "variable-length", h5t.ARRAY: "array"}

__all__ = ["DatasetEntry", "GroupEntry", "SkippedObject", "HDF5Walker", "json_attrs", "over_cap"]


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """One readable array dataset.

    Attributes:
      path: path inside the file without the leading "/" ("layers/dense/vars/0").
      shape: dimension sizes; () for a scalar dataset.
      dtype: NumPy dtype in native byte order (HDF5 converts on read).
      attrs: the dataset's attributes, JSON-compatible (see json_attrs).
      chunks: chunk shape, or None for contiguous storage.
      compression: filter name ("gzip", "lzf", ...) or None.
      stored_nbytes: bytes the file stores for it (H5Dget_storage_size: 0 when no chunk was written).
      filtered: whether those bytes pass through filters (compression) on read.
    """

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[str, Any]
    chunks: tuple[int, ...] | None = None
    compression: str | None = None
    stored_nbytes: int | None = None
    filtered: bool = False


@dataclasses.dataclass(frozen=True)
class GroupEntry:
    """One group: path without the leading "/" ("" for the root) and its attributes."""

    path: str
    attrs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class SkippedObject:
    """An object that is not read, with the reason (shown by `varstore ls`)."""

    path: str
    reason: str


def _json_value(value: Any) -> Any:
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_json_value(v) for v in value.tolist()] if value.dtype.kind != "O" else [
            _json_value(v) for v in value.reshape(-1)]
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, np.generic):
        return _json_value(value.item())
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def over_cap(attrs: h5py.AttributeManager, key: str) -> str | None:
    """A listing of attribute `key` when it holds more than ATTRIBUTE_CAP_BYTES, else None (read it).

    Its size is taken from its dataspace and type (its values in memory) and
    from the bytes the file stores for it, without reading a value: a 96 MiB
    float16 attribute is "<attribute 'big': float16 (50331648,) not loaded,
    over the cap of 65,536 bytes>", never 48 Mi Python floats.

    Raises:
      OSError, TypeError, ValueError: h5py cannot describe the attribute (callers list it as unreadable).
    """
    attr = attrs.get_id(key)
    shape = attr.shape
    dtype = attr.dtype
    elements = 1
    for extent in shape or ():
        elements *= int(extent)
    try:
        stored = int(attr.get_storage_size())
    except RuntimeError:  # h5py raises for a size of 0 (an empty attribute)
        stored = 0
    size = max(elements * dtype.itemsize, stored)
    if size <= ATTRIBUTE_CAP_BYTES:
        return None
    return (f"<attribute {key!r}: {dtype} {tuple(int(d) for d in shape or ())} not loaded, over the cap of "
            f"{ATTRIBUTE_CAP_BYTES:,} bytes>")


def json_attrs(attrs: h5py.AttributeManager) -> dict[str, Any]:
    """An object's attributes as JSON-compatible values.

    bytes become str (UTF-8, invalid bytes replaced), arrays become lists,
    complex numbers become [real, imag], empty attributes become None, an
    attribute over ATTRIBUTE_CAP_BYTES becomes its listing (see over_cap) and
    an attribute h5py cannot read becomes "<unreadable: reason>".
    """
    result: dict[str, Any] = {}
    for key in attrs:
        try:
            result[key] = over_cap(attrs, key) or _json_value(attrs[key])
        except (OSError, TypeError, ValueError) as err:
            result[key] = f"<unreadable: {err}>"
    return result


def _skip_reason(ds: h5py.Dataset) -> str | None:
    """Why a dataset is not a plain array, or None when it is one."""
    dt = ds.dtype
    if ds.shape is None:
        return "empty dataset (null dataspace), holds no array"
    if ds.is_virtual:
        return "virtual dataset (maps data from other files); varstore does not follow it"
    if ds.external:
        return "raw data stored in external files; varstore does not follow them"
    if h5py.check_vlen_dtype(dt) is not None or h5py.check_string_dtype(dt) is not None and dt.kind == "O":
        return "variable-length data (strings or sequences need Python objects)"
    if h5py.check_ref_dtype(dt) is not None:
        return "object or region references, not numbers"
    if dt.names:
        fields = ", ".join(f"{n}: {dt.fields[n][0]}" for n in dt.names)
        return f"compound dtype ({fields}); only plain numeric arrays are variables"
    if dt.subdtype is not None:
        return f"array-of-arrays dtype {dt}; only plain numeric arrays are variables"
    if dt.kind == "V":
        return f"opaque dtype {dt}; only plain numeric arrays are variables"
    if dt.kind == "O":
        return "object dtype, not numbers"
    if dt.kind not in "biufcS":
        return f"dtype {dt} is not a plain numeric array"
    return None


def _type_text(ds: h5py.Dataset) -> str:
    """The HDF5 type of a dataset in words ("128-bit float", "64-bit time"), for a type NumPy lacks."""
    try:
        tid = ds.id.get_type()
        return f"{tid.get_size() * 8}-bit {_TYPE_CLASSES.get(tid.get_class(), 'HDF5 type')}"
    except (OSError, ValueError, TypeError):
        return "unknown HDF5 type"


def _filters(ds: h5py.Dataset) -> tuple[bool, str | None]:
    """(whether the dataset is filtered, why it cannot be read: a filter this HDF5 lacks, or None)."""
    try:
        dcpl = ds.id.get_create_plist()
        count = dcpl.get_nfilters()
        missing = []
        for i in range(count):
            code, _, _, name = dcpl.get_filter(i)
            if not h5z.filter_avail(code):
                label = _FILTER_NAMES.get(code) or name.decode("utf-8", "replace") or "unregistered"
                missing.append(f"{code} ({label})")
    except (OSError, ValueError, RuntimeError) as err:
        return True, f"its filter pipeline cannot be read: {err}"
    if missing:
        return True, (f"needs HDF5 filter {', '.join(missing)}, not installed (install its plugin, e.g. "
                      f"hdf5plugin, and set HDF5_PLUGIN_PATH)")
    return count > 0, None


def _refused_filter(ds: h5py.Dataset, where: str, path: str) -> str | None:
    """The UnsafeCheckpointError message for an installed filter outside the allow-list, else None."""
    try:
        dcpl = ds.id.get_create_plist()
        for i in range(dcpl.get_nfilters()):
            code, _, _, name = dcpl.get_filter(i)
            label = _FILTER_NAMES.get(code) or name.decode("utf-8", "replace") or "unregistered"
            check_hdf5_filter(code, label, where, path)
    except UnsafeCheckpointError as err:
        return str(err)
    except (OSError, ValueError, RuntimeError):
        return None  # _filters reports an unreadable pipeline
    return None


def _check_deflate_chunks(ds: h5py.Dataset, where: str, path: str) -> None:
    """Inflates every deflate chunk of `ds` with a bounded decoder: none may pass the chunk's size.

    Raises:
      CorruptCheckpointError: a chunk inflating past its declared size (a decompression bomb), naming it.
    """
    if ds.chunks is None:
        return
    dcpl = ds.id.get_create_plist()
    codes = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    if 1 not in codes:
        return
    limit = int(np.prod(ds.chunks, dtype=np.int64)) * int(ds.id.get_type().get_size())
    for i in range(ds.id.get_num_chunks()):
        offset = ds.id.get_chunk_info(i).chunk_offset
        mask, data = ds.id.read_direct_chunk(offset)
        for j in reversed(range(len(codes))):  # decode order; a set mask bit: filter j was skipped
            if mask & (1 << j):
                continue
            if codes[j] == 3:  # fletcher32: a 4-byte checksum at the end
                data = data[:-4]
                continue
            if codes[j] == 1:
                bounded_decode(data, {"id": "zlib"}, limit, where, str(tuple(offset)), path)
            break  # the other filters decode into buffers of the chunk's size


def _native(dt: np.dtype) -> np.dtype:
    return dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt


class HDF5Walker:
    """Opens an HDF5 file read-only and lists its contents without reading data.

    Attributes:
      label: the file name used in messages.
      datasets: readable array datasets, in h5py's (name) order.
      groups: every group reached through hard links, the root first.
      skipped: objects that are not read, with reasons.
      root_attrs: the root group's attributes (JSON-compatible).
    """

    def __init__(self, source: os.PathLike[str] | str | IO[bytes], label: str | None = None) -> None:
        """Opens `source` (a path, or a seekable binary file object) and walks it.

        Raises:
          CorruptCheckpointError: h5py cannot open or walk the file.
        """
        self.label = label or str(getattr(source, "name", source))
        try:
            self._file = h5py.File(source, "r")
        except (OSError, ValueError) as err:
            raise CorruptCheckpointError(f"cannot open HDF5 file '{self.label}': {err}") from err
        self.datasets: list[DatasetEntry] = []
        self.groups: list[GroupEntry] = []
        self.skipped: list[SkippedObject] = []
        self._by_path: dict[str, DatasetEntry] = {}
        self._reasons: dict[str, str] = {}
        self._unsafe: dict[str, str] = {}
        self._first_paths: dict[int, str] = {}  # hash of a dataset's id -> its first path
        try:
            self.root_attrs = json_attrs(self._file.attrs)
            self._walk(self._file, "", set())
        except (OSError, KeyError, RuntimeError, ValueError) as err:
            self._file.close()
            raise CorruptCheckpointError(f"cannot walk HDF5 file '{self.label}': {err}") from err

    def _skip(self, path: str, reason: str) -> None:
        self.skipped.append(SkippedObject(path, reason))
        self._reasons[path] = reason

    def _walk(self, group: h5py.Group, prefix: str, seen: set[Any]) -> None:
        """Lists `group`'s members; `seen` holds the groups walked (datasets: self._first_paths)."""
        seen.add(group.id)
        first_paths: dict[int, str] = self._first_paths
        self.groups.append(GroupEntry(prefix, json_attrs(group.attrs) if prefix else self.root_attrs))
        for name in group:
            path = f"{prefix}/{name}" if prefix else name
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                target = link.path
                if group.get(name) is None:
                    self._skip(path, f"dangling soft link to '{target}'")
                else:
                    self._skip(path, f"soft link to '{target}' (not followed; the target is "
                                     f"listed under its own name)")
                continue
            if isinstance(link, h5py.ExternalLink):
                self._skip(path, f"external link to '{link.filename}:{link.path}'; "
                                 f"varstore never follows external links")
                continue
            if not isinstance(link, h5py.HardLink):
                self._skip(path, f"link of unknown type {type(link).__name__}")
                continue
            obj = group[name]
            if isinstance(obj, h5py.Group):
                if obj.id in seen:
                    self._skip(path, "another hard link to a group already listed")
                    continue
                self._walk(obj, path, seen)
            elif isinstance(obj, h5py.Dataset):
                first = first_paths.setdefault(hash(obj.id), path)  # a hash: holds no open handle
                if first != path and group.file[first].id == obj.id:  # read once, not once per name
                    self._skip(path, f"another hard link to dataset '{first}' (read once, under that name)")
                    continue
                try:
                    reason = _skip_reason(obj)
                except (TypeError, ValueError) as err:  # h5py has no NumPy dtype for it (quad float, time)
                    reason = f"{_type_text(obj)} type, which NumPy has no dtype for ({err})"
                filtered, missing_filter = _filters(obj)
                reason = reason or missing_filter
                if reason is None and filtered:
                    unsafe = _refused_filter(obj, self.label, path)
                    if unsafe is not None:
                        self._unsafe[path] = unsafe
                        reason = unsafe
                if reason is not None:
                    self._skip(path, reason)
                    continue
                try:
                    stored = int(obj.id.get_storage_size())
                except (OSError, ValueError):
                    stored = None
                entry = DatasetEntry(
                    path=path, shape=tuple(int(d) for d in obj.shape), dtype=_native(obj.dtype),
                    attrs=json_attrs(obj.attrs),
                    chunks=tuple(obj.chunks) if obj.chunks else None,
                    compression=obj.compression, stored_nbytes=stored, filtered=filtered)
                self.datasets.append(entry)
                self._by_path[path] = entry
            elif isinstance(obj, h5py.Datatype):
                self._skip(path, "named datatype, holds no data")
            else:
                self._skip(path, f"HDF5 object of unknown kind {type(obj).__name__}")

    def dataset(self, path: str) -> DatasetEntry:
        """The entry of one readable dataset.

        Raises:
          UnsupportedFormatError: `path` is a skipped object (says why).
          UnknownVariableError: nothing readable at `path`.
        """
        entry = self._by_path.get(path.lstrip("/"))
        if entry is None:
            reason = self._reasons.get(path.lstrip("/"))
            if path.lstrip("/") in self._unsafe:
                raise UnsafeCheckpointError(self._unsafe[path.lstrip("/")])
            if reason is not None:
                raise UnsupportedFormatError(f"cannot read '{path}' in '{self.label}': {reason}")
            raise UnknownVariableError(f"no dataset '{path}' in HDF5 file '{self.label}'")
        return entry

    entry = dataset  # the name generic readers use for both walkers

    def stored(self, path: str) -> tuple[int | None, bool]:
        """(bytes the file stores for the dataset, 0 when no chunk was written; whether they are filtered).

        Raises:
          UnsupportedFormatError / UnknownVariableError: as `dataset`.
        """
        entry = self.dataset(path)
        return entry.stored_nbytes, entry.filtered

    def group_attrs(self, path: str) -> dict[str, Any] | None:
        """Attributes of the group at `path` ("" for the root), or None when there is none."""
        for group in self.groups:
            if group.path == path.strip("/"):
                return group.attrs
        return None

    def read(self, path: str, out: npt.NDArray[Any] | None = None,
             max_expansion: float | None = None) -> npt.NDArray[Any]:
        """Reads one dataset, into `out` when given (C-contiguous, its shape and native dtype).

        Deflate chunks are inflated by a bounded decoder first (`max_expansion` is for the walkers' common
        signature; the read limit is checked by the caller).

        Raises:
          UnsupportedFormatError / UnknownVariableError: as `dataset`.
          UnsafeCheckpointError: a filter outside the allow-list.
          CorruptCheckpointError: HDF5 cannot read the data (damaged chunks,
            a missing filter plugin), or a chunk inflates past its size; the message names the dataset and file.
        """
        entry = self.dataset(path)
        result = out if out is not None else np.empty(entry.shape, dtype=entry.dtype)
        try:
            ds = self._file[entry.path]
            if entry.filtered:
                _check_deflate_chunks(ds, self.label, entry.path)
            if result.size:
                ds.read_direct(result)
        except VarstoreError:
            raise
        except (OSError, KeyError, RuntimeError, ValueError, TypeError) as err:
            raise CorruptCheckpointError(
                f"cannot read dataset '{entry.path}' from HDF5 file '{self.label}': {err}") from err
        return result

    def close(self) -> None:
        """Closes the file; further reads raise."""
        try:
            self._file.close()
        except (OSError, ValueError):
            pass

"""The manifest: what a varstore checkpoint records about itself and each variable.

Defines the name rules, where each variable is stored (its own array at its
full name, an alias path, or a slice of the packed blob), how logical dtypes
map to stored dtypes and shapes, and the JSON document (format version 1)
kept at "_varstore/manifest" (the optional "file_offset" column
and the HDF5 index header, index_header.py, were added compatibly; files without them read the same). Decoding is
columnar and lazy: a Record is built only when one is asked for, so opening
a checkpoint of 50,000 variables costs one json.loads.
docs/checkpoint-format.md is the prose version of this module. No file I/O here.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from varstore._limits import load_json
from varstore.store._naming import validate_name as _validate_name
from varstore import dtypes as _dtypes
from varstore.checkpoint._batch import paused_gc
from varstore.checkpoint.format.byte_ranges import check_disjoint
from varstore.checkpoint.format.index_header import INDEX_HEADER_BYTES, decode_index_header, encode_index_header
from varstore.errors import CorruptCheckpointError, InvalidNameError, UnsafeCheckpointError, UnsupportedDtypeError

__all__ = [
    "c_strides",
    "FORMAT_VERSION",
    "FORMAT_NAMES",
    "RESERVED_GROUP",
    "MANIFEST_PATH",
    "PACKED_PATH",
    "PACK_ALIGNMENT",
    "DEFAULT_PACK_THRESHOLD_BYTES",
    "Record",
    "validate_name",
    "storage_layout",
    "assign_paths",
    "encode_manifest",
    "decode_manifest",
    "ManifestColumns",
    "decode_manifest_columns",
    "validate_names",
    "format_checksum",
    "logical_dtype",
    "INDEX_HEADER_BYTES",
    "encode_index_header",
    "decode_index_header",
]

FORMAT_VERSION = "1.0"
FORMAT_NAMES = {"h5": "varstore-hdf5", "zarr": "varstore-zarr"}
RESERVED_GROUP = "_varstore"
MANIFEST_PATH = "_varstore/manifest"
PACKED_PATH = "_varstore/packed"
ALIAS_PREFIX = "_varstore/aliased/"
#: Packed variables start at multiples of this many bytes in the packed blob.
PACK_ALIGNMENT = 64
#: Variables with fewer bytes than this go into the packed blob (bytes); 0 disables packing.
DEFAULT_PACK_THRESHOLD_BYTES = 16384


class Record:
    """One variable as the manifest records it.

    Attributes:
      name: full variable name.
      shape: logical shape.
      dtype: logical dtype name ("bfloat16", "U3", ...).
      nbytes: bytes of the value.
      trainable, collections, device: as saved.
      path: storage path of its own array, or None when packed.
      offset: byte offset in the packed blob when packed, else None.
      checksum: crc32c of the C-order little-endian bytes, or None.
      file_offset: byte offset of the value in the HDF5 file (own arrays), or None
        (Zarr, packed variables, or a version 1.0 file).

    Mutable, compared by its fields, unhashable (what a plain dataclass gives);
    a slotted class so that reading a checkpoint does not import `dataclasses`.
    """

    __slots__ = ("name", "shape", "dtype", "nbytes", "trainable", "collections", "device", "path", "offset",
                 "checksum", "file_offset")
    __match_args__ = ("name", "shape", "dtype", "nbytes", "trainable", "collections", "device", "path", "offset",
                      "checksum", "file_offset")

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    trainable: bool | None  # None: unknown (a file converted from a format that records no flag)
    collections: tuple[str, ...]
    device: str | None
    path: str | None
    offset: int | None
    checksum: int | None
    file_offset: int | None

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str, nbytes: int, trainable: bool | None = True,
                 collections: tuple[str, ...] = (), device: str | None = None, path: str | None = None,
                 offset: int | None = None, checksum: int | None = None, file_offset: int | None = None) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.trainable = trainable
        self.collections = collections
        self.device = device
        self.path = path
        self.offset = offset
        self.checksum = checksum
        self.file_offset = file_offset

    def _fields(self) -> tuple[Any, ...]:
        return (self.name, self.shape, self.dtype, self.nbytes, self.trainable, self.collections, self.device,
                self.path, self.offset, self.checksum, self.file_offset)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as a dataclass with eq

    def __repr__(self) -> str:
        return "Record(" + ", ".join(f"{k}={v!r}" for k, v in zip(self.__slots__, self._fields())) + ")"

    @property
    def numpy_dtype(self) -> np.dtype:
        """The logical NumPy dtype (native byte order; varstore runs on little-endian hosts)."""
        return _logical(self.dtype)


@functools.lru_cache(maxsize=None)
def _logical(name: str) -> np.dtype:
    return _dtypes.as_dtype(name)


def logical_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a logical dtype name from a manifest (cached).

    Raises:
      UnsupportedDtypeError: an unknown name.
    """
    return _logical(name)


# The name rule is defined once, in varstore/_naming.py; re-exported here for the manifest's callers.
validate_name = _validate_name


def storage_layout(dtype: np.dtype, shape: tuple[int, ...],
                   native_bytes_strings: bool) -> tuple[np.dtype, tuple[int, ...]]:
    """The stored dtype and shape of a logical dtype and shape.

    bfloat16 -> uint16 and float8_* -> uint8 (same shape); "U<n>" -> uint32
    with a trailing axis of n; "S<n>" -> itself where the backend stores
    fixed-length bytes (HDF5), else uint8 with a trailing axis of n (Zarr);
    everything else as is. All little-endian.
    """
    if dtype.kind == "U":
        return np.dtype("<u4"), tuple(shape) + (dtype.itemsize // 4,)
    if dtype.kind == "S":
        if native_bytes_strings:
            return dtype, tuple(shape)
        return np.dtype("u1"), tuple(shape) + (dtype.itemsize,)
    return _stored_dtype(dtype), tuple(shape)


@functools.lru_cache(maxsize=256)
def _stored_dtype(dtype: np.dtype) -> np.dtype:
    """storage_layout's dtype of a numeric dtype, cached (~4 us in NumPy's Python; twice per value read)."""
    storage = _dtypes.storage_dtype(dtype)
    return storage.newbyteorder("<") if storage.itemsize > 1 else storage


def _part_needs_alias(part: str) -> bool:
    return part.startswith("__") or part == "zarr.json" or len(part.encode("utf-8")) > 200


def assign_paths(records: list[Record], pack_threshold_bytes: int) -> int:
    """Decides where each record is stored; returns the packed blob's size in bytes.

    Records with nbytes < pack_threshold_bytes are packed (offsets aligned to
    PACK_ALIGNMENT; the blob ends with the last packed variable's last byte). The others get their own array at their full name, except
    names that cannot be a node there: a name that is also a scope of another
    name ("a" next to "a/b"), names under "_varstore", and names with a part
    starting "__", equal to "zarr.json" or longer than 200 bytes; those go to
    "_varstore/aliased/<k>".
    """
    scopes: set[str] = set()
    own = [record for record in records if record.nbytes >= pack_threshold_bytes]
    for record in records if own else ():  # scopes matter only for variables with their own array
        name = record.name
        start = 0
        while True:
            cut = name.find("/", start)
            if cut < 0:
                break
            scopes.add(name[:cut])
            start = cut + 1
    packed = 0
    end = 0
    aliases = 0
    for record in records:
        if record.nbytes < pack_threshold_bytes:
            record.path = None
            record.offset = packed
            end = packed + record.nbytes
            packed += -(-record.nbytes // PACK_ALIGNMENT) * PACK_ALIGNMENT
            continue
        name = record.name
        record.offset = None
        if (name in scopes or name == RESERVED_GROUP or name.startswith(RESERVED_GROUP + "/")
                or any(_part_needs_alias(part) for part in name.split("/"))):
            record.path = f"{ALIAS_PREFIX}{aliases}"
            aliases += 1
        else:
            record.path = name
    return end


def format_checksum(value: int | None) -> str | None:
    """crc32c as "crc32c:<8 lowercase hex digits>", or None."""
    return None if value is None else f"crc32c:{value:08x}"


def encode_manifest(header: dict[str, Any], records: list[Record], packed_nbytes: int,
                    packed_file_offset: int | None = None) -> bytes:
    """The manifest document as UTF-8 JSON bytes (columnar, so 50,000 variables stay small).

    `packed_file_offset` is the packed blob's byte offset in the HDF5 file (None for Zarr).
    """
    collection_sets: dict[tuple[str, ...], int] = {}
    devices: dict[str | None, int] = {}
    document = dict(header)
    document["packed"] = {"path": PACKED_PATH if packed_nbytes else None, "nbytes": packed_nbytes,
                          "alignment": PACK_ALIGNMENT}
    if packed_nbytes and packed_file_offset is not None:
        document["packed"]["file_offset"] = packed_file_offset
    document["variables"] = {
        "name": [r.name for r in records],
        "shape": [list(r.shape) for r in records],
        "dtype": [r.dtype for r in records],
        "nbytes": [r.nbytes for r in records],
        "path": [r.path for r in records],
        "offset": [r.offset for r in records],
        "checksum": [r.checksum for r in records],
        "trainable": [r.trainable for r in records],
        "collections": [collection_sets.setdefault(tuple(r.collections), len(collection_sets))
                        for r in records],
        "device": [devices.setdefault(r.device, len(devices)) for r in records],
    }
    if any(r.file_offset is not None for r in records):
        document["variables"]["file_offset"] = [r.file_offset for r in records]
    document["collection_sets"] = [list(c) for c in collection_sets]
    document["devices"] = list(devices)
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


_COLUMNS = ("shape", "dtype", "nbytes", "path", "offset", "checksum", "trainable", "collections", "device")


class ManifestColumns:
    """The manifest's per-variable columns, decoded lazily into Records.

    Attributes:
      names: every variable name, in storage order.
      columns: the JSON columns ("shape", "dtype", ..., and "file_offset" when present); after
        `check`, "shape" holds tuples (shared between variables of one shape).
      where: the checkpoint, for error messages.
      sets: the collection-name tuples the "collections" column indexes.
      devices: the device names the "device" column indexes.
    """

    def __init__(self, columns: dict[str, Any], sets: list[tuple[str, ...]], devices: list[Any],
                 where: str) -> None:
        self.columns = columns
        self.names: list[str] = columns["name"]
        self.where = where
        self._sets = self.sets = sets
        self._devices = self.devices = devices
        self._file_offsets = columns.get("file_offset")
        self.index = dict(zip(self.names, range(len(self.names))))
        if len(self.index) != len(self.names):
            raise CorruptCheckpointError(f"the manifest of '{where}' lists a variable name twice")

    def __len__(self) -> int:
        return len(self.names)

    def record(self, i: int) -> Record:
        """The Record of the i-th variable.

        Raises:
          CorruptCheckpointError: the manifest's entries for it are damaged.
        """
        c = self.columns
        try:
            file_offset = self._file_offsets[i] if self._file_offsets is not None else None
            return Record(self.names[i], tuple(c["shape"][i]), c["dtype"][i], c["nbytes"][i],
                          c["trainable"][i], self._sets[c["collections"][i]], self._devices[c["device"][i]],
                          c["path"][i], c["offset"][i], c["checksum"][i], file_offset)
        except (ValueError, KeyError, TypeError, IndexError) as err:
            raise CorruptCheckpointError(
                f"the manifest of '{self.where}' is damaged at variable #{i}: {err}") from err

    def check(self) -> None:
        """Checks every column's types and ranges at once (C-speed passes, no per-variable Python).

        Afterwards the "shape" column holds tuples, one shared tuple per
        distinct shape (50,000 variables of one shape hold one tuple, not
        50,000 lists for the garbage collector to walk), which `record`,
        `VariableInfo` and the packed views hand out as they are.

        Raises:
          ValueError: describing the first bad column.
        """
        c = self.columns

        def types(column: Iterable[Any]) -> set[type]:
            return set(map(type, column))

        shapes = c["shape"]
        if not types(shapes) <= {list} or not types(itertools.chain.from_iterable(shapes)) <= {int}:
            raise ValueError("a shape is not a list of ints")
        # Every dimension is an int now, so equal tuples are the same shape (64 == 64.0 cannot merge).
        distinct: dict[tuple[int, ...], tuple[int, ...]] = {}
        tuples = list(map(tuple, shapes))
        shared = list(map(distinct.setdefault, tuples, tuples))
        if min(itertools.chain.from_iterable(distinct), default=0) < 0:
            raise ValueError("a shape has a negative dimension")
        if not types(c["dtype"]) <= {str} or not types(c["trainable"]) <= {bool, type(None)}:
            raise ValueError("a dtype is not a string or a trainable flag not a bool or null")
        for key in ("nbytes", "collections", "device"):
            column = c[key]
            if not types(column) <= {int} or (column and min(column) < 0):
                raise ValueError(f"column {key!r} holds a value that is not a non-negative int")
        for key in ("offset", "checksum", "file_offset"):
            column = c.get(key)
            if column is None:
                continue
            present = [v for v in column if v is not None]
            if not types(present) <= {int} or (present and min(present) < 0):
                raise ValueError(f"column {key!r} holds a value that is not a non-negative int or null")
        self._check_nbytes(shared)
        paths, offsets = c["path"], c["offset"]
        if not types(paths) <= {str, type(None)}:
            raise ValueError("a path is not a string or null")
        validate_names([path for path in paths if path is not None])  # no "..", no leading "/": stays inside
        # exactly one of path and offset per variable: no row has both null (a str is never an int, so
        # `path is offset` only for two nulls) and the nulls of both columns add up to one per row
        if (paths.count(None) + offsets.count(None) != len(paths)
                or any(map(operator.is_, paths, offsets))):
            raise ValueError("each variable needs exactly one of path and offset")
        check_disjoint(self.names, offsets, c["nbytes"], "the packed blob")
        if self._file_offsets is not None:
            check_disjoint(self.names, self._file_offsets, c["nbytes"], "the file")
        if c["collections"] and max(c["collections"]) >= len(self._sets):
            raise ValueError("a collections index is out of range")
        if c["device"] and max(c["device"]) >= len(self._devices):
            raise ValueError("a device index is out of range")
        c["shape"] = shared

    def _check_nbytes(self, shapes: list[tuple[int, ...]]) -> None:
        """Checks nbytes == prod(shape) x itemsize for every variable (C-level map passes, exact ints).

        Raises:
          ValueError: naming the first variable with an unknown dtype or a wrong byte count.
        """
        c = self.columns
        itemsizes: dict[str, int] = {}
        for name in set(c["dtype"]):
            try:
                itemsizes[name] = _logical(name).itemsize
            except UnsupportedDtypeError as err:
                raise ValueError(f"variable {self.names[c['dtype'].index(name)]!r} has an unknown dtype "
                                 f"{name!r}") from err
        sizes = {shape: math.prod(shape) for shape in set(shapes)}  # the distinct shapes only
        expected = list(map(operator.mul, map(sizes.__getitem__, shapes), map(itemsizes.__getitem__, c["dtype"])))
        if expected != c["nbytes"]:
            i = next(i for i, (e, n) in enumerate(zip(expected, c["nbytes"])) if e != n)
            raise ValueError(f"variable {self.names[i]!r} has nbytes {c['nbytes'][i]}, but its shape "
                             f"{list(shapes[i])} and dtype {c['dtype'][i]} make {expected[i]}")


def decode_manifest_columns(data: bytes, where: str) -> tuple[dict[str, Any], ManifestColumns]:
    """Parses manifest bytes into (header, columns) without building a Record per variable.

    Raises:
      CorruptCheckpointError: not JSON, a newer major version, or inconsistent columns.
    """
    with paused_gc():  # nothing here makes cycles; see _batch.py (50,000 shape lists cost a full collection)
        return _decode_columns(data, where)


def _decode_columns(data: bytes, where: str) -> tuple[dict[str, Any], ManifestColumns]:
    """decode_manifest_columns without the pause."""
    try:
        document = load_json(data, f"the manifest of '{where}'")
        version = str(document["format_version"])
        if version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
            raise CorruptCheckpointError(
                f"'{where}' has checkpoint format version {version}; this varstore reads {FORMAT_VERSION}")
        columns = document.pop("variables")
        sets = [tuple(str(n) for n in c) for c in document.get("collection_sets", [])]
        devices = list(document.get("devices", []))
        count = len(columns["name"])
        if not set(map(type, columns["name"])) <= {str}:
            raise ValueError("a variable name is not a string")
        keys = _COLUMNS + (("file_offset",) if "file_offset" in columns else ())
        if any(not isinstance(columns[key], list) or len(columns[key]) != count for key in keys):
            raise ValueError("manifest columns have different lengths")
        decoded = ManifestColumns(columns, sets, devices, where)
        decoded.check()
        packed = document.get("packed") or {}
        if (packed.get("path") not in (None, PACKED_PATH) or type(packed.get("nbytes", 0)) is not int
                or packed.get("nbytes", 0) < 0
                or packed.get("path") is None
                and any(o is not None and n for o, n in zip(columns["offset"], columns["nbytes"]))):
            raise ValueError(f"the packed header {packed!r} is not {{'path': {PACKED_PATH!r} or null, 'nbytes': int}}")
    except (CorruptCheckpointError, UnsafeCheckpointError):
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        raise CorruptCheckpointError(f"the manifest of '{where}' is damaged: {err}") from err
    return document, decoded


def decode_manifest(data: bytes, where: str) -> tuple[dict[str, Any], list[Record]]:
    """Parses manifest bytes into (header, records), one Record per variable.

    Raises:
      CorruptCheckpointError: not JSON, a newer major version, or inconsistent columns.
    """
    document, columns = decode_manifest_columns(data, where)
    return document, [columns.record(i) for i in range(len(columns))]


def validate_names(names: list[Any]) -> None:
    """Checks many names at once (the rules of `validate_name`) and that they are unique.

    One pass over the joined names handles the common all-valid case; the
    first bad name found by the per-name check is reported otherwise.

    Raises:
      InvalidNameError: naming the first invalid or repeated name.
    """
    if all(type(name) is str for name in names):
        joined = "/".join(names)
        framed = "\n/" + "/\n/".join(names) + "/\n"
        if (joined.isprintable() and "//" not in framed and "/./" not in framed
                and "/../" not in framed and len(set(names)) == len(names)):
            return
    seen: set[str] = set()
    for name in names:
        validate_name(name)
        if name in seen:
            raise InvalidNameError(f"variable name '{name}' appears twice in one checkpoint")
        seen.add(name)


def check_dtype_name(name: str, dtype: Any) -> np.dtype:
    """The NumPy dtype of a value about to be saved; object/void dtypes refused naming the variable.

    Raises:
      UnsupportedDtypeError: naming the variable.
    """
    try:
        return _dtypes.as_dtype(dtype)
    except UnsupportedDtypeError as err:
        raise UnsupportedDtypeError(f"cannot save variable '{name}': {err}") from err


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-ordered array of `shape` (zero extents count as 1, so views stay valid)."""
    strides = []
    step = itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))

"""The manifest: what a varstore checkpoint records about itself and each variable.

Defines the name rules, where each variable is stored (its own array at its
full name, an alias path, or a slice of the packed blob), how logical dtypes
map to stored dtypes and shapes, and the JSON document (format version 1)
kept at "_varstore/manifest". docs/checkpoint-format.md is the prose version
of this module. No file I/O here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import unicodedata
from typing import Any

import numpy as np

from varstore import dtypes as _dtypes
from varstore.errors import CorruptCheckpointError, InvalidNameError, UnsupportedDtypeError

__all__ = [
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
    "format_checksum",
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


@dataclasses.dataclass
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
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    trainable: bool = True
    collections: tuple[str, ...] = ()
    device: str | None = None
    path: str | None = None
    offset: int | None = None
    checksum: int | None = None

    @property
    def numpy_dtype(self) -> np.dtype:
        """The logical NumPy dtype (native byte order; varstore runs on little-endian hosts)."""
        return _logical(self.dtype)


@functools.lru_cache(maxsize=None)
def _logical(name: str) -> np.dtype:
    return _dtypes.as_dtype(name)


def validate_name(name: Any) -> str:
    """Returns `name` if it is a valid variable name.

    Valid: a non-empty str of "/"-separated parts, none empty, "." or "..",
    no leading or trailing "/", no control characters (Unicode category Cc,
    NUL included). Other Unicode is kept as is.

    Raises:
      InvalidNameError: naming the offending name and the rule.
    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"variable name {name!r} is not a non-empty string")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidNameError(f"variable name {name!r} has a leading or trailing '/'")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise InvalidNameError(
                f"variable name {name!r} has an empty, '.' or '..' part; use names like 'scope/var'")
    if not name.isprintable():
        for char in name:
            if unicodedata.category(char) == "Cc":
                raise InvalidNameError(
                    f"variable name {name!r} contains the control character {char!r}")
    return name


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
    storage = _dtypes.storage_dtype(dtype)
    return (storage.newbyteorder("<") if storage.itemsize > 1 else storage), tuple(shape)


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
    for record in records:
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


def encode_manifest(header: dict[str, Any], records: list[Record], packed_nbytes: int) -> bytes:
    """The manifest document as UTF-8 JSON bytes (columnar, so 50,000 variables stay small)."""
    collection_sets: dict[tuple[str, ...], int] = {}
    devices: dict[str | None, int] = {}
    document = dict(header)
    document["packed"] = {"path": PACKED_PATH if packed_nbytes else None, "nbytes": packed_nbytes,
                          "alignment": PACK_ALIGNMENT}
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
    document["collection_sets"] = [list(c) for c in collection_sets]
    document["devices"] = list(devices)
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def decode_manifest(data: bytes, where: str) -> tuple[dict[str, Any], list[Record]]:
    """Parses manifest bytes into (header, records).

    Raises:
      CorruptCheckpointError: not JSON, a newer major version, or inconsistent columns.
    """
    try:
        document = json.loads(data)
        version = str(document["format_version"])
        if version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
            raise CorruptCheckpointError(
                f"'{where}' has checkpoint format version {version}; this varstore reads {FORMAT_VERSION}")
        columns = document.pop("variables")
        sets = [tuple(c) for c in document.get("collection_sets", [])]
        devices = list(document.get("devices", []))
        names = columns["name"]
        count = len(names)
        if any(len(columns[key]) != count for key in
               ("shape", "dtype", "nbytes", "path", "offset", "checksum", "trainable",
                "collections", "device")):
            raise ValueError("manifest columns have different lengths")
        records = [
            Record(name, tuple(shape), dtype, nbytes, bool(trainable), sets[cset], devices[dev],
                   path, offset, checksum)
            for name, shape, dtype, nbytes, path, offset, checksum, trainable, cset, dev in zip(
                names, columns["shape"], columns["dtype"], columns["nbytes"], columns["path"],
                columns["offset"], columns["checksum"], columns["trainable"],
                columns["collections"], columns["device"])
        ]
    except CorruptCheckpointError:
        raise
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise CorruptCheckpointError(f"the manifest of '{where}' is damaged: {err}") from err
    return document, records


def check_dtype_name(name: str, dtype: Any) -> np.dtype:
    """The NumPy dtype of a value about to be saved; object/void dtypes refused naming the variable.

    Raises:
      UnsupportedDtypeError: naming the variable.
    """
    try:
        return _dtypes.as_dtype(dtype)
    except UnsupportedDtypeError as err:
        raise UnsupportedDtypeError(f"cannot save variable '{name}': {err}") from err

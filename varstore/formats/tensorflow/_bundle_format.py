"""TensorFlow's tensor bundle, byte level: the protobuf messages of the .index table, slice keys, string tensors in .data shards.

Decodes what the `.index` table (read by _leveldb_table.py) holds: the
protobuf messages (BundleHeaderProto, BundleEntryProto, TensorShapeProto,
TensorSliceProto) with a hand-written wire-format decoder, TF's OrderedCode
slice keys, and TF's on-disk layout of string tensors. Formats as written by
tensorflow/core/util/tensor_bundle/tensor_bundle.cc.

Every length and offset is checked against the bytes actually present, so
hostile input raises CorruptCheckpointError (or UnsupportedFormatError),
never IndexError, struct.error or MemoryError. Knows nothing about
CheckpointReader, variables or names; tf_checkpoint.py builds on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# The table layer's names are re-exported: tf_checkpoint.py and the tests read a bundle through this one module.
from varstore.formats.tensorflow._leveldb_table import (
    FOOTER_SIZE,
    TABLE_MAGIC,
    crc32c,
    mask_crc,
    read_table,
    signed64,
    unmask_crc,
    varint,
)
from varstore.errors import ChecksumError, CorruptCheckpointError

__all__ = [
    "TABLE_MAGIC",
    "FOOTER_SIZE",
    "crc32c",
    "mask_crc",
    "unmask_crc",
    "BundleHeader",
    "BundleEntry",
    "read_table",
    "parse_message",
    "parse_header",
    "parse_entry",
    "tf_dtype",
    "encode_tensor_name_slice",
    "is_slice_key",
    "decode_string_tensor",
    "longest_string",
    "lengths_size",
    "data_filename",
]

_MAX_DIMS = 64  # NumPy's limit (TF allows 254)
#: Largest product of a shape's non-zero extents (elements); 16-byte items must stay below 2**63 bytes.
_MAX_SPAN = 1 << 59

#: TF DataType enum -> (TF name, logical dtype name or None when only listed as skipped).
_TF_DTYPES: dict[int, tuple[str, str | None]] = {
    1: ("DT_FLOAT", "float32"),
    2: ("DT_DOUBLE", "float64"),
    3: ("DT_INT32", "int32"),
    4: ("DT_UINT8", "uint8"),
    5: ("DT_INT16", "int16"),
    6: ("DT_INT8", "int8"),
    7: ("DT_STRING", "string"),
    8: ("DT_COMPLEX64", "complex64"),
    9: ("DT_INT64", "int64"),
    10: ("DT_BOOL", "bool"),
    11: ("DT_QINT8", None),
    12: ("DT_QUINT8", None),
    13: ("DT_QINT32", None),
    14: ("DT_BFLOAT16", "bfloat16"),
    15: ("DT_QINT16", None),
    16: ("DT_QUINT16", None),
    17: ("DT_UINT16", "uint16"),
    18: ("DT_COMPLEX128", "complex128"),
    19: ("DT_HALF", "float16"),
    20: ("DT_RESOURCE", None),
    21: ("DT_VARIANT", None),
    22: ("DT_UINT32", "uint32"),
    23: ("DT_UINT64", "uint64"),
    24: ("DT_FLOAT8_E5M2", "float8_e5m2"),
    25: ("DT_FLOAT8_E4M3FN", "float8_e4m3fn"),
}


# ------------------------------------------------------- protobuf decoding
_Fields = dict[int, list[Any]]


def _parse_message(buf: bytes, what: str) -> _Fields:
    """Decodes protobuf wire format into {field number: [values]}.

    Varint and fixed fields give ints, length-delimited fields give bytes.
    Groups (wire types 3/4) and unknown wire types are corrupt here.
    """
    fields: _Fields = {}
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = varint(buf, pos, end, what)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise CorruptCheckpointError(f"{what}: protobuf field number 0")
        if wire == 0:
            value, pos = varint(buf, pos, end, what)
        elif wire == 1:
            if pos + 8 > end:
                raise CorruptCheckpointError(f"{what}: truncated fixed64 field {number}")
            value = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = varint(buf, pos, end, what)
            if length > end - pos:
                raise CorruptCheckpointError(
                    f"{what}: field {number} claims {length} bytes, only {end - pos} left")
            value = bytes(buf[pos:pos + length])
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise CorruptCheckpointError(f"{what}: truncated fixed32 field {number}")
            value = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise CorruptCheckpointError(f"{what}: unsupported protobuf wire type {wire} (field {number})")
        fields.setdefault(number, []).append(value)
    return fields


#: The protobuf decoder, for the other hand-read TF messages (_meta_graph.py).
parse_message = _parse_message


def _last_int(fields: _Fields, number: int, what: str, default: int = 0) -> int:
    values = fields.get(number)
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, int):
        raise CorruptCheckpointError(f"{what}: field {number} should be a number")
    return value


def _messages(fields: _Fields, number: int, what: str) -> list[bytes]:
    values = fields.get(number, [])
    if not all(isinstance(v, bytes) for v in values):
        raise CorruptCheckpointError(f"{what}: field {number} should be a message")
    return values


# -------------------------------------------------------- bundle messages
@dataclasses.dataclass(frozen=True)
class BundleHeader:
    """BundleHeaderProto: number of data shards, byte order, format version."""

    num_shards: int
    big_endian: bool
    producer: int
    min_consumer: int


@dataclasses.dataclass(frozen=True)
class BundleEntry:
    """BundleEntryProto: where one tensor (or one slice of it) lives.

    Attributes:
      dtype: TF DataType enum value (reference types folded to their base type).
      shape: dimension sizes.
      shard_id, offset, size: data shard number, byte offset and byte count.
      crc32c: the masked crc32c of the stored bytes.
      slices: for a partitioned variable, one tuple of (start, length) per
        slice; length -1 means the whole dimension. Empty otherwise.
    """

    dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    slices: tuple[tuple[tuple[int, int], ...], ...]


def parse_header(value: bytes, label: str) -> BundleHeader:
    """Decodes the "" entry (BundleHeaderProto)."""
    what = f"{label}: bundle header"
    fields = _parse_message(value, what)
    num_shards = signed64(_last_int(fields, 1, what))
    endianness = _last_int(fields, 2, what)
    producer = min_consumer = 0
    versions = _messages(fields, 3, what)
    if versions:
        vfields = _parse_message(versions[-1], what)
        producer = signed64(_last_int(vfields, 1, what))
        min_consumer = signed64(_last_int(vfields, 2, what))
    if num_shards < 1 or num_shards > 99999:
        raise CorruptCheckpointError(f"{what}: invalid number of data shards {num_shards}")
    if endianness not in (0, 1):
        raise CorruptCheckpointError(f"{what}: invalid endianness {endianness}")
    return BundleHeader(num_shards, endianness == 1, producer, min_consumer)


def _parse_shape(buf: bytes, what: str) -> tuple[int, ...]:
    fields = _parse_message(buf, what)
    if _last_int(fields, 3, what):
        raise CorruptCheckpointError(f"{what}: shape has unknown rank")
    dims = []
    for dim in _messages(fields, 2, what):
        size = signed64(_last_int(_parse_message(dim, what), 1, what))
        if size < 0:
            raise CorruptCheckpointError(f"{what}: shape has an unknown or negative dimension ({size})")
        dims.append(size)
    if len(dims) > _MAX_DIMS:
        raise CorruptCheckpointError(f"{what}: shape has {len(dims)} dimensions (at most {_MAX_DIMS})")
    span = 1
    for size in dims:  # NumPy refuses shapes whose non-zero extents multiply past 2**63, even when empty
        span *= max(size, 1)
    if span > _MAX_SPAN:
        raise CorruptCheckpointError(f"{what}: shape {tuple(dims)} is larger than any array can be")
    return tuple(dims)


def _parse_slice(buf: bytes, what: str) -> tuple[tuple[int, int], ...]:
    extents = []
    for extent in _messages(_parse_message(buf, what), 1, what):
        efields = _parse_message(extent, what)
        start = signed64(_last_int(efields, 1, what))
        length = signed64(_last_int(efields, 2, what, default=-1)) if 2 in efields else -1
        if start < 0 or length < -1:
            raise CorruptCheckpointError(f"{what}: invalid slice extent start={start} length={length}")
        extents.append((start, length))
    return tuple(extents)


def parse_entry(key: bytes, value: bytes, label: str) -> BundleEntry:
    """Decodes one BundleEntryProto; raises CorruptCheckpointError naming the key."""
    what = f"{label}: entry {key.decode('utf-8', 'replace')!r}"
    fields = _parse_message(value, what)
    dtype = _last_int(fields, 1, what)
    if dtype > 100:  # DT_*_REF
        dtype -= 100
    shapes = _messages(fields, 2, what)
    shape = _parse_shape(shapes[-1], what) if shapes else ()
    shard_id = signed64(_last_int(fields, 3, what))
    offset = signed64(_last_int(fields, 4, what))
    size = signed64(_last_int(fields, 5, what))
    crc = _last_int(fields, 6, what) & 0xFFFFFFFF
    slices = tuple(_parse_slice(s, what) for s in _messages(fields, 7, what))
    if shard_id < 0 or offset < 0 or size < 0:
        raise CorruptCheckpointError(
            f"{what}: negative shard id, offset or size ({shard_id}, {offset}, {size})")
    for extents in slices:
        if len(extents) != len(shape):
            raise CorruptCheckpointError(
                f"{what}: a slice has {len(extents)} dimensions, the tensor has {len(shape)}")
        for (start, length), dim in zip(extents, shape):
            if length == -1 and start != 0 or length >= 0 and start + length > dim:
                raise CorruptCheckpointError(
                    f"{what}: slice extent start={start} length={length} outside dimension {dim}")
    return BundleEntry(dtype, shape, shard_id, offset, size, crc, slices)


def tf_dtype(enum: int) -> tuple[str, str | None]:
    """(TF DataType name, logical dtype name) for an enum; the name is None when unsupported.

    The logical name is "string" for DT_STRING (read as "S<n>").
    """
    return _TF_DTYPES.get(enum, (f"DataType({enum})", None))


# ------------------------------------------------------------ OrderedCode
def _write_num_increasing(value: int) -> bytes:
    payload = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(payload)]) + payload


def _write_string(value: bytes) -> bytes:
    return _escape(value) + b"\x00\x01"


def _escape(value: bytes) -> bytes:
    out = bytearray()
    for byte in value:
        if byte == 0:
            out += b"\x00\xff"
        elif byte == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(byte)
    return bytes(out)


_LENGTH_TO_HEADER = [(0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0),
                     (0xFC, 0), (0xFE, 0), (0xFF, 0), (0xFF, 0x80), (0xFF, 0xC0)]


def _write_signed_num_increasing(value: int) -> bytes:
    x = ~value if value < 0 else value
    if x < 64:
        return bytes([(0x80 ^ value) & 0xFF])
    length = x.bit_length() // 7 + 1  # kBitsToLength in ordered_code.cc
    raw = bytearray((value & ((1 << 80) - 1)).to_bytes(10, "big")[10 - length:])
    raw[0] ^= _LENGTH_TO_HEADER[length][0]
    raw[1] ^= _LENGTH_TO_HEADER[length][1]
    return bytes(raw)


def encode_tensor_name_slice(name: bytes, extents: tuple[tuple[int, int], ...]) -> bytes:
    """The table key of one stored slice, as checkpoint::EncodeTensorNameSlice.

    Args:
      name: the full tensor's key.
      extents: (start, length) per dimension; length -1 for a whole dimension.
    """
    out = _write_num_increasing(0) + _write_string(name) + _write_num_increasing(len(extents))
    for start, length in extents:
        out += _write_signed_num_increasing(start) + _write_signed_num_increasing(length)
    return out


def is_slice_key(key: bytes) -> bool:
    """True for the keys of slice entries (they start with OrderedCode's 0, a NUL byte)."""
    return key[:1] == b"\x00"


# ------------------------------------------------------------ data layout
def data_filename(prefix: str, shard_id: int, num_shards: int) -> str:
    """`<prefix>.data-00000-of-00001`, as tensor_bundle's DataFilename."""
    return f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}"


def _string_lengths(raw: bytes, count: int, what: str) -> tuple[Any, int]:
    """The first `count` varint64s of `raw` as a uint64 array, and where they end; vectorized (linear time).

    Same values as `varint` (bits past 64 dropped); a varint longer than 10
    bytes, or fewer than `count` of them, is corrupt.
    """
    buf = np.frombuffer(raw, dtype=np.uint8)
    if count <= len(buf) and int(buf[:count].max(initial=0)) < 0x80:  # every length one byte (under 128)
        return buf[:count].astype(np.uint64), count
    ends = np.flatnonzero(buf < 0x80)[:count]  # the last byte of each varint has its high bit clear
    if len(ends) < count:
        raise CorruptCheckpointError(f"{what}: truncated varint (the string lengths run past the stored bytes)")
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    sizes = ends - starts + 1
    if int(sizes.max()) > 10:
        raise CorruptCheckpointError(f"{what}: varint longer than 10 bytes")
    stop = int(ends[-1]) + 1
    shifts = (np.arange(stop, dtype=np.int64) - np.repeat(starts, sizes)) * 7
    parts = (buf[:stop] & 0x7F).astype(np.uint64) << shifts.astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts), stop


def decode_string_tensor(raw: bytes, count: int, what: str) -> tuple[list[bytes], int]:
    """Decodes a DT_STRING tensor's stored bytes; returns (elements, crc32c of the bytes).

    Layout (tensor_bundle.cc WriteStringTensor): `count` varint64 lengths, a
    4-byte masked crc32c of the lengths (each hashed as a little-endian
    uint32, or uint64 when above 2**32-1), then the string bytes back to back.
    The returned crc covers the hashed lengths, the 4 checksum bytes and the
    string bytes, to compare with the entry's crc32c. Linear time, the lengths
    decoded and hashed with NumPy (a million strings take well under a second).
    Builds `count` bytes objects: callers bound `count` first (VARSTORE_MAX_OBJECTS).

    Raises:
      CorruptCheckpointError: lengths run past `raw`.
      ChecksumError: the lengths' checksum does not match.
    """
    lengths, pos, crc = _checked_lengths(raw, count, what)
    bounds = np.empty(count + 1, dtype=np.int64)
    bounds[0] = pos
    np.cumsum(lengths.astype(np.int64), out=bounds[1:])
    bounds[1:] += pos
    cuts = bounds.tolist()
    elements = [raw[cuts[i]:cuts[i + 1]] for i in range(count)]
    crc = crc32c(raw[pos:], crc)
    return elements, crc


def longest_string(head: bytes, count: int, stored: int, what: str) -> int:
    """The length in bytes of the longest of a DT_STRING tensor's `count` elements, building no Python objects.

    Args:
      head: the first min(stored, lengths_size(count)) of the tensor's stored bytes (the lengths and
        their checksum; the string bytes are not needed).
      count: elements.
      stored: bytes the file stores for the tensor (the lengths must add up to it).
      what: names the variable and file in errors.

    Raises:
      CorruptCheckpointError, ChecksumError: as decode_string_tensor.
    """
    lengths, _, _ = _checked_lengths(head, count, what, stored)
    return int(lengths.max(initial=0))


def lengths_size(count: int) -> int:
    """The most bytes `count` varint64 lengths and their 4-byte checksum take (10 bytes a varint)."""
    return count * 10 + 4


def _checked_lengths(raw: bytes, count: int, what: str, size: int | None = None) -> tuple[Any, int, int]:
    """(lengths as uint64, where the string bytes start, crc32c up to there) of a DT_STRING tensor, checked.

    `raw` is the tensor's stored bytes, or (with `size`, their number) a head of them holding the lengths.
    """
    end = len(raw) if size is None else size
    if count > end:  # every element needs at least one length byte
        raise CorruptCheckpointError(f"{what}: {count} strings cannot fit in {end} bytes")
    if count == 0:
        lengths, pos = np.zeros(0, dtype=np.uint64), 0
    else:
        lengths, pos = _string_lengths(raw, count, what)
    wide = lengths > 0xFFFFFFFF
    as_bytes = lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
    keep = np.ones(as_bytes.shape, dtype=bool)
    keep[~wide, 4:] = False  # each length hashed as uint32, or uint64 when it does not fit
    crc = crc32c(as_bytes[keep].tobytes())
    if pos + 4 > min(end, len(raw)):
        raise CorruptCheckpointError(f"{what}: string lengths run past the stored bytes")
    stored = raw[pos:pos + 4]
    if unmask_crc(int.from_bytes(stored, "little")) != crc:
        raise ChecksumError(f"{what}: the checksum of the string lengths does not match")
    crc = crc32c(stored, crc)
    pos += 4
    if bool(np.any(lengths > end)) or int(lengths.sum(dtype=np.uint64)) != end - pos:
        total = sum(int(n) for n in lengths) if bool(np.any(lengths > end)) else int(lengths.sum(dtype=np.uint64))
        raise CorruptCheckpointError(
            f"{what}: string lengths add up to {total} bytes, {end - pos} are stored")
    return lengths, pos, crc

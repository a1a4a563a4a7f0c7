"""A tiny TensorFlow tensor-bundle writer for tests (TensorFlow is not installed).

Writes what tensorflow/core/util/tensor_bundle/tensor_bundle.cc writes: a
LevelDB-format `.index` table (prefix-compressed blocks with restart points,
masked crc32c trailers, index block, footer with magic) holding the
BundleHeaderProto and one BundleEntryProto per tensor, and `.data-*` shards
with the raw bytes (strings as varint lengths + masked crc + bytes).
Partitioned variables get a full entry with TensorSliceProtos and one entry
per slice under its OrderedCode key. Independent of the reader except for
the OrderedCode slice-key encoder, which the reader test checks by ordering.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c as _crc32c
import numpy as np

from varstore.formats.tensorflow._bundle_format import encode_tensor_name_slice

DTYPE_ENUMS = {
    "float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "complex64": 8,
    "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "complex128": 18, "float16": 19,
    "uint32": 22, "uint64": 23, "float8_e5m2": 24, "float8_e4m3fn": 25,
}
MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)


def crc(data: bytes, value: int = 0) -> int:
    return _crc32c.crc32c(data, value) & 0xFFFFFFFF


def mask(value: int) -> int:
    return (((value >> 15) | (value << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def f_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def f_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def f_fixed32(number: int, value: int) -> bytes:
    return varint(number << 3 | 5) + struct.pack("<I", value)


def shape_proto(shape: tuple[int, ...]) -> bytes:
    return b"".join(f_bytes(2, f_varint(1, d)) for d in shape)


def slice_proto(extents: tuple[tuple[int, int], ...]) -> bytes:
    out = b""
    for start, length in extents:
        extent = (f_varint(1, start) if start else b"") + (f_varint(2, length) if length >= 0 else b"")
        out += f_bytes(1, extent)
    return out


def entry_proto(dtype: int, shape: tuple[int, ...], shard: int = 0, offset: int = 0, size: int = 0,
                crc32c: int | None = None, slices: tuple = ()) -> bytes:
    out = f_varint(1, dtype) + f_bytes(2, shape_proto(shape))
    if shard:
        out += f_varint(3, shard)
    if offset:
        out += f_varint(4, offset)
    if size:
        out += f_varint(5, size)
    if crc32c is not None:
        out += f_fixed32(6, crc32c)
    for extents in slices:
        out += f_bytes(7, slice_proto(extents))
    return out


def header_proto(num_shards: int, big_endian: bool = False) -> bytes:
    return f_varint(1, num_shards) + (f_varint(2, 1) if big_endian else b"") + f_bytes(3, f_varint(1, 1))


def block(pairs: list[tuple[bytes, bytes]], restart_interval: int = 4) -> bytes:
    out = bytearray()
    restarts = []
    previous = b""
    for i, (key, value) in enumerate(pairs):
        if i % restart_interval == 0:
            restarts.append(len(out))
            shared = 0
        else:
            shared = 0
            while shared < min(len(key), len(previous)) and key[shared] == previous[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    if not restarts:
        restarts = [0]
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _emit(buf: bytearray, contents: bytes, kind: int = 0) -> bytes:
    handle = varint(len(buf)) + varint(len(contents))
    buf += contents + bytes([kind]) + struct.pack("<I", mask(crc(contents + bytes([kind]))))
    return handle


def table(pairs: list[tuple[bytes, bytes]], entries_per_block: int = 1000, kind: int = 0) -> bytes:
    """A LevelDB table of sorted (key, value) pairs, several data blocks when entries_per_block is small."""
    pairs = sorted(pairs)
    buf = bytearray()
    index = []
    for start in range(0, len(pairs), entries_per_block):
        chunk = pairs[start:start + entries_per_block]
        handle = _emit(buf, block(chunk), kind)
        index.append((chunk[-1][0], handle))
    meta_handle = _emit(buf, block([]))
    index_handle = _emit(buf, block(index, restart_interval=1))
    footer = meta_handle + index_handle
    buf += footer + b"\x00" * (40 - len(footer)) + MAGIC
    return bytes(buf)


def string_bytes(elements: list[bytes]) -> tuple[bytes, int]:
    """TF's string tensor layout and the entry crc32c (unmasked)."""
    lengths = b"".join(varint(len(e)) for e in elements)
    value = 0
    for e in elements:
        value = crc(struct.pack("<I", len(e)), value)
    length_crc = struct.pack("<I", mask(value))
    value = crc(length_crc, value)
    payload = b"".join(elements)
    value = crc(payload, value)
    return lengths + length_crc + payload, value


class BundleWriter:
    """Collects tensors, then writes `<prefix>.index` and its data shards."""

    def __init__(self, prefix: Path | str, num_shards: int = 1, big_endian: bool = False) -> None:
        self.prefix = str(prefix)
        self.num_shards = num_shards
        self.big_endian = big_endian
        self.shards = [bytearray() for _ in range(num_shards)]
        self.pairs: list[tuple[bytes, bytes]] = []

    def _store(self, value: np.ndarray | list[bytes], shard: int) -> tuple[int, int, int]:
        if isinstance(value, list):
            raw, value_crc = string_bytes(value)
        else:
            array = np.asarray(value, order="C")
            if self.big_endian and array.dtype.itemsize > 1 and array.dtype.kind != "b":
                width = array.dtype.itemsize // 2 if array.dtype.kind == "c" else array.dtype.itemsize
                raw = array.reshape(-1).view(f"<u{width}").astype(f">u{width}").tobytes()
            else:
                raw = array.tobytes()
            value_crc = crc(raw)
        data = self.shards[shard]
        offset = len(data)
        data += raw
        return offset, len(raw), value_crc

    def add(self, key: str, value: np.ndarray | list[bytes], *, shard: int = 0,
            shape: tuple[int, ...] | None = None, dtype: int | None = None) -> None:
        """Adds a tensor; `value` a NumPy array, or a list of bytes (DT_STRING, give `shape`)."""
        if isinstance(value, list):
            dtype, shape = 7, shape if shape is not None else (len(value),)
        else:
            dtype = dtype or DTYPE_ENUMS[np.asarray(value).dtype.name]
            shape = tuple(np.asarray(value).shape)
        offset, size, value_crc = self._store(value, shard)
        self.pairs.append((key.encode(), entry_proto(dtype, shape, shard, offset, size, mask(value_crc))))

    def add_partitioned(self, key: str, full: np.ndarray, slices: list[tuple[tuple[int, int], ...]],
                        shards: list[int] | None = None) -> None:
        """Adds a partitioned variable: one full entry with `slices`, one stored entry per slice."""
        dtype = DTYPE_ENUMS[full.dtype.name]
        for i, extents in enumerate(slices):
            region = tuple(slice(0, dim) if length < 0 else slice(start, start + length)
                           for (start, length), dim in zip(extents, full.shape))
            part = np.ascontiguousarray(full[region])
            shard = shards[i] if shards else 0
            offset, size, value_crc = self._store(part, shard)
            self.pairs.append((encode_tensor_name_slice(key.encode(), extents),
                               entry_proto(dtype, part.shape, shard, offset, size, mask(value_crc))))
        self.pairs.append((key.encode(), entry_proto(dtype, full.shape, slices=tuple(slices))))

    def finish(self, entries_per_block: int = 1000, kind: int = 0) -> Path:
        pairs = [(b"", header_proto(self.num_shards, self.big_endian))] + self.pairs
        Path(self.prefix + ".index").write_bytes(table(pairs, entries_per_block, kind))
        for i, data in enumerate(self.shards):
            Path(f"{self.prefix}.data-{i:05d}-of-{self.num_shards:05d}").write_bytes(bytes(data))
        return Path(self.prefix + ".index")

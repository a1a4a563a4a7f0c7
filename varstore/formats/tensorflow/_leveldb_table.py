"""The LevelDB-style table of TensorFlow's `.index` file: footer, block handles, prefix-compressed blocks, masked crc32c.

As written by tensorflow/core/lib/io/table_builder.cc (LevelDB's format,
uncompressed blocks only). `read_table` returns the (key, value) pairs; the
varint and crc32c helpers are shared with the bundle decoder. Every length
and offset is checked against the bytes present, so hostile input raises
CorruptCheckpointError / ChecksumError / UnsupportedFormatError, never
IndexError or MemoryError. Knows nothing about what the values mean
(_bundle_format.py decodes the protobuf messages in them).
"""

from __future__ import annotations

import dataclasses

import crc32c as _crc32c

from varstore.errors import ChecksumError, CorruptCheckpointError, UnsupportedFormatError

__all__ = ["FOOTER_SIZE", "TABLE_MAGIC", "crc32c", "mask_crc", "read_table", "signed64", "unmask_crc", "varint"]

#: Last 8 bytes of every table, little-endian (LevelDB's kTableMagicNumber).
TABLE_MAGIC = 0xDB4775248B80FB57
#: Footer: two BlockHandles (varints, padded to 40 bytes) + 8-byte magic.
FOOTER_SIZE = 48
_BLOCK_TRAILER_SIZE = 5  # 1-byte compression type + 4-byte masked crc32c
_MASK_DELTA = 0xA282EAD8

# ------------------------------------------------------------------ crc32c
def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """crc32c (Castagnoli) of `data`, continuing from `crc` (0 to start)."""
    return _crc32c.crc32c(data, crc) & 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB/TF crc mask: rotate right by 15 bits and add 0xa282ead8 (mod 2**32)."""
    crc &= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc(masked: int) -> int:
    """Inverse of mask_crc."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# ----------------------------------------------------------------- varints
def varint(buf: bytes, pos: int, end: int, what: str, max_bytes: int = 10) -> tuple[int, int]:
    """Decodes an unsigned base-128 varint at buf[pos:end]; returns (value, next position)."""
    result = 0
    shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise CorruptCheckpointError(f"{what}: truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    raise CorruptCheckpointError(f"{what}: varint longer than {max_bytes} bytes")


def signed64(value: int) -> int:
    """An unsigned 64-bit varint value read as two's-complement int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


# ------------------------------------------------------------------- table
@dataclasses.dataclass(frozen=True)
class _BlockHandle:
    offset: int
    size: int


def _block_handle(buf: bytes, pos: int, end: int, what: str) -> tuple[_BlockHandle, int]:
    offset, pos = varint(buf, pos, end, what)
    size, pos = varint(buf, pos, end, what)
    return _BlockHandle(offset, size), pos


def _read_block(data: bytes, handle: _BlockHandle, label: str) -> bytes:
    """Returns a block's contents after checking bounds, compression type and masked crc32c."""
    end = len(data) - FOOTER_SIZE
    if handle.offset > end or handle.size > end - handle.offset - _BLOCK_TRAILER_SIZE:
        raise CorruptCheckpointError(
            f"{label}: block at offset {handle.offset} with {handle.size} bytes lies outside the "
            f"{len(data)}-byte file")
    start, stop = handle.offset, handle.offset + handle.size
    contents = data[start:stop]
    kind = data[stop]
    stored = int.from_bytes(data[stop + 1:stop + 5], "little")
    actual = crc32c(data[start:stop + 1])
    if unmask_crc(stored) != actual:
        raise ChecksumError(
            f"{label}: table block at offset {start} fails its crc32c check (stored "
            f"{unmask_crc(stored):08x}, computed {actual:08x}); the .index file is damaged")
    if kind == 1:
        raise UnsupportedFormatError(
            f"{label}: table block at offset {start} is snappy-compressed; varstore reads only "
            f"uncompressed tables (TensorFlow writes them uncompressed since 1.2). Re-save the "
            f"checkpoint with a recent TensorFlow")
    if kind != 0:
        raise CorruptCheckpointError(f"{label}: unknown block compression type {kind} at offset {start}")
    return contents


def _block_entries(block: bytes, label: str) -> list[tuple[bytes, bytes]]:
    """Decodes one block's prefix-compressed (key, value) entries."""
    size = len(block)
    if size < 4:
        raise CorruptCheckpointError(f"{label}: table block of {size} bytes is too short")
    num_restarts = int.from_bytes(block[size - 4:], "little")
    if num_restarts > (size - 4) // 4:
        raise CorruptCheckpointError(f"{label}: table block claims {num_restarts} restart points")
    limit = size - 4 - 4 * num_restarts
    restarts = [int.from_bytes(block[limit + 4 * i:limit + 4 * i + 4], "little")
                for i in range(num_restarts)]
    if any(r > limit for r in restarts):
        raise CorruptCheckpointError(f"{label}: table block restart point outside the block")
    restart_set = set(restarts)
    entries: list[tuple[bytes, bytes]] = []
    pos = 0
    key = b""
    what = f"{label}: table entry"
    while pos < limit:
        at = pos
        shared, pos = varint(block, pos, limit, what, 5)
        non_shared, pos = varint(block, pos, limit, what, 5)
        value_len, pos = varint(block, pos, limit, what, 5)
        if shared > len(key):
            raise CorruptCheckpointError(f"{what}: shares {shared} bytes with a {len(key)}-byte previous key")
        if at in restart_set and shared:
            raise CorruptCheckpointError(f"{what}: restart point at {at} shares a key prefix")
        if non_shared > limit - pos or value_len > limit - pos - non_shared:
            raise CorruptCheckpointError(f"{what}: key/value run past the end of the block")
        key = key[:shared] + bytes(block[pos:pos + non_shared])
        pos += non_shared
        value = bytes(block[pos:pos + value_len])
        pos += value_len
        entries.append((key, value))
    return entries


def read_table(data: bytes, label: str) -> list[tuple[bytes, bytes]]:
    """All (key, value) pairs of a LevelDB-format table, in key order.

    Args:
      data: the whole `.index` file.
      label: the file name, used in error messages.

    Raises:
      CorruptCheckpointError: bad magic, handles outside the file, malformed
        blocks, or keys out of order.
      ChecksumError: a block's masked crc32c does not match.
      UnsupportedFormatError: a compressed (snappy) block.
    """
    if len(data) < FOOTER_SIZE:
        raise CorruptCheckpointError(
            f"{label}: {len(data)} bytes is too short for a TensorFlow checkpoint index "
            f"(the table footer alone is {FOOTER_SIZE} bytes)")
    footer = data[len(data) - FOOTER_SIZE:]
    if int.from_bytes(footer[40:], "little") != TABLE_MAGIC:
        raise CorruptCheckpointError(
            f"{label}: not a TensorFlow checkpoint index (table magic number missing at the end)")
    _metaindex, pos = _block_handle(footer, 0, 40, f"{label}: footer")
    index_handle, _ = _block_handle(footer, pos, 40, f"{label}: footer")
    index = _read_block(data, index_handle, label)
    pairs: list[tuple[bytes, bytes]] = []
    for _separator, handle_bytes in _block_entries(index, label):
        handle, used = _block_handle(handle_bytes, 0, len(handle_bytes), f"{label}: index entry")
        if used != len(handle_bytes):
            raise CorruptCheckpointError(f"{label}: index entry has trailing bytes after its block handle")
        pairs.extend(_block_entries(_read_block(data, handle, label), label))
    for (a, _), (b, _) in zip(pairs, pairs[1:]):
        if not a < b:
            raise CorruptCheckpointError(f"{label}: table keys are not in strictly increasing order")
    return pairs

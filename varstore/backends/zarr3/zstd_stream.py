"""Bounded decoding of a zstd stream whose frames may declare no content size (Icechunk's metadata files).

numcodecs decodes a frame without a declared size by streaming into a
buffer that grows as far as the data says: a small hostile file could ask
for gigabytes. Here the stream's frames and block headers are walked first
(zstd format, RFC 8878 section 3.1): a raw or RLE block declares its decoded
size, a compressed block decodes to at most 128 KiB (the format's block
maximum); the stream is decoded only when that bound is within `limit`.
The one place outside zarr3's codecs that decodes zstd; never opens a file.
"""

from __future__ import annotations

from varstore.backends.codecs import zstd_frame_header

__all__ = ["decode_bounded", "ZstdStreamError"]

_BLOCK_MAX = 128 << 10


class ZstdStreamError(ValueError):
    """The stream is not zstd, is damaged, or may decode to more than the limit (the caller's message names it)."""


def _upper_bound(data: bytes) -> int:
    """The most bytes the zstd frames in `data` can decode to (skippable frames count 0)."""
    total, at, end = 0, 0, len(data)
    while at < end:
        if end - at < 8:
            raise ZstdStreamError("a truncated zstd frame")
        magic = data[at:at + 4]
        if magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50:  # skippable frame: magic, size, payload
            at += 8 + int.from_bytes(data[at + 4:at + 8], "little")
            continue
        try:
            descriptor, header_bytes, _ = zstd_frame_header(data, at)
        except ValueError as err:
            raise ZstdStreamError(str(err)) from None
        if descriptor & 0x08:
            raise ZstdStreamError("a zstd frame with its reserved bit set")
        at += header_bytes
        while True:
            if at + 3 > end:
                raise ZstdStreamError("a truncated zstd block header")
            header = int.from_bytes(data[at:at + 3], "little")
            last, kind, size = header & 1, (header >> 1) & 3, header >> 3
            if kind == 3:
                raise ZstdStreamError("a reserved zstd block type")
            at += 3 + (1 if kind == 1 else size)  # an RLE block stores one byte
            total += size if kind in (0, 1) else _BLOCK_MAX
            if at > end:
                raise ZstdStreamError("a truncated zstd block")
            if last:
                break
        if descriptor & 0x04:  # content checksum
            at += 4
    if at != end:
        raise ZstdStreamError("a truncated zstd frame")
    return total


def decode_bounded(data: bytes, limit: int) -> bytes:
    """The decoded bytes of the zstd frames `data`, refused unless they can decode to at most `limit` bytes.

    Raises:
      ZstdStreamError: not zstd, damaged, or its blocks may decode to more than `limit` (checked before decoding).
    """
    bound = _upper_bound(data)
    if bound > limit:
        raise ZstdStreamError(f"its blocks may decode to {bound:,} bytes, more than the {limit:,} allowed")
    from numcodecs import zstd

    try:
        decoded = bytes(zstd.decompress(data))
    except RuntimeError as err:
        raise ZstdStreamError(str(err)) from err
    if len(decoded) > bound:  # cannot happen for a valid stream: the bound is the format's
        raise ZstdStreamError(f"it decoded to {len(decoded):,} bytes, more than its blocks allow ({bound:,})")
    return decoded

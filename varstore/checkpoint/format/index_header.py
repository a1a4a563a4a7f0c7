"""The HDF5 index header: a 512-byte user block saying where the manifest's bytes are and their crc32c.

Lets a reader find a varstore HDF5 file's manifest with two small positional
reads and no HDF5 library (see detection.py). Encodes and decodes the block;
`read_index_header` reads it through the caller's read function (no file I/O
of its own). Re-exported by manifest.py, its original home.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["INDEX_HEADER_BYTES", "encode_index_header", "decode_index_header", "read_index_header"]

#: Size of the HDF5 user block that holds the index header (bytes).
INDEX_HEADER_BYTES = 512
_INDEX_MAGIC = b"varstore-index "


def encode_index_header(manifest_offset: int, manifest_nbytes: int, manifest_checksum: int) -> bytes:
    """The HDF5 user block: where the manifest's bytes are, so readers can skip the HDF5 library.

    ASCII: b"varstore-index " + JSON {"manifest_offset", "manifest_nbytes",
    "manifest_crc32c"} + b"\n", padded with NUL bytes to INDEX_HEADER_BYTES.
    """
    body = json.dumps({"manifest_offset": manifest_offset, "manifest_nbytes": manifest_nbytes,
                       "manifest_crc32c": manifest_checksum}, separators=(",", ":")).encode()
    return (_INDEX_MAGIC + body + b"\n").ljust(INDEX_HEADER_BYTES, b"\0")


def decode_index_header(data: bytes) -> tuple[int, int, int] | None:
    """(manifest_offset, manifest_nbytes, manifest_crc32c) from a user block, or None when it has none."""
    if not data.startswith(_INDEX_MAGIC):
        return None
    try:
        body = json.loads(data[len(_INDEX_MAGIC):data.index(b"\n")])
        values = (body["manifest_offset"], body["manifest_nbytes"], body["manifest_crc32c"])
    except (ValueError, KeyError, TypeError):
        return None
    if not all(type(v) is int and v >= 0 for v in values):
        return None
    return values


def read_index_header(read: Callable[[int, int], Any]) -> tuple[int, int, int] | None:
    """decode_index_header of the first INDEX_HEADER_BYTES bytes `read(offset, nbytes)` gives (the caller's
    storage: detection.py passes its read_range), so a reader's open reads, decodes, then reads the manifest
    in order; `read` returns a bytes-like buffer. Whatever `read` raises propagates."""
    return decode_index_header(bytes(read(0, INDEX_HEADER_BYTES)))

"""Compressed Zarr v3 chunks: the codec chain varstore writes for compression="zstd" and its encode/decode.

The chain is standard Zarr v3 (core spec "bytes" codec, then the registered
"blosc" codec with cname "zstd" and bit shuffle over the stored dtype's
size), so plain zarr decodes every chunk. Encoding and decoding go through
numcodecs' Blosc, the library zarr itself uses for that codec. Knows nothing
about checksums (callers check crc32c over the decoded bytes) or variables.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from varstore.errors import CorruptCheckpointError, InvalidMetadataError

__all__ = ["COMPRESSIONS", "compression_codecs", "encode_chunk", "decode_chunk", "is_compressed"]

#: compression= names -> blosc compressor name and level. zstd level 5 with bit shuffle: on MiniLM's
#: weights and Adam moments 0.71x (bfloat16) and 0.86x (float32) of raw, within 10% of zipnn and below
#: Orbax's default, and faster than byte shuffle at level 3 (docs/benchmarks/README.md).
COMPRESSIONS: dict[str, tuple[str, int]] = {"zstd": ("zstd", 5)}


def compression_codecs(compression: str, dtype: np.dtype) -> list[dict[str, Any]]:
    """The Zarr v3 codec chain of a chunk of stored `dtype` compressed with `compression` ("zstd").

    Raises:
      InvalidMetadataError: an unknown compression name (naming the known ones).
    """
    cname, level = _known(compression)
    itemsize = dtype.itemsize
    first: dict[str, Any] = {"name": "bytes"}
    if itemsize > 1 and dtype.kind != "b":
        first["configuration"] = {"endian": "little"}
    return [first, {"name": "blosc", "configuration": {
        "cname": cname, "clevel": level, "shuffle": "bitshuffle" if itemsize > 1 else "noshuffle",
        "typesize": itemsize, "blocksize": 0}}]


def _known(compression: str) -> tuple[str, int]:
    try:
        return COMPRESSIONS[compression]
    except (KeyError, TypeError):
        raise InvalidMetadataError(
            f"unknown compression {compression!r}; known: None (raw), {', '.join(map(repr, COMPRESSIONS))}") from None


def is_compressed(codecs: Any) -> bool:
    """True when a zarr.json's codec list is the chain `compression_codecs` writes (bytes, then blosc)."""
    return (isinstance(codecs, list) and len(codecs) == 2 and isinstance(codecs[1], dict)
            and codecs[1].get("name") == "blosc")


def encode_chunk(value: np.ndarray, compression: str) -> bytes:
    """The stored bytes of one chunk: `value` (C-contiguous, stored dtype, little-endian) through the chain."""
    from numcodecs import Blosc

    cname, level = _known(compression)
    shuffle = Blosc.BITSHUFFLE if value.dtype.itemsize > 1 else Blosc.NOSHUFFLE
    flat = np.ascontiguousarray(value).reshape(-1)
    return bytes(Blosc(cname=cname, clevel=level, shuffle=shuffle).encode(flat))


def decode_chunk(data: bytes, nbytes: int, where: str) -> bytes:
    """The decoded bytes of one compressed chunk, refused unless exactly `nbytes` long.

    Raises:
      CorruptCheckpointError: not a blosc frame, or it decodes to another size (naming `where`).
    """
    from numcodecs import Blosc

    # the blosc header (16 bytes): version, versionlz, flags, typesize, then uint32 LE nbytes, blocksize, cbytes
    declared = int.from_bytes(data[4:8], "little") if len(data) >= 16 else -1
    if len(data) < 16 or int.from_bytes(data[12:16], "little") != len(data):
        raise CorruptCheckpointError(f"{where}: the chunk is not a whole blosc frame ({len(data)} bytes); "
                                     f"restore another step")
    if declared != nbytes:
        raise CorruptCheckpointError(f"{where}: the chunk decodes to {declared} bytes, expected {nbytes}")
    try:
        return bytes(Blosc().decode(data))
    except Exception as err:  # noqa: BLE001
        raise CorruptCheckpointError(f"{where}: the chunk does not decode ({err})") from err

"""Foreign chunk codecs: the allow-list of Zarr v2/v3 and HDF5 codecs, and decoders bounded by the chunk's size.

A codec config read from a file (a `.zarray` compressor or filter, a
`zarr.json` codec, an HDF5 filter id) is checked here against an allow-list
of compression and byte filters before any library sees it: pickle,
msgpack, vlen-*, json, object and unknown ids are UnsafeCheckpointError
whatever numcodecs allows (NUMCODECS_ALLOW_UNSAFE_PICKLE_DECODE included).
Compressed chunk bytes are decoded with streaming decoders given a
`max_length` (zlib/gzip, bz2, lzma), never a whole-stream decode then a
check; blosc, lz4 and zstd chunks are checked by the size their header
declares, which their libraries allocate. Standard library only (zlib, bz2,
lzma, struct); never imports numcodecs, zarr or h5py, never opens a file.
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError

__all__ = ["V2_CODECS", "V3_CODECS", "HDF5_FILTERS", "check_v2_codecs", "check_v3_codecs", "check_hdf5_filter",
           "bounded_decode", "check_chunk", "v3_bytes_codecs", "zstd_frame_header", "ZSTD_MAGIC"]

#: Zarr v2 codec ids (numcodecs' `id`) that may decode a chunk: compressors, byte shuffles and checksums,
#: and delta (a fixed-size arithmetic filter). Value codecs that build Python objects (pickle, msgpack,
#: json, vlen-*, categorize, object) and every other id are refused.
V2_CODECS = frozenset({"zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "lz4", "shuffle", "delta",
                       "crc32", "crc32c", "adler32", "fletcher32"})
#: Zarr v3 codec names: the core codecs, sharding (its inner codecs checked too), and numcodecs' v3
#: names of the v2 allow-list ("numcodecs.zlib", ...).
V3_CODECS = frozenset({"bytes", "endian", "transpose", "crc32c", "gzip", "zstd", "blosc", "sharding_indexed"}
                      | {f"numcodecs.{name}" for name in V2_CODECS})
#: HDF5 filter ids that may decode a dataset: deflate, shuffle, fletcher32, szip, nbit, scaleoffset, lzf.
HDF5_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset", 32000: "lzf"}

_ADVICE = ("only compression and byte filters are read; a codec that builds objects (pickle, msgpack, vlen) "
           "could run code or allocate without bound: refused, whatever numcodecs allows")


def _refuse(where: str, name: str, codec: object, kind: str) -> UnsafeCheckpointError:
    text = repr(codec)[:80]
    return UnsafeCheckpointError(f"variable '{name}' in '{where}' names {kind} {text}, which varstore does not "
                                 f"allow-list; {_ADVICE}")


def _codec_id(config: Any) -> object:
    return config.get("id") if isinstance(config, dict) else config


def check_v2_codecs(compressor: Any, filters: Any, where: str, name: str) -> None:
    """Refuses a Zarr v2 compressor or filter config outside V2_CODECS (None / [] pass).

    Raises:
      UnsafeCheckpointError: naming the file, the variable and the codec.
    """
    for config in ([compressor] if compressor is not None else []) + list(filters or []):
        codec = _codec_id(config)
        if not isinstance(codec, str) or codec not in V2_CODECS:
            raise _refuse(where, name, codec, "the Zarr v2 codec")


def _v3_name(codec: Any) -> object:
    if isinstance(codec, str):
        return codec
    return codec.get("name") if isinstance(codec, dict) else codec


def check_v3_codecs(codecs: Any, where: str, name: str) -> None:
    """Refuses a Zarr v3 `codecs` list naming a codec outside V3_CODECS, inner sharding codecs included.

    Raises:
      UnsafeCheckpointError: naming the file, the variable and the codec.
    """
    if not isinstance(codecs, list):
        raise _refuse(where, name, codecs, "the Zarr v3 codec list")
    for codec in codecs:
        codec_name = _v3_name(codec)
        if not isinstance(codec_name, str) or codec_name not in V3_CODECS:
            raise _refuse(where, name, codec_name, "the Zarr v3 codec")
        if codec_name == "sharding_indexed" and isinstance(codec, dict):
            config = codec.get("configuration") or {}
            check_v3_codecs(config.get("codecs", []), where, name)
            check_v3_codecs(config.get("index_codecs", []), where, name)


def check_hdf5_filter(code: int, label: str, where: str, name: str) -> None:
    """Refuses an HDF5 filter id outside HDF5_FILTERS (`label`: its name, for the message).

    Raises:
      UnsafeCheckpointError: naming the file, the dataset and the filter.
    """
    if code not in HDF5_FILTERS:
        raise _refuse(where, name, f"{code} ({label})", "the HDF5 filter")


def v3_bytes_codecs(codecs: list[Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(the bytes-to-bytes codecs after the array-to-bytes one, in encode order; the sharding configuration
    when that one is sharding_indexed, else None), from an allow-listed Zarr v3 `codecs` list."""
    sharding = None
    after: list[dict[str, Any]] = []
    seen_bytes = False
    for codec in codecs:
        codec = {"name": codec} if isinstance(codec, str) else codec
        if seen_bytes:
            after.append(codec)
        elif codec.get("name") in ("bytes", "endian", "sharding_indexed"):
            seen_bytes = True
            if codec.get("name") == "sharding_indexed":
                sharding = dict(codec.get("configuration") or {})
    return after, sharding


# ------------------------------------------------------------------ bounded decoders
class _TooLarge(Exception):
    """A chunk decodes to more than its limit (internal; turned into CorruptCheckpointError)."""


def _streamed(decompressor: Any, data: bytes, limit: int) -> bytes:
    out = bytes(decompressor.decompress(data, limit + 1))
    if len(out) > limit:
        raise _TooLarge(len(out))
    return out  # at most limit + 1 bytes were ever decoded


def _inflate(data: bytes, limit: int, config: dict[str, Any]) -> bytes:
    decompressor = zlib.decompressobj(47)  # zlib or gzip header, detected
    out = _streamed(decompressor, data, limit)
    if decompressor.unconsumed_tail:
        raise _TooLarge(limit + 1)
    return out


def _bunzip(data: bytes, limit: int, config: dict[str, Any]) -> bytes:
    """bz2 streams back to back (as bz2.decompress reads them), bounded all together."""
    parts: list[bytes] = []
    total = 0
    while data:
        decompressor = bz2.BZ2Decompressor()
        part = _streamed(decompressor, data, limit - total)
        total += len(part)
        parts.append(part)
        if not decompressor.eof:
            if decompressor.needs_input:
                raise ValueError("truncated bz2 stream")
            raise _TooLarge(limit + 1)
        data = decompressor.unused_data
    return b"".join(parts)


def _unxz(data: bytes, limit: int, config: dict[str, Any]) -> bytes:
    if config.get("format", 1) not in (0, 1, 2) or config.get("filters"):
        raise ValueError("an lzma chunk in raw format or with custom filters")
    return _streamed(lzma.LZMADecompressor(lzma.FORMAT_AUTO), data, limit)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_frame_header(data: bytes, at: int = 0) -> tuple[int, int, int | None]:
    """The zstd frame starting at `at` (RFC 8878 section 3.1.1): (its descriptor byte, the bytes of its frame
    header, the content size it declares or None when it declares none).

    Raises:
      ValueError: not a zstd frame, or its header is truncated.
    """
    if len(data) - at < 5 or data[at:at + 4] != ZSTD_MAGIC:
        raise ValueError("not a zstd frame")
    descriptor = data[at + 4]
    single = (descriptor >> 5) & 1
    position = at + 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1 if single else 0, 2, 4, 8)[descriptor >> 6]
    if width == 0:
        return descriptor, position - at, None
    field = data[position:position + width]
    if len(field) != width:
        raise ValueError("truncated zstd frame header")
    size = int.from_bytes(field, "little")
    return descriptor, position + width - at, size + 256 if width == 2 else size


def _zstd_size(data: bytes) -> int | None:
    """The content size the first zstd frame declares, or None when it declares none."""
    return zstd_frame_header(data)[2]


def _declared(data: bytes, codec: str) -> int | None:
    """The decoded size a blosc, lz4 or zstd chunk declares in its header (what its library allocates)."""
    if codec == "blosc":
        if len(data) < 16:
            raise ValueError("a blosc chunk shorter than its 16-byte header")
        return int(struct.unpack_from("<I", data, 4)[0])
    if codec == "lz4":
        if len(data) < 4:
            raise ValueError("an lz4 chunk shorter than its 4-byte size")
        return int(struct.unpack_from("<i", data, 0)[0])
    return _zstd_size(data)


_STREAMED: dict[str, Callable[[bytes, int, dict[str, Any]], bytes]] = {
    "zlib": _inflate, "gzip": _inflate, "bz2": _bunzip, "lzma": _unxz}
_HEADERED = frozenset({"blosc", "lz4", "zstd"})


def _plain(codec: str) -> str:
    return codec.removeprefix("numcodecs.")


def bounded_decode(data: bytes, config: dict[str, Any], limit: int, where: str, chunk: str,
                   name: str | None = None) -> bytes | None:
    """Decodes one compressed chunk to at most `limit` bytes: the bytes for zlib/gzip, bz2 and lzma
    (streamed with max_length); None for blosc, lz4 and zstd once their header declares at most `limit`
    (their libraries allocate exactly that); `data` unchanged for any other (a byte filter).

    Args:
      config: the codec config ({"id": ...} for v2, {"name": ...} for v3).
      limit: the chunk's decoded size in bytes (its declared shape x itemsize, plus any checksum bytes).
      where, chunk, name: the file, the chunk key and the variable, for messages.

    Raises:
      CorruptCheckpointError: the chunk decodes (or declares) more than `limit`, or does not decode.
    """
    codec = _plain(str(config.get("id", config.get("name", ""))))
    options = dict(config.get("configuration") or config)
    label = (f"variable '{name}' in '{where}': chunk '{chunk}'" if name is not None
             else f"chunk '{chunk}' of '{where}'") + f" ({len(data):,} bytes stored)"
    try:
        if codec in _STREAMED:
            return _STREAMED[codec](data, limit, options)
        if codec in _HEADERED:
            size = _declared(data, codec)
            if size is None:
                raise ValueError("a zstd frame that declares no content size (varstore decodes only sized "
                                 "frames, which zarr and numcodecs write)")
            if size < 0 or size > limit:
                raise _TooLarge(size)
            return None
        return data
    except _TooLarge as big:
        raise CorruptCheckpointError(
            f"{label} decodes ({codec}) to more than its {limit:,} bytes ({big.args[0]:,} or more): a "
            f"decompression bomb or a damaged chunk; decoding stopped there, refused") from None
    except (ValueError, OSError, EOFError, lzma.LZMAError, zlib.error, struct.error) as err:
        raise CorruptCheckpointError(f"{label} does not decode ({codec}): {err}") from err


def check_chunk(data: bytes, configs: Iterable[dict[str, Any]], limit: int, where: str, chunk: str,
                name: str | None = None) -> None:
    """Checks that a chunk's bytes-to-bytes decoders (`configs`, in encode order) stay within `limit` bytes
    each step, decoding in reverse with bounded_decode (the first header-checked codec ends the check:
    its library allocates what was checked, and the codecs before it are byte filters of that size).

    Raises:
      CorruptCheckpointError: as bounded_decode.
    """
    for config in reversed(list(configs)):
        codec = _plain(str(config.get("id", config.get("name", ""))))
        if codec in ("crc32", "crc32c", "adler32", "fletcher32"):
            options = dict(config.get("configuration") or config)
            start = options.get("location", "start" if codec in ("crc32", "adler32") else "end") == "start"
            data = data[4:] if start else data[:-4]
            continue
        decoded = bounded_decode(data, config, limit, where, chunk, name)
        if decoded is None:
            return
        data = decoded

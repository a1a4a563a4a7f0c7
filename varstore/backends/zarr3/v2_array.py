"""Reads one Zarr v2 array directory (`.zarray` + chunk files) chunk by chunk, including dtypes zarr refuses.

Orbax's per-array layout writes v2 arrays whose `.zarray` dtype is the
non-standard strings "bfloat16", "float8_e4m3fn", "float8_e5m2"; zarr-python cannot open those, so the
metadata is parsed here and each chunk is decoded with the codec zarr itself
uses (numcodecs), into a buffer of the chunk's exact size (a chunk that
decodes to more is an error, not an allocation). Codecs outside the
allow-list of varstore.backends.codecs (pickle, msgpack, vlen-*, unknown ids)
are refused when the metadata is parsed, before numcodecs sees them;
zlib/gzip, bz2 and lzma chunks are decoded by the streaming decoders there,
bounded by the chunk's size. Only the chunk files present are visited (one
listing): missing chunks read as the fill value, set once. Knows nothing
about checkpoints, Orbax or variable names.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore.backends.codecs import bounded_decode, check_v2_codecs
from varstore.errors import CorruptCheckpointError, UnsupportedFormatError, VarstoreError

__all__ = ["V2Array", "open_v2_array", "read_v2_array", "chunk_files", "stored_nbytes"]

_MAX_META = 1 << 20


@dataclasses.dataclass(frozen=True)
class V2Array:
    """The parsed `.zarray` of one v2 array directory."""

    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    compressor: dict[str, Any] | None
    filters: tuple[dict[str, Any], ...]
    fill_value: Any
    order: str
    separator: str

    @property
    def native_dtype(self) -> np.dtype:
        """The dtype in native byte order (what `read_v2_array` fills)."""
        return self.dtype.newbyteorder("=") if self.dtype.byteorder not in ("=", "|") else self.dtype


#: dtypes Orbax (tensorstore) writes into .zarray by name, which NumPy's type strings lack.
_BY_NAME = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _dtype(text: Any, label: str) -> np.dtype:
    if text in _BY_NAME:
        return _dtypes.as_dtype(text)
    if not isinstance(text, str):
        raise UnsupportedFormatError(f"{label}: dtype {text!r:.60} is not a plain array dtype")
    try:
        dtype = np.dtype(text)
    except TypeError as err:
        raise CorruptCheckpointError(f"{label}: unknown dtype {text!r:.60}") from err
    if dtype.kind not in "biufc" or dtype.fields is not None:
        raise UnsupportedFormatError(f"{label}: dtype {text} is not a plain numeric dtype")
    return dtype


def open_v2_array(directory: Path, name: str | None = None) -> V2Array:
    """Parses `directory/.zarray`; `name` is the variable, for messages (default: the directory's name).

    Raises:
      CorruptCheckpointError: missing or malformed metadata.
      UnsupportedFormatError: a dtype that is not plain numeric.
      UnsafeCheckpointError: a compressor or filter outside the allow-list (pickle, msgpack, ...).
    """
    label = f"Zarr v2 array '{directory}'"
    meta_path = directory / ".zarray"
    try:
        if meta_path.stat().st_size > _MAX_META:
            raise CorruptCheckpointError(f"{label}: .zarray is larger than {_MAX_META} bytes")
        meta = json.loads(meta_path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise CorruptCheckpointError(f"cannot read {label}/.zarray: {err}") from err
    if not isinstance(meta, dict) or meta.get("zarr_format") != 2:
        raise CorruptCheckpointError(f"{label}: .zarray is not Zarr v2 array metadata")
    shape, chunks = meta.get("shape"), meta.get("chunks")
    ok = (isinstance(shape, list) and isinstance(chunks, list) and len(shape) == len(chunks)
          and all(isinstance(d, int) and d >= 0 for d in shape) and all(isinstance(c, int) and c > 0 for c in chunks))
    if not ok:
        raise CorruptCheckpointError(f"{label}: shape {shape!r:.60} and chunks {chunks!r:.60} do not fit together")
    filters = meta.get("filters") or []
    compressor = meta.get("compressor")
    if not isinstance(filters, list) or not all(isinstance(f, dict) for f in filters) or not (
            compressor is None or isinstance(compressor, dict)):
        raise CorruptCheckpointError(f"{label}: malformed compressor or filters")
    check_v2_codecs(compressor, filters, str(directory), name if name is not None else directory.name)
    order = meta.get("order", "C")
    separator = meta.get("dimension_separator", ".")
    if order not in ("C", "F") or separator not in (".", "/"):
        raise CorruptCheckpointError(f"{label}: order {order!r} / dimension_separator {separator!r}")
    return V2Array(directory, tuple(cast(list[int], shape)), _dtype(meta.get("dtype"), label),
                   tuple(cast(list[int], chunks)), compressor,
                   tuple(filters), meta.get("fill_value"), order, separator)


def _codec(config: dict[str, Any], label: str) -> Any:
    import numcodecs  # type: ignore[import-untyped]

    try:
        return numcodecs.get_codec(dict(config))
    except (ValueError, KeyError, TypeError) as err:
        raise UnsupportedFormatError(f"{label}: codec {config.get('id')!r} is not available: {err}") from err


def chunk_files(array: V2Array) -> dict[tuple[int, ...], Path]:
    """{chunk index: file} of the chunk files present in the grid (one listing, symlinks not followed);
    names that are no chunk of the grid are ignored."""
    grid = [math.ceil(d / c) for d, c in zip(array.shape, array.chunks)]
    found: dict[tuple[int, ...], Path] = {}
    depth = len(grid) if array.separator == "/" else 1
    stack: list[tuple[Path, tuple[str, ...]]] = [(array.path, ())]
    while stack:
        folder, parts = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            key = parts + (entry.name,)
            if len(key) < depth:
                if entry.is_dir(follow_symlinks=False) and entry.name.isdigit():
                    stack.append((Path(entry.path), key))
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            texts = key if array.separator == "/" else tuple(entry.name.split("."))
            if not all(t.isdigit() for t in texts):
                continue
            index = tuple(int(t) for t in texts)
            if (not grid and index == (0,)) or (len(index) == len(grid) and
                                                all(i < g for i, g in zip(index, grid))):
                found[index if grid else ()] = Path(entry.path)
    return found


def stored_nbytes(array: V2Array) -> int:
    """Bytes of the chunk files present (symlinks not followed): what the file stores for the array."""
    total = 0
    for path in chunk_files(array).values():
        try:
            total += os.lstat(path).st_size
        except OSError:
            pass
    return total


def _decode(data: bytes, array: V2Array, compressor: Any, filters: list[Any], chunk_bytes: int,
            key: str, name: str | None) -> npt.NDArray[np.uint8]:
    """One chunk's bytes decoded, never past its size: streamed decoders bounded, numcodecs into a buffer."""
    decoded: Any = data
    if array.compressor is not None:
        limit = chunk_bytes if not array.filters else 2 * chunk_bytes + 64  # byte filters keep the size
        streamed = bounded_decode(data, array.compressor, limit, str(array.path), key, name)
        if streamed is not None:
            decoded = streamed
        elif not filters:
            decoded = compressor.decode(data, out=np.empty(chunk_bytes, dtype=np.uint8))
        else:
            decoded = compressor.decode(data)  # its header declared at most `limit` bytes
    for codec in reversed(filters):
        decoded = codec.decode(decoded)
    return np.frombuffer(memoryview(decoded).cast("B"), dtype=np.uint8)


def read_v2_array(array: V2Array, out: npt.NDArray[Any], name: str | None = None) -> npt.NDArray[Any]:
    """Reads the whole array into `out` (its shape, `native_dtype`), one chunk in memory at a time;
    `name` is the variable, for messages.

    Only the chunk files present are read; when some are missing, `out` is set to the fill value first.

    Raises:
      CorruptCheckpointError: a chunk that does not decode to its size, or decodes past it (a
        decompression bomb: stopped at the chunk's size), naming the chunk file.
    """
    label = f"Zarr v2 array '{array.path}'"
    compressor = _codec(array.compressor, label) if array.compressor else None
    filters = [_codec(f, label) for f in array.filters]
    fill = array.fill_value if array.fill_value is not None else 0
    chunk_bytes = math.prod(array.chunks) * array.dtype.itemsize
    present = chunk_files(array)
    if len(present) < math.prod(math.ceil(d / c) for d, c in zip(array.shape, array.chunks)) and out.size:
        out[...] = fill
    for index in sorted(present):
        key = array.separator.join(str(i) for i in index) if index else "0"
        region = tuple(slice(i * c, min((i + 1) * c, d)) for i, c, d in zip(index, array.chunks, array.shape))
        try:
            flat = _decode(present[index].read_bytes(), array, compressor, filters, chunk_bytes, key, name)
        except VarstoreError:
            raise
        except (OSError, ValueError, RuntimeError, TypeError) as err:
            raise CorruptCheckpointError(f"{label}: chunk '{key}' does not decode: {err}") from err
        if flat.size != chunk_bytes:
            raise CorruptCheckpointError(f"{label}: chunk '{key}' decodes to {flat.size} bytes, expected "
                                         f"{chunk_bytes}")
        block = flat.view(array.dtype).reshape(array.chunks, order="F" if array.order == "F" else "C")
        out[region] = block[tuple(slice(0, r.stop - r.start) for r in region)]
    return out

"""Checks a foreign Zarr hierarchy before zarr decodes it: codec allow-list in the metadata, chunk files bounded.

`check_codecs` reads every `.zarray`, `zarr.json` and `.zmetadata` under a
hierarchy (symlinks not followed) and refuses a codec outside the allow-list
of varstore.backends.codecs before zarr or numcodecs instantiate it.
`check_v3_chunks` decodes each chunk file of one Zarr v3 array (inner chunks
of shards too) with the bounded decoders there, so zarr's own whole-stream
decode never meets a chunk that inflates past its declared size.
`chunk_count` lists the chunk files present, what a grid is bounded by.
Reads files only; never imports zarr or numcodecs, never writes.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

from varstore.backends.codecs import check_chunk, check_v2_codecs, check_v3_codecs, v3_bytes_codecs
from varstore.errors import CorruptCheckpointError

__all__ = ["check_codecs", "check_v2_chunks", "check_v3_chunks", "chunk_files", "METADATA_FILES"]

METADATA_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: The largest metadata file read (bytes); zarr would parse a larger one whole.
_MAX_METADATA = 64 << 20
_EMPTY = (1 << 64) - 1  # a shard index entry for an inner chunk never written


def _read_json(path: Path) -> Any:
    """The parsed metadata file; None when it cannot be read or parsed (zarr then refuses to open it, in
    its own words: nothing is decoded)."""
    try:
        if os.lstat(path).st_size > _MAX_METADATA:
            raise CorruptCheckpointError(f"'{path}' is larger than {_MAX_METADATA:,} bytes of metadata")
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def _check_node(meta: Any, where: str, name: str) -> None:
    """Refuses the codecs of one array's metadata (v2 `.zarray` or v3 `zarr.json` dict)."""
    if not isinstance(meta, dict):
        return
    if meta.get("zarr_format") == 2 and ("compressor" in meta or "filters" in meta):
        check_v2_codecs(meta.get("compressor"), meta.get("filters"), where, name)
    elif meta.get("node_type") == "array":
        check_v3_codecs(meta.get("codecs", []), where, name)
    consolidated = meta.get("consolidated_metadata")
    if isinstance(consolidated, dict) and isinstance(consolidated.get("metadata"), dict):
        for child, child_meta in consolidated["metadata"].items():
            _check_node(child_meta, where, f"{name}/{child}".strip("/"))


def check_codecs(root: Path) -> None:
    """Refuses a hierarchy any of whose arrays names a codec outside the allow-list.

    Raises:
      UnsafeCheckpointError: naming the file, the array and the codec.
      CorruptCheckpointError: metadata that cannot be read or parsed.
    """
    for folder, _, files in os.walk(root, followlinks=False):
        relative = Path(folder).relative_to(root).as_posix()
        name = "" if relative == "." else relative
        for file in files:
            if file not in (".zarray", "zarr.json", ".zmetadata") or os.path.islink(os.path.join(folder, file)):
                continue
            meta = _read_json(Path(folder) / file)
            where = os.path.join(folder, file)
            if file == ".zmetadata" and isinstance(meta, dict) and isinstance(meta.get("metadata"), dict):
                for key, child in meta["metadata"].items():
                    if str(key).endswith(".zarray"):
                        _check_node(child, where, str(key).removesuffix(".zarray").strip("/") or name)
            else:
                _check_node(meta, where, name or root.name)


def chunk_files(directory: Path) -> list[Path]:
    """The chunk files under one array's directory (metadata files and symlinks left out)."""
    found = []
    for folder, _, files in os.walk(directory, followlinks=False):
        for file in files:
            path = Path(folder) / file
            if file not in METADATA_FILES and not path.is_symlink():
                found.append(path)
    return found


def _shard_index(data: bytes, count: int, config: dict[str, Any], where: str) -> list[tuple[int, int]]:
    """(offset, nbytes) of each inner chunk from a shard's index (at its end or start)."""
    index_codecs = config.get("index_codecs") or []
    extra = 4 if any(isinstance(c, dict) and c.get("name") == "crc32c" for c in index_codecs) else 0
    size = 16 * count + extra
    if size > len(data):
        raise CorruptCheckpointError(f"shard '{where}' is shorter ({len(data):,} bytes) than its index "
                                     f"({size:,} bytes for {count:,} inner chunks)")
    raw = data[:size] if config.get("index_location") == "start" else data[len(data) - size:]
    values = struct.unpack_from(f"<{2 * count}Q", raw, 0)
    return [(values[2 * i], values[2 * i + 1]) for i in range(count)]


def check_v2_chunks(directory: Path, meta: dict[str, Any], itemsize: int, name: str | None = None) -> None:
    """Decodes every chunk file of a Zarr v2 array that zarr reads (strings) with the bounded decoder of
    its compressor: at most its chunk's bytes (twice that plus 64 behind byte filters).

    Raises:
      CorruptCheckpointError: a chunk decoding past that, or damaged, naming the chunk file.
    """
    compressor = meta.get("compressor")
    if not isinstance(compressor, dict):
        return
    chunk_bytes = math.prod(int(c) for c in meta.get("chunks") or []) * itemsize
    limit = 2 * chunk_bytes + 64 if meta.get("filters") else chunk_bytes
    for path in chunk_files(directory):
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read chunk '{path}': {err}") from err
        check_chunk(data, [compressor], limit, str(directory), path.relative_to(directory).as_posix(), name)


def check_v3_chunks(directory: Path, meta: dict[str, Any], itemsize: int, name: str | None = None) -> None:
    """Decodes every chunk file of a Zarr v3 array with bounded decoders, checking none passes its size.

    Args:
      directory: the array's directory.
      meta: its parsed `zarr.json` (codecs already allow-listed).
      itemsize: bytes per element.
      name: the variable, for messages.

    Raises:
      CorruptCheckpointError: a chunk (or inner chunk) decoding past its declared size, or damaged,
        naming the chunk file.
    """
    codecs = meta.get("codecs") or []
    grid = (meta.get("chunk_grid") or {}).get("configuration") or {}
    chunk_shape = [int(c) for c in grid.get("chunk_shape") or []]
    after, sharding = v3_bytes_codecs(codecs)
    inner_shape = [int(c) for c in (sharding or {}).get("chunk_shape") or []]
    for path in chunk_files(directory):
        where, key = str(path), path.relative_to(directory).as_posix()
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read chunk '{where}': {err}") from err
        if sharding is None:
            check_chunk(data, after, math.prod(chunk_shape) * itemsize, str(directory), key, name)
            continue
        inner_after, _ = v3_bytes_codecs(list(sharding.get("codecs") or []))
        count = math.prod(c // max(i, 1) for c, i in zip(chunk_shape, inner_shape)) if inner_shape else 0
        check_chunk(data, after, len(data), str(directory), key, name)  # outer byte codecs: none in practice
        for offset, nbytes in _shard_index(data, count, sharding, where):
            if offset == _EMPTY and nbytes == _EMPTY:
                continue
            if offset + nbytes > len(data):
                raise CorruptCheckpointError(f"shard '{where}' indexes bytes {offset:,}+{nbytes:,} past its "
                                             f"{len(data):,} bytes")
            check_chunk(data[offset:offset + nbytes], inner_after, math.prod(inner_shape) * itemsize,
                        str(directory), f"{key}@{offset}", name)

"""Hostile sizes: files declaring far more bytes than they store, types and filters NumPy/HDF5 lack, aliases.

Each builder writes one file or directory under a given folder and returns
the path to open. The HDF5 ones use h5py's low-level API where the high-level
one refuses to write what other tools do (a 128-bit float type, an HDF5 time
type); the absent-filter file is written with h5py's own LZF filter (id
32000, registered by h5py) and its filter pipeline message patched to id
32001 (Blosc), mandatory: with the file's earliest-format object headers the
message has a fixed layout and no checksum (see `absent_filter_h5`).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np

from ._sources import plant_zarr_manifest, write_own

#: Declared bytes of the unwritten dataset: (30000, 30000) float32.
UNWRITTEN_SHAPE = (30000, 30000)
UNWRITTEN_BYTES = 30000 * 30000 * 4
#: The aliased variable: 4 MiB of float32, named this many times.
ALIAS_COUNT = 600
ALIAS_BYTES = 4 << 20


def unwritten_h5(folder: Path) -> Path:
    """A plain HDF5 file (about 2 KB) holding 'big': a chunked (30000, 30000) float32 dataset whose chunks
    were never written (stored bytes 0, declared 3.6e9), and 'small': 4 float32 values 0..3."""
    import h5py

    path = folder / "unwritten.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("big", shape=UNWRITTEN_SHAPE, dtype="f4", chunks=(1000, 1000))
        f.create_dataset("small", data=np.arange(4, dtype=np.float32))
    return path


def odd_types_h5(folder: Path) -> Path:
    """A plain HDF5 file with 'quad' (IEEE 128-bit float, 4 values), 'time' (HDF5 UNIX_D64LE, 4 values)
    and 'ok' (float32 0..3); h5py has no NumPy dtype for the first two."""
    import h5py
    from h5py import h5d, h5s, h5t

    path = folder / "odd_types.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("ok", data=np.arange(4, dtype=np.float32))
        quad = h5t.IEEE_F64LE.copy()
        quad.set_size(16)
        quad.set_precision(128)
        quad.set_fields(127, 112, 15, 0, 112)
        quad.set_ebias(16383)
        h5d.create(f.id, b"quad", quad, h5s.create_simple((4,)))
        h5d.create(f.id, b"time", h5t.UNIX_D64LE, h5s.create_simple((4,)))
    return path


#: The LZF entry of a version-1 filter pipeline message: id 32000, name length 8, flags 1 (optional),
#: 3 client values, name "lzf\0" padded to 8 bytes.
_LZF_ENTRY = bytes.fromhex("007d 0800 0100 0300") + b"lzf\0\0\0\0\0"
#: The same entry as id 32001, mandatory (flags 0), named "blosc".
_BLOSC_ENTRY = bytes.fromhex("017d 0800 0000 0300") + b"blosc\0\0\0"


def absent_filter_h5(folder: Path) -> Path:
    """A plain HDF5 file with 'packed' (1000 float32, chunks compressed with a filter whose pipeline says
    id 32001 'blosc', not installed) and 'ok' (float32 0..3).

    Written with LZF (which h5py ships), then the pipeline entry's bytes are
    replaced in place by a same-sized one naming filter 32001 as mandatory.
    """
    import h5py

    path = folder / "absent_filter.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("ok", data=np.arange(4, dtype=np.float32))
        f.create_dataset("packed", data=np.arange(1000, dtype=np.float32), compression="lzf", chunks=(1000,))
    data = path.read_bytes()
    assert data.count(_LZF_ENTRY) == 1, "the LZF pipeline entry is not where this builder expects it"
    path.write_bytes(data.replace(_LZF_ENTRY, _BLOSC_ENTRY))
    return path


def hard_links_h5(folder: Path) -> Path:
    """A plain HDF5 file whose 4 MiB float32 dataset 'w' is hard-linked under ALIAS_COUNT - 1 more names
    'alias/0', 'alias/1', ...: one stored copy, many names."""
    import h5py

    path = folder / "hard_links.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("w", data=np.arange(ALIAS_BYTES // 4, dtype=np.float32))
        group = f.create_group("alias")
        for i in range(ALIAS_COUNT - 1):
            group[str(i)] = f["w"]
    return path


def _own_zarr_manifest(path: Path) -> dict:
    return json.loads((path / "_varstore/manifest/0").read_bytes())


def aliased_packed_zarr(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose manifest names ALIAS_COUNT variables 'w0'... over the one 4 MiB
    range of the packed blob where 'w' lies (checksums copied, so only a range check can refuse it)."""
    from varstore import save

    path = folder / "aliased.zarr"
    save(path, {"w": np.arange(ALIAS_BYTES // 4, dtype=np.float32)}, pack_threshold_bytes=ALIAS_BYTES + 1,
         layout="packed")
    document = _own_zarr_manifest(path)
    columns = document["variables"]
    for key, values in columns.items():
        columns[key] = values * ALIAS_COUNT
    columns["name"] = [f"w{i}" for i in range(ALIAS_COUNT)]
    plant_zarr_manifest(path, json.dumps(document).encode())
    return path


def compressed_manifest_zarr(folder: Path, declared: int | None = None) -> Path:
    """A varstore Zarr checkpoint whose manifest array is stored gzip-compressed, as zarr-python writes it.

    `declared`: the manifest length its zarr.json declares (shape and chunk shape); None keeps the true
    length (a legitimate, only unusual, checkpoint). The chunk holds the gzip of the true manifest followed
    by spaces up to `declared` (still valid JSON), so it really decompresses to `declared` bytes.
    """
    path = write_own(folder / "compressed_manifest", "zarr")
    raw = (path / "_varstore/manifest/0").read_bytes()
    meta_file = path / "_varstore/manifest/zarr.json"
    meta = json.loads(meta_file.read_text())
    length = len(raw) if declared is None else declared
    meta["shape"] = [length]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [length]
    meta["codecs"] = [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 5}}]
    meta_file.write_text(json.dumps(meta))
    (path / "_varstore/manifest/0").unlink()
    target = path / "_varstore/manifest" / _chunk_key(meta)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(_gzip_padded(raw, length))
    return path


def _gzip_padded(raw: bytes, length: int) -> bytes:
    """gzip of `raw` followed by spaces up to `length` bytes, without compressing gigabytes of spaces.

    After a full flush a deflate stream starts afresh, so one compressed 1 MiB block of spaces is
    repeated as it is; the gzip trailer's CRC-32 is computed over the real bytes.
    """
    block = 1 << 20
    spaces = b" " * block
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    parts = [deflate.compress(raw) + deflate.flush(zlib.Z_FULL_FLUSH)]
    crc = zlib.crc32(raw)
    remaining = length - len(raw)
    whole, rest = divmod(remaining, block)
    if whole:
        first = deflate.compress(spaces) + deflate.flush(zlib.Z_FULL_FLUSH)
        again = deflate.compress(spaces) + deflate.flush(zlib.Z_FULL_FLUSH)
        assert first == again, "a full flush did not restart the deflate stream"
        parts.append(first * whole)
        block_crc = [crc]
        for _ in range(whole):
            block_crc[0] = zlib.crc32(spaces, block_crc[0])
        crc = block_crc[0]
    parts.append(deflate.compress(b" " * rest) + deflate.flush(zlib.Z_FINISH))
    crc = zlib.crc32(b" " * rest, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + b"".join(parts) + struct.pack("<II", crc & 0xFFFFFFFF, length & 0xFFFFFFFF)


def _chunk_key(meta: dict) -> str:
    encoding = meta.get("chunk_key_encoding") or {}
    if encoding.get("name") == "v2":
        return "0"
    separator = (encoding.get("configuration") or {}).get("separator", "/")
    return separator.join(["c", "0"])


def deep_json_manifest_zarr(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose manifest is 100,000 nested JSON lists (deeper than Python parses)."""
    path = write_own(folder / "deep_manifest", "zarr")
    plant_zarr_manifest(path, b"[" * 100_000 + b"]" * 100_000)
    return path


def deep_json_group_zarr(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose group 'dense/zarr.json' is 100,000 nested JSON lists."""
    path = write_own(folder / "deep_group", "zarr")
    (path / "dense/zarr.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    return path


def truncated_group_zarr(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose intermediate group 'dense/zarr.json' is cut to half its bytes."""
    path = write_own(folder / "truncated_group", "zarr")
    group = path / "dense/zarr.json"
    data = group.read_bytes()
    group.write_bytes(data[:len(data) // 2])
    return path


def aliased_h5_offsets(folder: Path) -> Path:
    """A varstore HDF5 checkpoint (4 MiB) whose manifest names ALIAS_COUNT variables 'w0'... at the file
    offset of its one 4 MiB array 'w' (paths 'w0'..., checksums copied).

    The new manifest is appended to the file and the 512-byte index header pointed at it (offset, length,
    crc32c), so a reader takes the index-header path, where the manifest's file offsets are trusted.
    """
    from varstore import save
    from varstore.checkpoint.format.checksum import crc32c_raw
    from varstore.checkpoint.format.index_header import decode_index_header, encode_index_header

    path = save(folder / "aliased.h5", {"w": np.arange(ALIAS_BYTES // 4, dtype=np.float32)})
    data = path.read_bytes()
    header = decode_index_header(data[:512])
    assert header is not None
    offset, nbytes, _ = header
    document = json.loads(data[offset:offset + nbytes])
    columns = document["variables"]
    for key, values in columns.items():
        columns[key] = values * ALIAS_COUNT
    columns["name"] = columns["path"] = [f"w{i}" for i in range(ALIAS_COUNT)]
    raw = json.dumps(document).encode()
    path.write_bytes(encode_index_header(len(data), len(raw), crc32c_raw(raw)) + data[512:] + raw)
    return path


def sparse_manifest_h5(folder: Path, declared: int = 1_000_000_000) -> Path:
    """A varstore HDF5 checkpoint whose `_varstore/manifest` dataset was rewritten chunked and gzip-compressed,
    declaring `declared` bytes: the true manifest in its first chunk, every other chunk unwritten (fill value:
    a space, so the whole would still be valid JSON). Its index header no longer matches, so readers go
    through the HDF5 library."""
    import h5py

    path = write_own(folder, "h5")
    with h5py.File(path, "r+") as f:
        raw = f["_varstore/manifest"][()].tobytes()
        del f["_varstore/manifest"]
        dataset = f.create_dataset("_varstore/manifest", shape=(declared,), dtype="u1", chunks=(1 << 20,),
                                   compression="gzip", fillvalue=ord(" "))
        dataset[:len(raw)] = np.frombuffer(raw, np.uint8)
    return path

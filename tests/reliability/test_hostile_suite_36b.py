"""Issue 36, bounded by what is stored: decompression and fill bombs, huge chunk grids, codecs off the allow-list.

Each hostile case is built from bytes (a 4-element float32 array whose one chunk inflates to 2.5 GiB in
HDF5, Zarr v2, Zarr v3 and Orbax; unwritten Orbax leaves and a Zarr root array declaring 3.6 GB; a
3.8 MiB Zarr array in 1M chunks; an Orbax leaf whose .zarray names the pickle filter) and run through
`varstore ls` and `varstore convert` in a child under a 2 GiB RLIMIT_AS and a timeout
(tests/reliability/_hostile_run.py): one typed error line and exit 2, a peak RSS far below the claim,
nothing changed in the test's folder, nothing left in the child's TMPDIR. Then the other side: a legit
all-zero value past the default expansion factor loads once the factor is raised (argument and
environment), and the compressed fixtures still load.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pickle
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests.reliability._hostile_run import changed_paths, run_hostile, tree_state
from varstore import _limits
from varstore.backends import codecs
from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError, ValueTooLargeError, VarstoreError

#: Peak RSS a refused file may cost a child (MiB): imports take about 150; every bomb is 2.5 GiB or more.
PEAK_MB = 400
#: What each bomb chunk inflates to (bytes): more than the child's whole address space.
BOMB_BYTES = 40 * (64 << 20)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


# ------------------------------------------------------------------ bomb bytes (built once)
@functools.lru_cache(maxsize=None)
def _zeros_block() -> bytes:
    """A raw deflate block of 64 MiB of zeros ending on a byte boundary (a sync flush): repeated, it
    inflates to 64 MiB of zeros each time (its back-references only ever see zeros)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(bytes(64 << 20)) + compressor.flush(zlib.Z_SYNC_FLUSH)


def _zlib_bomb() -> bytes:
    """A zlib stream inflating to BOMB_BYTES zeros (with its true adler32)."""
    adler = ((BOMB_BYTES % 65521) << 16) | 1  # A = 1 + sum(bytes) = 1, B = sum of the A's = n
    return b"\x78\x9c" + _zeros_block() * 40 + b"\x03\x00" + struct.pack(">I", adler)


@functools.lru_cache(maxsize=None)
def _gzip_bomb() -> bytes:
    """A gzip member inflating to BOMB_BYTES zeros (with its true crc32 and size)."""
    crc, block = 0, bytes(64 << 20)
    for _ in range(40):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + _zeros_block() * 40 + b"\x03\x00" + struct.pack("<II", crc, BOMB_BYTES & 0xFFFFFFFF)


@functools.lru_cache(maxsize=None)
def _bz2_bomb() -> bytes:
    """bz2 streams back to back inflating to BOMB_BYTES zeros (bz2.decompress reads them all)."""
    import bz2

    return bz2.compress(bytes(64 << 20), 9) * 40


def _zarray(compressor: dict | None, *, shape: list[int] | None = None, chunks: list[int] | None = None,
            filters: list | None = None) -> str:
    return json.dumps({"zarr_format": 2, "shape": shape or [4], "chunks": chunks or [4], "dtype": "<f4",
                       "compressor": compressor, "filters": filters, "fill_value": 0.0, "order": "C",
                       "dimension_separator": "."})


# ------------------------------------------------------------------ builders
def _hdf5_gzip_bomb(folder: Path) -> Path:
    import h5py

    path = folder / "bomb.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("w", shape=(4,), dtype="<f4", chunks=(4,), compression="gzip")
        ds.id.write_direct_chunk((0,), _zlib_bomb())
        f.create_dataset("ok", data=np.arange(3, dtype=np.float32))
    return path


def _zarr_v2_bomb(folder: Path, compressor: dict, chunk: bytes) -> Path:
    root = folder / "bomb.zarr"
    (root / "w").mkdir(parents=True)
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    (root / "w" / ".zarray").write_text(_zarray(compressor))
    (root / "w" / "0").write_bytes(chunk)
    return root


def _zarr_v3_gzip_bomb(folder: Path) -> Path:
    root = folder / "bomb3.zarr"
    (root / "w" / "c").mkdir(parents=True)
    (root / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (root / "w" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                      {"name": "gzip", "configuration": {"level": 1}}], "attributes": {}}))
    (root / "w" / "c" / "0").write_bytes(_gzip_bomb())
    return root


def _zarr_v3_sharded_gzip_bomb(folder: Path) -> Path:
    """A sharded Zarr v3 array whose one shard holds one inner gzip chunk inflating to 2.5 GiB."""
    from varstore.checkpoint.format.checksum import crc32c_of

    root = _zarr_v3_gzip_bomb(folder)
    meta = json.loads((root / "w" / "zarr.json").read_text())
    meta["codecs"] = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                       {"name": "gzip", "configuration": {"level": 1}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]
    (root / "w" / "zarr.json").write_text(json.dumps(meta))
    inner = _gzip_bomb()
    index = struct.pack("<QQ", 0, len(inner))
    (root / "w" / "c" / "0").write_bytes(inner + index + struct.pack("<I", crc32c_of(index)))
    return root


def _orbax(folder: Path, zarray: str, chunk: bytes | None) -> Path:
    root = folder / "orbax"
    (root / "w").mkdir(parents=True)
    leaf = {"key_metadata": [{"key": "w", "key_type": 2}], "value_metadata": {"value_type": "jax.Array"}}
    (root / "_METADATA").write_text(json.dumps({"tree_metadata": {"('w',)": leaf}}))
    (root / "_CHECKPOINT_METADATA").write_text("{}")
    (root / "w" / ".zarray").write_text(zarray)
    if chunk is not None:
        (root / "w" / "0").write_bytes(chunk)
    return root


def _orbax_fill_bomb(folder: Path) -> Path:
    return _orbax(folder, _zarray({"id": "zstd", "level": 1}, shape=[30000, 30000], chunks=[1000, 1000]), None)


def _zarr_root_fill_bomb(folder: Path) -> Path:
    root = folder / "root.zarr"
    root.mkdir()
    (root / ".zarray").write_text(_zarray({"id": "zlib", "level": 1}, shape=[30000, 30000], chunks=[1000, 1000]))
    return root


def _zarr_million_chunks(folder: Path) -> Path:
    root = folder / "grid.zarr"
    root.mkdir()
    (root / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [1_000_000], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "attributes": {}}))
    return root


def _own_zarr(folder: Path, shape: list[int], chunk_shape: list[int], codecs: list[dict],
              chunk: bytes | None) -> Path:
    """varstore's own Zarr checkpoint whose manifest and w/zarr.json claim `shape` float32, stored with
    `codecs` in one chunk file `chunk` (None: no chunk file at all)."""
    path = vs.save(folder / "own.zarr", {"w": np.ones(4, np.float32)})
    manifest_dir = path / "_varstore" / "manifest"
    manifest = json.loads((manifest_dir / "0").read_bytes())
    manifest["variables"]["shape"] = [shape]
    manifest["variables"]["nbytes"] = [4 * math.prod(shape)]
    data = json.dumps(manifest).encode()
    (manifest_dir / "0").write_bytes(data)
    meta = json.loads((manifest_dir / "zarr.json").read_text())
    meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [len(data)]
    (manifest_dir / "zarr.json").write_text(json.dumps(meta))
    from varstore.checkpoint.format.checksum import crc32c_of

    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["varstore_manifest_crc32c"] = crc32c_of(data)
    (path / "zarr.json").write_text(json.dumps(root))
    meta = json.loads((path / "w" / "zarr.json").read_text())
    meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"], meta["codecs"] = shape, chunk_shape, codecs
    (path / "w" / "zarr.json").write_text(json.dumps(meta))
    for file in (path / "w").iterdir():
        if file.name != "zarr.json":
            file.unlink()
    if chunk is not None:
        (path / "w" / ".".join("0" * len(shape))).write_bytes(chunk)
    return path


def _own_zarr_missing_chunks(folder: Path) -> Path:
    return _own_zarr(folder, [30000, 30000], [1000, 1000], [{"name": "bytes"}], None)


def _own_zarr_gzip_bomb(folder: Path) -> Path:
    return _own_zarr(folder, [4], [4], [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}],
                     _gzip_bomb())


class _Marker:
    """Unpickled, it would create the file named by `path` (a stand-in for code from the file)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


def _orbax_pickle_filter(folder: Path) -> Path:
    chunk = pickle.dumps(_Marker(str(folder / "MARKER")), protocol=2)
    return _orbax(folder, _zarray(None, filters=[{"id": "pickle", "protocol": 2}]), chunk)


#: class -> (builder, what `ls` does ("exit0" lists it; else the needle of its one error line),
#: the needle of `convert`'s one error line, extra environment of the child)
CASES: dict[str, tuple[Callable[[Path], Path], str, str, dict[str, str]]] = {
    "HDF5 gzip chunk inflating to 2.5 GiB": (_hdf5_gzip_bomb, "exit0", "decodes (zlib) to more than its 16 bytes", {}),
    "Zarr v2 zlib chunk inflating to 2.5 GiB": (
        lambda f: _zarr_v2_bomb(f, {"id": "zlib", "level": 1}, _zlib_bomb()), "exit0", "more than its 16 bytes", {}),
    "Zarr v2 bz2 chunk inflating to 2.5 GiB": (
        lambda f: _zarr_v2_bomb(f, {"id": "bz2", "level": 9}, _bz2_bomb()), "exit0", "more than its 16 bytes", {}),
    "Zarr v3 gzip chunk inflating to 2.5 GiB": (_zarr_v3_gzip_bomb, "exit0", "decodes (gzip) to more than its 16", {}),
    "Zarr v3 shard whose inner gzip chunk inflates to 2.5 GiB": (
        _zarr_v3_sharded_gzip_bomb, "exit0", "chunk 'c/0@0' (", {}),
    "Orbax zlib leaf inflating to 2.5 GiB": (
        lambda f: _orbax(f, _zarray({"id": "zlib", "level": 1}), _zlib_bomb()), "exit0", "more than its 16 bytes", {}),
    "Orbax leaf of unwritten chunks declaring 3.6 GB": (
        _orbax_fill_bomb, "exit0", "declares 3,600,000,000 bytes; the file stores 0 bytes", {}),
    "Zarr root array of unwritten chunks declaring 3.6 GB": (
        _zarr_root_fill_bomb, "exit0", "declares 3,600,000,000 bytes; the file stores 0 bytes", {}),
    "Zarr array of 3.8 MiB in 1M chunks": (_zarr_million_chunks, "exit0", "grid of 1,000,000 chunks", {}),
    "own Zarr checkpoint with its chunks missing, declaring 3.6 GB": (
        _own_zarr_missing_chunks, "exit0", "claims 3600000000 bytes, but its storage 'w'", {}),
    "own Zarr checkpoint with a gzip chunk inflating to 2.5 GiB": (
        _own_zarr_gzip_bomb, "exit0", "decodes (gzip) to more than its 16 bytes", {}),
    "Orbax leaf naming the pickle filter, unsafe decode allowed": (
        _orbax_pickle_filter, "'pickle'", "'pickle'", {"NUMCODECS_ALLOW_UNSAFE_PICKLE_DECODE": "1"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bombs_and_unsafe_codecs_are_refused_in_bounded_memory_touching_nothing(tmp_path: Path, case: str) -> None:
    build, listing, needle, env = CASES[case]
    folder = tmp_path / "area"
    folder.mkdir()
    path = build(folder)
    assert sum(p.stat().st_size for p in [path, *path.rglob("*")] if p.is_file()) < 8 << 20  # a few MB at most
    before = tree_state(tmp_path)
    listed = run_hostile("cli", ["ls", str(path)], timeout_s=120, env=env)
    converted = run_hostile("cli", ["convert", str(path), str(tmp_path / "out.h5")], timeout_s=120, env=env)
    read = run_hostile("api", ["read_all", str(path)], timeout_s=120, env=env)
    for outcome in (listed, converted):
        assert outcome.peak_rss_mb is not None and outcome.peak_rss_mb < PEAK_MB, (case, outcome)
        assert outcome.tmp_left == [], (case, outcome.tmp_left)
    if listing == "exit0":
        assert listed.status == "exit0", (case, listed)
    else:
        assert listed.status == "exit2" and listing in listed.stderr and listed.stderr.count("\n") == 1, listed
    assert converted.status == "exit2" and converted.stderr.count("\n") == 1, (case, converted)
    assert needle in converted.stderr and "variable '" in converted.stderr, converted  # names the variable
    assert read.status == "typed" and read.peak_rss_mb < PEAK_MB, (case, read)
    assert read.error in ("CorruptCheckpointError", "ValueTooLargeError", "UnsafeCheckpointError"), read
    assert changed_paths(before, tree_state(tmp_path)) == [], case
    assert not (tmp_path / "out.h5").exists() and not (folder / "MARKER").exists()


def test_pickle_filter_is_refused_naming_file_variable_and_codec(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NUMCODECS_ALLOW_UNSAFE_PICKLE_DECODE", "1")
    path = _orbax_pickle_filter(tmp_path)
    with pytest.raises(UnsafeCheckpointError, match=r"variable 'w' in '.*orbax/w' names the Zarr v2 codec 'pickle', "
                                                    r"which varstore does not allow-list"):
        vs.open_checkpoint(path)
    assert not (tmp_path / "MARKER").exists()
    zarr_root = tmp_path / "z.zarr"
    (zarr_root / "w").mkdir(parents=True)
    (zarr_root / ".zgroup").write_text('{"zarr_format": 2}')
    (zarr_root / "w" / ".zarray").write_text(_zarray({"id": "zlib"}, filters=[{"id": "msgpack2"}]))
    with pytest.raises(UnsafeCheckpointError, match=r"variable 'w' in .* names the Zarr v2 codec 'msgpack2'"):
        vs.open_checkpoint(zarr_root)


@pytest.mark.parametrize("codec", ["vlen-utf8", "numcodecs.pickle", "numcodecs.json2", "my.plugin"])
def test_zarr_v3_codecs_off_the_allow_list_are_refused(tmp_path: Path, codec: str) -> None:
    root = _zarr_v3_gzip_bomb(tmp_path)
    meta = json.loads((root / "w" / "zarr.json").read_text())
    meta["codecs"] = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2], "codecs": [{"name": "bytes"}, {"name": codec}], "index_codecs": [{"name": "bytes"}]}}]
    (root / "w" / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(UnsafeCheckpointError, match=f"variable 'w' in .* names the Zarr v3 codec '{codec}'"):
        vs.open_checkpoint(root)


def test_allow_lists_name_compression_and_byte_filters_only() -> None:
    for good in ("zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "lz4", "shuffle", "delta", "crc32"):
        codecs.check_v2_codecs({"id": good}, [], "f", "v")
    for bad in ("pickle", "msgpack", "msgpack2", "json", "json2", "vlen-utf8", "vlen-bytes", "vlen-array",
                "categorize", "object", "unknown", None):
        with pytest.raises(UnsafeCheckpointError, match="variable 'v' in 'f' names the Zarr v2 codec"):
            codecs.check_v2_codecs(None, [{"id": bad}], "f", "v")
    codecs.check_v3_codecs([{"name": "transpose"}, "bytes", {"name": "crc32c"}, {"name": "numcodecs.lzma"}], "f", "v")
    codecs.check_hdf5_filter(32000, "lzf", "f.h5", "d")
    with pytest.raises(UnsafeCheckpointError, match=r"'d' in 'f.h5' names the HDF5 filter '32015 \(zstd\)'"):
        codecs.check_hdf5_filter(32015, "zstd", "f.h5", "d")


def test_bounded_decoders_stop_at_the_chunk_size() -> None:
    import bz2
    import lzma

    data = bytes(range(256)) * 64  # 16 KiB
    for config, packed in (({"id": "zlib"}, zlib.compress(data)), ({"id": "bz2"}, bz2.compress(data) * 2),
                           ({"id": "lzma"}, lzma.compress(data)), ({"name": "gzip"}, _gzip(data))):
        size = len(data) * (2 if config.get("id") == "bz2" else 1)
        assert codecs.bounded_decode(packed, config, size, "f", "0") == data * (size // len(data))
        with pytest.raises(CorruptCheckpointError, match=rf"chunk '0' of 'f' \([\d,]+ bytes stored\) decodes "
                                                         rf"\(\w+\) to more than its {size - 1:,} bytes"):
            codecs.bounded_decode(packed, config, size - 1, "f", "0")
    import numcodecs

    for codec in (numcodecs.Zstd(), numcodecs.Blosc(), numcodecs.LZ4()):
        packed = codec.encode(data)
        assert codecs.bounded_decode(packed, {"id": codec.codec_id}, len(data), "f", "0") is None
        with pytest.raises(CorruptCheckpointError, match="to more than its 100 bytes"):
            codecs.bounded_decode(packed, {"id": codec.codec_id}, 100, "f", "0")
    with pytest.raises(CorruptCheckpointError, match="does not decode"):
        codecs.bounded_decode(b"not zlib", {"id": "zlib"}, 100, "f", "0")


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


# ------------------------------------------------------------------ the factor and its switches
def test_expansion_factor_default_environment_and_argument(monkeypatch) -> None:
    monkeypatch.delenv(_limits.ENV_MAX_EXPANSION, raising=False)
    assert _limits.max_expansion() == (64.0, "the default")
    assert _limits.expansion_limit(1000) == 64_000 + (64 << 20)
    assert _limits.max_expansion(2.5) == (2.5, "max_expansion") and _limits.expansion_limit(0, math.inf) is None
    monkeypatch.setenv(_limits.ENV_MAX_EXPANSION, "1_000")
    assert _limits.max_expansion() == (1000.0, "VARSTORE_MAX_EXPANSION")
    for bad in (0.5, float("nan"), "64", True):
        with pytest.raises(VarstoreError, match="max_expansion must be a number >= 1"):
            _limits.max_expansion(bad)
    monkeypatch.setenv(_limits.ENV_MAX_EXPANSION, "lots")
    with pytest.raises(VarstoreError, match="VARSTORE_MAX_EXPANSION='lots' is not a number"):
        _limits.max_expansion()
    monkeypatch.delenv(_limits.ENV_MAX_EXPANSION)
    with pytest.raises(ValueTooLargeError, match=r"variable 'w' in 'f' declares 100,000,000 bytes; the file stores "
                                                 r"100 bytes for it; the read limit is 67,115,264 bytes \(what the "
                                                 r"file stores for it x 64 \(the default\) plus 64 MiB\).*max_expansion="):
        _limits.check_value_size("w", "f", 100_000_000, None, stored=100)
    _limits.check_value_size("w", "f", 100_000_000, None, stored=100, expansion=1e6)
    _limits.check_grid("w", "f", 1 << 16, 0)
    _limits.check_grid("w", "f", 1 << 20, (1 << 20) // 64)
    with pytest.raises(ValueTooLargeError, match=r"'w' in 'f' has a grid of 1,048,576 chunks but the file stores 0"):
        _limits.check_grid("w", "f", 1 << 20, 0)


def _zero_zarr(folder: Path) -> Path:
    """A legit Zarr v2 array of 80 MiB of zeros, zlib-compressed to ~80 KB: past 64 x stored + 64 MiB."""
    root = folder / "zeros.zarr"
    root.mkdir()
    (root / ".zarray").write_text(_zarray({"id": "zlib", "level": 9}, shape=[20 << 20], chunks=[1 << 20]))
    chunk = zlib.compress(bytes(4 << 20), 9)
    for i in range(20):
        (root / str(i)).write_bytes(chunk)
    return root


def test_a_legit_all_zero_value_past_the_factor_loads_once_it_is_raised(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(_limits.ENV_MAX_EXPANSION, raising=False)
    path = _zero_zarr(tmp_path)
    with pytest.raises(ValueTooLargeError, match=r"variable 'zeros' in '.*zeros.zarr' declares 83,886,080 bytes; "
                                                 r"the file stores [\d,]+ bytes.*VARSTORE_MAX_EXPANSION"):
        vs.load(path)
    loaded = vs.load(path, max_expansion=2000)["zeros"]
    assert loaded.shape == (20 << 20,) and loaded.dtype == np.float32 and not loaded.any()
    with vs.open_checkpoint(path, max_expansion=2000) as reader:
        assert reader.max_expansion == 2000 and not reader.read("zeros").any()
    with pytest.raises(ValueTooLargeError, match="declares 83,886,080 bytes"):
        vs.convert(path, tmp_path / "refused.h5")
    assert not (tmp_path / "refused.h5").exists()
    vs.convert(path, tmp_path / "by_argument.h5", max_expansion=2000)
    assert vs.load(tmp_path / "by_argument.h5")["zeros"].shape == (20 << 20,)
    monkeypatch.setenv(_limits.ENV_MAX_EXPANSION, "2000")
    assert not vs.load(path)["zeros"].any()
    report = vs.convert(path, tmp_path / "zeros.h5")
    assert report is not None and vs.load(tmp_path / "zeros.h5")["zeros"].shape == (20 << 20,)
    with pytest.raises(VarstoreError, match="max_expansion must be a number >= 1"):
        vs.open_checkpoint(path, max_expansion=0)


def test_sparse_zarr_v2_array_reads_present_chunks_and_fills_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "sparse.zarr"
    root.mkdir()
    meta = json.loads(_zarray({"id": "zlib"}, shape=[6, 4], chunks=[2, 2]))
    meta["fill_value"] = 7.0
    (root / ".zarray").write_text(json.dumps(meta))
    (root / "1.1").write_bytes(zlib.compress(np.arange(4, dtype="<f4").tobytes()))
    (root / "junk").write_bytes(b"x")
    (root / "9.9").write_bytes(b"outside the grid")
    expected = np.full((6, 4), 7.0, np.float32)
    expected[2:4, 2:4] = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_array_equal(vs.load(root)["sparse"], expected)


@pytest.mark.parametrize("fixture", ["orbax/no_ocdbt", "foreign_zarr/v2_group.zarr", "foreign_zarr/v3_group.zarr"])
def test_compressed_fixtures_still_load(fixture: str) -> None:
    loaded = vs.load(FIXTURES / fixture)
    assert loaded and all(isinstance(v, np.ndarray) for v in loaded.values())
    with vs.open_checkpoint(FIXTURES / fixture) as reader:
        for name in reader.keys():
            np.testing.assert_array_equal(reader.read(name), loaded[name])


@pytest.mark.parametrize("layout", ["v3 sharded zstd", "v3 gzip crc32c", "v2 blosc shuffle", "v2 lz4 delta",
                                    "v2 bz2 F-order", "v2 lzma nested keys"])
def test_legit_compressed_zarr_arrays_read_back_exactly(tmp_path: Path, layout: str) -> None:
    import numcodecs
    import zarr
    from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

    value = np.arange(10 * 6, dtype=np.float32).reshape(10, 6) * 1.5
    path = tmp_path / "a.zarr"
    if layout == "v3 sharded zstd":
        array = zarr.create_array(store=str(path), shape=value.shape, chunks=(2, 3), shards=(4, 6), dtype="f4",
                                  compressors=ZstdCodec(), zarr_format=3)
    elif layout == "v3 gzip crc32c":
        array = zarr.create_array(store=str(path), shape=value.shape, chunks=(4, 4), dtype="f4",
                                  serializer=BytesCodec(), compressors=[GzipCodec(), Crc32cCodec()], zarr_format=3)
    else:
        compressor, filters, order, separator = {
            "v2 blosc shuffle": (numcodecs.Blosc(), [numcodecs.Shuffle(elementsize=4)], "C", "."),
            "v2 lz4 delta": (numcodecs.LZ4(), [numcodecs.Delta(dtype="<f4")], "C", "."),
            "v2 bz2 F-order": (numcodecs.BZ2(), None, "F", "."),
            "v2 lzma nested keys": (numcodecs.LZMA(), None, "C", "/")}[layout]
        array = zarr.create_array(store=str(path), shape=value.shape, chunks=(4, 4), dtype="<f4", zarr_format=2,
                                  compressors=compressor, filters=filters, order=order,
                                  chunk_key_encoding={"name": "v2", "separator": separator})
    array[...] = value
    np.testing.assert_array_equal(vs.load(path)["a"], value)


def test_legit_hdf5_deflate_shuffle_fletcher32_chunks_read_back_exactly(tmp_path: Path) -> None:
    import h5py

    value = np.random.default_rng(36).standard_normal((50, 30)).astype(np.float32)
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("w", data=value, chunks=(16, 16), compression="gzip", shuffle=True, fletcher32=True)
        f.create_dataset("lzf", data=value, chunks=(8, 30), compression="lzf")
    loaded = vs.load(path)
    np.testing.assert_array_equal(loaded["w"], value)
    np.testing.assert_array_equal(loaded["lzf"], value)


def test_zarr_v2_string_array_chunk_bomb_is_refused_before_zarr_decodes_it(tmp_path: Path) -> None:
    root = _zarr_v2_bomb(tmp_path, {"id": "zlib", "level": 1}, _zlib_bomb())
    meta = json.loads((root / "w" / ".zarray").read_text())
    meta["dtype"], meta["fill_value"] = "|S4", ""
    (root / "w" / ".zarray").write_text(json.dumps(meta))
    read = run_hostile("api", ["read_all", str(root)], timeout_s=120)
    assert (read.status, read.error) == ("typed", "CorruptCheckpointError"), read
    assert "variable 'w'" in read.message and "decodes (zlib) to more than its 16 bytes" in read.message
    assert read.peak_rss_mb < PEAK_MB

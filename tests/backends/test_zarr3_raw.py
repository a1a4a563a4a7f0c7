"""Zarr v3 raw-chunk reads: the same bits as zarr-python, fallbacks for other codecs, damage caught.

varstore reads an array's single uncompressed chunk file straight into the
destination (RawExtent) and checks its crc32c; anything else goes through
zarr-python. These tests pin both paths, the chunk key encodings (the "v2"
`<array>/0.0` varstore writes and the default `<array>/c/0/0` of earlier
releases), the parallel metadata lookup and the parallel files read-ahead.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import varstore
from varstore import dtypes
from varstore.backends.zarr3.reader import METADATA_THREADS, PARALLEL_METADATA_ARRAYS, Zarr3Reader
from varstore.backends.zarr3.store import chunk_file
from varstore import restore, save
from varstore.checkpoint import open_varstore
from varstore.errors import CheckpointError, ChecksumError, CorruptCheckpointError
from varstore.storage.local import LocalFilesReadAhead

BF16 = dtypes.as_dtype("bfloat16")
VALUES: dict[str, np.ndarray] = {
    "dense/kernel": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
    "dense/bias": np.linspace(-1, 1, 6).astype(np.float32),
    "emb/bf16": (np.arange(12, dtype=np.float32).reshape(3, 4) / 3).astype(BF16),
    "spectra/c64": (np.arange(5) + 1j * np.arange(5)[::-1]).astype(np.complex64),
    "spectra/c128": np.array([[1 - 2j, 3.5 + 0.25j]], np.complex128),
    "mask": np.array([[True, False, True]], np.bool_),
    "ints/i8": np.array([-128, 0, 127], np.int8),
    "ints/u64": np.array([2**64 - 1, 0, 12345], np.uint64),
    "half": np.array([1.5, -2.25, 65504.0], np.float16),
    "global_step": np.array(1234, np.int64),
    "scale": np.array(0.125, np.float64),
    "empty": np.zeros((0, 3), np.float32),
    "cube": np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4),
}


def _save(tmp_path: Path, values: dict[str, np.ndarray] | None = None) -> Path:
    path = tmp_path / "model.zarr"
    save(path, VALUES if values is None else values, pack_threshold_bytes=0)
    return path


def _bits(value: np.ndarray) -> bytes:
    return np.ascontiguousarray(value).tobytes()


def test_every_dtype_reads_the_same_bits_as_zarr_python_through_the_raw_chunk(tmp_path: Path) -> None:
    path = _save(tmp_path)
    group = zarr.open_group(str(path), mode="r")
    with open_varstore(path) as reader:
        for name, value in VALUES.items():
            got = reader[name]
            assert got.dtype == value.dtype and got.shape == value.shape, name
            assert _bits(got) == _bits(value), name
            assert _bits(group[name][...]) == _bits(value), name  # zarr-python agrees, bit for bit
            extent = reader.record_extent(reader.record(name))
            if value.size == 0:
                assert extent is None and not any(p.name != "zarr.json" for p in (path / name).iterdir())
                continue
            assert extent is not None, name  # the raw path, not zarr-python
            assert extent.file == chunk_file(path / name, value.ndim) == path / name / (".".join("0" * value.ndim) or "0")
            assert sorted(p.name for p in (path / name).iterdir()) == sorted([extent.file.name, "zarr.json"])
    loaded = varstore.load(path)
    assert {name: _bits(v) for name, v in loaded.items()} == {name: _bits(v) for name, v in VALUES.items()}


def test_a_big_endian_value_is_stored_little_endian_and_reads_back_equal(tmp_path: Path) -> None:
    value = np.arange(6, dtype=">f4").reshape(2, 3) * 1.5
    path = _save(tmp_path, {"be": value})
    meta = json.loads((path / "be/zarr.json").read_text())
    assert meta["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    assert (path / "be/0.0").read_bytes() == value.astype("<f4").tobytes()
    with open_varstore(path) as reader:
        np.testing.assert_array_equal(reader["be"], value)


def _rewrite_with_zarr(path: Path, name: str, **options: Any) -> None:
    """Replaces array `name` by one zarr-python writes with `options` (same values and attributes)."""
    array = zarr.open_array(str(path / name), mode="r")
    data, attrs = array[...], dict(array.attrs)
    shutil.rmtree(path / name)
    rewritten = zarr.create_array(str(path / name), shape=data.shape, dtype=data.dtype, attributes=attrs,
                                  **options)
    rewritten[...] = data


@pytest.mark.parametrize("options", [
    {"chunks": (4, 6), "compressors": zarr.codecs.GzipCodec(level=5)},
    {"chunks": (2, 3), "compressors": None},
    {"chunks": (4, 6), "compressors": None, "serializer": zarr.codecs.BytesCodec(endian="big")},
], ids=["gzip", "four-chunks", "big-endian-codec"])
def test_other_codecs_and_grids_fall_back_to_zarr_python(tmp_path: Path, options: dict[str, Any]) -> None:
    path = _save(tmp_path)
    _rewrite_with_zarr(path, "dense/kernel", **options)
    with open_varstore(path) as reader:
        assert reader.record_extent(reader.record("dense/kernel")) is None  # not a single raw chunk
        np.testing.assert_array_equal(reader["dense/kernel"], VALUES["dense/kernel"])
        reader.verify()  # the checksum still holds on what zarr-python decoded
    out = np.zeros((4, 6), np.float32)
    restore(path, {"dense/kernel": out}, strict=False)
    np.testing.assert_array_equal(out, VALUES["dense/kernel"])


def test_checkpoints_of_earlier_releases_with_c_0_0_chunks_still_read_raw(tmp_path: Path) -> None:
    path = _save(tmp_path)
    for name, value in VALUES.items():  # back to the default encoding: <array>/c/0/0, <array>/c for scalars
        if not value.size:
            continue
        meta_file = path / name / "zarr.json"
        meta = json.loads(meta_file.read_text())
        meta["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "/"}}
        meta_file.write_text(json.dumps(meta))
        old = path.joinpath(name, "c", *(["0"] * value.ndim))
        old.parent.mkdir(parents=True, exist_ok=True)
        chunk_file(path / name, value.ndim).rename(old)
    group = zarr.open_group(str(path), mode="r")
    with open_varstore(path) as reader:
        extent = reader.record_extent(reader.record("dense/kernel"))
        assert extent is not None and extent.file == path / "dense/kernel/c/0/0"
        for name, value in VALUES.items():
            assert _bits(reader[name]) == _bits(value) == _bits(group[name][...]), name
    assert _bits(varstore.load(path)["cube"]) == _bits(VALUES["cube"])


# ------------------------------------------------------------ damage is caught on the raw path
def test_a_flipped_byte_in_a_chunk_is_caught_naming_the_variable_and_checkpoint(tmp_path: Path) -> None:
    path = _save(tmp_path)
    chunk = path / "dense/kernel/0.0"
    data = bytearray(chunk.read_bytes())
    data[13] ^= 0x04
    chunk.write_bytes(bytes(data))
    with open_varstore(path) as reader, pytest.raises(ChecksumError, match=r"'dense/kernel' in '.*model\.zarr'"):
        reader["dense/kernel"]
    with pytest.raises(ChecksumError, match="'dense/kernel'"):
        varstore.load(path)
    target = {"dense/kernel": np.full((4, 6), 9.0, np.float32)}
    with pytest.raises(ChecksumError, match="'dense/kernel'"):
        restore(path, target, strict=False)


def test_a_truncated_chunk_is_caught_before_reading_naming_the_variable_and_file(tmp_path: Path) -> None:
    path = _save(tmp_path)
    chunk = path / "dense/kernel/0.0"
    chunk.write_bytes(chunk.read_bytes()[:50])
    with open_varstore(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*dense/kernel/0\.0.*50 bytes"):
            reader["dense/kernel"]
        np.testing.assert_array_equal(reader["dense/bias"], VALUES["dense/bias"])  # the others still read
    with pytest.raises(CorruptCheckpointError, match="'dense/kernel'"):
        varstore.load(path)


def test_a_missing_chunk_is_caught_naming_the_variable_and_file(tmp_path: Path) -> None:
    path = _save(tmp_path)
    (path / "dense/kernel/0.0").unlink()
    with open_varstore(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*dense/kernel/0\.0.*missing"):
            reader["dense/kernel"]
    with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*missing"):
        varstore.load(path)


def test_swapped_chunk_files_of_the_same_size_fail_their_checksums(tmp_path: Path) -> None:
    path = _save(tmp_path, {"a": np.arange(8, dtype=np.float32), "b": np.arange(8, dtype=np.float32) + 1})
    a, b = path / "a/0", path / "b/0"
    a.rename(path / "swap")
    b.rename(a)
    (path / "swap").rename(b)
    with open_varstore(path) as reader:
        with pytest.raises(ChecksumError, match=r"'a' in '.*model\.zarr'"):
            reader["a"]
        with pytest.raises(ChecksumError, match=r"'b' in '.*model\.zarr'"):
            reader["b"]
    before = {"a": np.zeros(8, np.float32), "b": np.zeros(8, np.float32)}
    with pytest.raises(ChecksumError):
        restore(path, before)


def test_a_chunk_file_symlinked_out_of_the_checkpoint_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path)
    outside = tmp_path / "secret.bin"
    outside.write_bytes(np.zeros(24, np.float32).tobytes())
    chunk = path / "dense/kernel/0.0"
    chunk.unlink()
    chunk.symlink_to(outside)
    with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*outside.*secret\.bin"):
        varstore.load(path)
    with open_varstore(path) as reader:
        names = reader.keys()
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*outside"):
            for name in names:  # a loop in key order: the read-ahead never lets it through
                reader[name]


# ------------------------------------------------------------ metadata of many arrays, read in parallel
@pytest.mark.parametrize("cached_s", [0.0, 1.0], ids=["threads after the first arrays", "serially"])
def test_raw_extents_equal_raw_extent_and_leave_out_damaged_metadata(
        tmp_path: Path, cached_s: float, monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.backends.zarr3 import reader as zarr_reader

    monkeypatch.setattr(zarr_reader, "CACHED_METADATA_S", cached_s)  # 0: the first arrays never count as cached
    values = {f"layer_{i:02d}/w": np.full((3, 2), i, np.float32) for i in range(PARALLEL_METADATA_ARRAYS + 4)}
    path = _save(tmp_path, values)
    late = f"layer_{PARALLEL_METADATA_ARRAYS + 2:02d}/w"  # after the serial head
    (path / "layer_05/w/zarr.json").write_text("{not json")
    (path / late / "zarr.json").write_text("[]")
    reader = Zarr3Reader(path)
    requests = [(name, np.dtype(np.float32), (3, 2)) for name in values]
    found = reader.raw_extents(requests)
    assert set(found) == set(values) - {"layer_05/w", late}
    assert list(found) == [name for name in values if name in found]  # in the order asked
    for name in found:
        assert found[name] == reader.raw_extent(name, np.dtype(np.float32), (3, 2))
        assert found[name].file == path / name / "0.0" and found[name].nbytes == 24
    assert not any(t.name.startswith("varstore-zarr-meta") for t in threading.enumerate())
    with pytest.raises(CorruptCheckpointError, match=r"'layer_05/w'.*truncated or damaged"):
        varstore.load(path)
    with open_varstore(path) as reader:
        reader.locate(reader.keys())
        np.testing.assert_array_equal(reader["layer_04/w"], values["layer_04/w"])
        with pytest.raises(CorruptCheckpointError, match=r"'layer_05/w'"):
            reader["layer_05/w"]
    assert METADATA_THREADS > 1


def test_raw_extents_read_metadata_in_the_calling_thread_on_a_tmpfs_or_when_cached(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from concurrent import futures

    from varstore.backends.zarr3 import reader as zarr_reader

    values = {f"layer_{i:02d}/w": np.full((3, 2), i, np.float32) for i in range(PARALLEL_METADATA_ARRAYS + 4)}
    path = _save(tmp_path, values)
    requests = [(name, np.dtype(np.float32), (3, 2)) for name in values]
    pools: list[int] = []
    real_pool = futures.ThreadPoolExecutor

    def counting_pool(*args: Any, **kwargs: Any) -> Any:
        pools.append(1)
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(futures, "ThreadPoolExecutor", counting_pool)
    for memory, cached_s, threads in ((True, 0.0, 0), (False, 0.0, 1), (False, 1.0, 0)):
        monkeypatch.setattr(zarr_reader, "path_in_memory", lambda _path, memory=memory: memory)
        monkeypatch.setattr(zarr_reader, "CACHED_METADATA_S", cached_s)  # 1 s an array: always "cached"
        pools.clear()
        found = Zarr3Reader(path).raw_extents(requests)
        assert pools == [1] * threads
        assert {name: (extent.file, extent.nbytes) for name, extent in found.items() if extent is not None} == \
            {name: (path / name / "0.0", 24) for name in values}


def test_files_read_ahead_counts_only_values_and_stops_all_its_threads(tmp_path: Path) -> None:
    files = []
    for i in range(6):
        (tmp_path / f"{i}.json").write_text("{}")
        (tmp_path / f"{i}.bin").write_bytes(bytes(100))
        files += [(str(tmp_path / f"{i}.json"), 0), (str(tmp_path / f"{i}.bin"), 100)]
    files.append((str(tmp_path / "missing.bin"), 100))  # skipped, not an error
    ahead = LocalFilesReadAhead(files, window=150, threads=3)
    assert sum(t.name == "varstore-readahead" for t in threading.enumerate()) >= 1
    for _ in range(7):
        ahead.done(0)
    ahead.stop()
    assert ahead._consumed == 700 and ahead._next == len(files)  # noqa: SLF001 - companions count nothing
    assert not any(t.name == "varstore-readahead" for t in threading.enumerate())


# ------------------------------------------------------------ zarr.json documents written by helper threads
@pytest.mark.parametrize("in_memory", [True, False])
def test_zarr_json_documents_are_written_at_once_on_a_tmpfs_and_by_helpers_on_a_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_memory: bool) -> None:
    from varstore.backends.zarr3 import store

    real = store.Zarr3Writer._write_through_storage  # noqa: SLF001 - the one place a helper thread writes
    writers: list[str] = []

    def recording(self: store.Zarr3Writer, path: Path, text: str) -> None:
        writers.append(threading.current_thread().name)
        real(self, path, text)

    monkeypatch.setattr(store.Zarr3Writer, "_write_through_storage", recording)
    monkeypatch.setattr(store, "path_in_memory", lambda _path: in_memory)
    path = _save(tmp_path)
    assert len(writers) >= len(VALUES)  # every array's zarr.json (and its groups')
    # on a tmpfs each document is written at once by the thread that makes it (the caller, or the helper
    # creating the arrays ahead of the caller's writes: metadata_ahead.py); on a disk by the JSON helpers
    by_helpers = {name.startswith("varstore-zarr-json") for name in writers}
    assert by_helpers == ({False} if in_memory else {True})
    loaded = varstore.load(path)
    for name, value in VALUES.items():
        np.testing.assert_array_equal(loaded[name], value)
    assert json.loads((path / "dense/kernel/zarr.json").read_text())["shape"] == [4, 6]


def test_a_zarr_json_that_cannot_be_written_fails_the_save_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.backends.zarr3 import store

    real = store.Zarr3Writer._write_through_storage  # noqa: SLF001 - the one place a helper thread writes

    def disk_full_for_bias(self: store.Zarr3Writer, path: Path, text: str) -> None:
        if path.parent.name == "bias":
            raise OSError(28, "No space left on device", str(path))
        real(self, path, text)

    monkeypatch.setattr(store.Zarr3Writer, "_write_through_storage", disk_full_for_bias)
    path = tmp_path / "model.zarr"
    with pytest.raises(CheckpointError, match=r"model\.zarr.*No space left on device.*bias/zarr\.json"):
        save(path, VALUES, pack_threshold_bytes=0)
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no temporary left behind
    assert not any(t.name.startswith("varstore-zarr-json") for t in threading.enumerate())
    monkeypatch.setattr(store.Zarr3Writer, "_write_through_storage", real)
    save(path, VALUES, pack_threshold_bytes=0)
    assert sorted(p.name for p in (path / "dense/bias").iterdir()) == ["0", "zarr.json"]
    assert json.loads((path / "dense/bias/zarr.json").read_text())["shape"] == [6]


def test_opening_a_zarr_checkpoint_reads_each_zarr_json_once(tmp_path: Path, monkeypatch: Any) -> None:
    path = save(tmp_path / "ck.zarr", {f"s/v{i}": np.full(3, i, np.float32) for i in range(5)}, layout="packed")
    read: list[str] = []
    document = Zarr3Reader._document

    def counted(self: Zarr3Reader, array: str) -> dict[str, Any]:
        read.append(array)
        return document(self, array)

    monkeypatch.setattr(Zarr3Reader, "_document", counted)
    with open_varstore(path) as reader:
        assert reader.info("s/v3").shape == (3,)
        assert read == ["", "_varstore/manifest"]  # the root, then the manifest's metadata: once each
        assert reader["s/v3"].tolist() == [3.0] * 3
    assert read == ["", "_varstore/manifest", "_varstore/packed"]

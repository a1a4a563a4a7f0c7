"""VarstoreReader.verify (checkpoint/read/verify.py): every value read into one reused buffer, read ahead, checked.

Pins what `varstore verify` relies on: a clean checkpoint of every dtype and
layout passes; the first damaged variable in key order is named with the
file; a truncated chunk is caught before reading; the buffer is reused
(memory of the largest variable, not of the model); the read-ahead threads
end; and the reader reads exact values afterwards.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import flip_packed, rewrite_zarr_manifest
from varstore import dtypes
from varstore import save
from varstore.checkpoint import open_varstore
from varstore.checkpoint.format.manifest import Record
from varstore.checkpoint.read.verify import scratch_view
from varstore.errors import ChecksumError, CorruptCheckpointError


BF16 = dtypes.as_dtype("bfloat16")
VALUES: dict[str, np.ndarray] = {
    "a/kernel": np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 3,
    "a/bias": np.linspace(-1, 1, 32).astype(np.float32),
    "b/bf16": (np.arange(12, dtype=np.float32).reshape(3, 4) / 4).astype(BF16),
    "b/mask": np.array([[True, False, True]]),
    "b/c64": (np.arange(5) - 2j).astype(np.complex64),
    "c/empty": np.zeros((0, 4), np.float64),
    "c/step": np.array(41, np.int64),
    "d/big": np.arange(256 * 256, dtype=np.float64).reshape(256, 256),
}


def _save(tmp_path: Path, suffix: str, pack: int = 0, values: dict[str, np.ndarray] | None = None) -> Path:
    path = tmp_path / f"model{suffix}"
    save(path, VALUES if values is None else values, layout="packed" if pack else "per-variable",
         pack_threshold_bytes=pack)
    return path


def _flip(path: Path, name: str, at: int = 3) -> None:
    """Flips one byte `at` bytes into variable `name`'s stored value."""
    with open_varstore(path) as reader:
        extent = reader.record_extent(reader.record(name))
    assert extent is not None
    with open(extent.file, "r+b") as handle:
        handle.seek(extent.offset + at)
        byte = handle.read(1)
        handle.seek(extent.offset + at)
        handle.write(bytes([byte[0] ^ 0x40]))


def _readahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "varstore-readahead"]


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("pack", [0, 1 << 10])
def test_a_clean_checkpoint_of_every_dtype_verifies_and_reads_exact_values_afterwards(
        tmp_path: Path, suffix: str, pack: int) -> None:
    path = _save(tmp_path, suffix, pack)
    with open_varstore(path) as reader:
        reader.verify()
        assert reader.session is None
        assert _readahead_threads() == []
        for name, value in VALUES.items():
            got = reader[name]
            assert got.dtype == value.dtype and got.shape == value.shape
            assert got.tobytes() == value.tobytes()


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_the_first_damaged_variable_in_key_order_is_named_with_the_file(tmp_path: Path, suffix: str) -> None:
    path = _save(tmp_path, suffix)
    _flip(path, "d/big", at=1000)
    _flip(path, "a/kernel", at=8)
    with open_varstore(path) as reader:
        first_bad = min(["d/big", "a/kernel"], key=reader.keys().index)
        with pytest.raises(ChecksumError, match=f"variable '{first_bad}' in '{path}'"):
            reader.verify()
        assert reader.session is None
    assert _readahead_threads() == []


def test_a_damaged_value_between_a_large_and_a_small_one_is_caught_in_a_reused_buffer(tmp_path: Path) -> None:
    # the buffer is sized for a large value first; a smaller damaged value after it must still be caught
    values = {"a_large": np.arange(4096, dtype=np.float64), "b_small": np.arange(16, dtype=np.float32),
              "c_small": np.arange(16, dtype=np.int32)}
    path = _save(tmp_path, ".zarr", values=values)
    _flip(path, "c_small", at=4)
    with open_varstore(path) as reader:
        with pytest.raises(ChecksumError, match="variable 'c_small'"):
            reader.verify()


def test_a_truncated_zarr_chunk_is_named_before_reading(tmp_path: Path) -> None:
    path = _save(tmp_path, ".zarr")
    with open_varstore(path) as reader:
        extent = reader.record_extent(reader.record("a/kernel"))
    assert extent is not None
    extent.file.write_bytes(extent.file.read_bytes()[:100])
    with open_varstore(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"variable 'a/kernel'.*(truncated|damaged)"):
            reader.verify()


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_verify_reads_into_one_buffer_with_the_storage_reading_ahead(
        tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the largest variable first in key order: one buffer serves all 24
    values = {f"layer_{i:02d}/w": np.full((64, 64 - i), i, np.float32) for i in range(24)}
    path = _save(tmp_path, suffix, values=values)
    with open_varstore(path) as reader:
        seen: list[tuple[int, tuple[int, ...], float]] = []
        planned: list[list[str]] = []
        fill, start = reader.fill, reader.start_read_ahead

        def spy_fill(record: Record, out: np.ndarray, verify: bool) -> None:
            fill(record, out, verify)
            seen.append((out.__array_interface__["data"][0], out.shape, float(out.flat[-1])))

        monkeypatch.setattr(reader, "fill", spy_fill)
        monkeypatch.setattr(reader, "start_read_ahead",
                            lambda names, window: (planned.append(list(names)), start(names, window))[1])
        reader.verify()
    assert planned == [list(values)]
    assert [(shape, last) for _, shape, last in seen] == [((64, 64 - i), float(i)) for i in range(24)]
    assert len({address for address, _, _ in seen}) == 1  # not one new array per variable


PACKED = 1 << 10  # a/bias, b/*, c/* packed; a/kernel (8 KiB) and d/big (512 KiB) their own arrays


def _spy_fills(reader: object, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    fill = reader.fill  # type: ignore[attr-defined]

    def spy_fill(record: Record, out: np.ndarray, verify: bool) -> None:
        names.append(record.name)
        fill(record, out, verify)

    monkeypatch.setattr(reader, "fill", spy_fill)
    return names


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_packed_variables_are_checked_on_the_blob_and_only_own_arrays_are_read(
        tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    values = {**VALUES, **{f"slots/{i:04d}": np.full(16, i, np.float32) for i in range(300)}}
    path = _save(tmp_path, suffix, PACKED, values)
    with open_varstore(path) as reader:
        own = [name for name in reader.keys() if reader.record(name).path is not None]
        assert sorted(own) == ["a/kernel", "d/big"]
        filled = _spy_fills(reader, monkeypatch)
        reader.verify()
        assert filled == own and reader.session is None and _readahead_threads() == []


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("packed_name, own_name", [("c/step", "a/kernel"), ("b/c64", "d/big")])
def test_the_first_damaged_in_key_order_is_named_across_packed_and_own_values(
        tmp_path: Path, suffix: str, packed_name: str, own_name: str) -> None:
    path = _save(tmp_path, suffix, PACKED)
    flip_packed(path, packed_name)
    _flip(path, own_name, at=40)
    with open_varstore(path) as reader:
        assert reader.record(packed_name).path is None and reader.record(own_name).path is not None
        first_bad = min([packed_name, own_name], key=reader.keys().index)
        with pytest.raises(ChecksumError, match=rf"variable '{first_bad}' in '.*model{suffix}'"):
            reader.verify()


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_packed_variables_without_checksums_are_still_read(
        tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / f"model{suffix}"
    save(path, VALUES, layout="packed", pack_threshold_bytes=PACKED, checksum=False)
    with open_varstore(path) as reader:
        filled = _spy_fills(reader, monkeypatch)
        reader.verify()
        assert filled == reader.keys()


def test_a_packed_variable_outside_the_blob_is_named(tmp_path: Path) -> None:
    path = _save(tmp_path, ".zarr", PACKED)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["offset"][columns["name"].index("c/step")] = 1 << 20

    rewrite_zarr_manifest(path, edit)
    with open_varstore(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"variable 'c/step' in '.*model.zarr' lies outside"):
            reader.verify()


def _record(shape: tuple[int, ...], dtype: str) -> Record:
    numpy_dtype = dtypes.as_dtype(dtype)
    return Record(name="v", dtype=dtype, shape=shape, trainable=True, collections=(),
                  nbytes=int(np.prod(shape, dtype=np.int64)) * numpy_dtype.itemsize, path="v", checksum=0)


def test_scratch_view_reuses_the_buffer_grows_it_and_gives_the_record_shape_and_dtype() -> None:
    buffer, out = scratch_view(None, _record((4, 8), "float32"))
    assert buffer is not None and buffer.nbytes == 128
    assert out.shape == (4, 8) and out.dtype == np.float32 and out.flags.c_contiguous and out.flags.writeable
    out[...] = 2.5
    assert np.shares_memory(out, buffer)
    same, small = scratch_view(buffer, _record((3,), "bfloat16"))
    assert same is buffer and small.dtype == BF16 and small.shape == (3,)
    assert np.shares_memory(small, buffer)
    scalar_buffer, scalar = scratch_view(buffer, _record((), "int64"))
    assert scalar_buffer is buffer and scalar.shape == () and scalar.dtype == np.int64
    grown, big = scratch_view(buffer, _record((100,), "complex128"))
    assert grown is not buffer and grown is not None and grown.nbytes == 1600 and big.shape == (100,)
    kept, empty = scratch_view(grown, _record((0, 3), "float32"))
    assert kept is grown and empty.shape == (0, 3) and not np.shares_memory(empty, grown)

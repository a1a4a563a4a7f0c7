"""The bulk read engine (checkpoint/read/read_engine.py): the batch path for many small packed variables keeps
every rule of the slow path; validation comes before any write; its threads end with the call."""

from __future__ import annotations

from pathlib import Path

import threading

import numpy as np
import pytest

from varstore import restore, save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.read.read_engine import read_into_targets
from varstore.errors import ChecksumError, ShapeMismatchError
from varstore.store.scopes import VariableStore


def _small_store(values: np.ndarray, extra_dtypes: bool = True) -> VariableStore:
    store = VariableStore()
    for i, row in enumerate(values):
        store.get_variable(f"small/v{i:03d}", shape=row.shape, dtype=row.dtype).assign(row)
    if extra_dtypes:
        store.get_variable("odd/i8", shape=(5,), dtype=np.int8).assign(np.arange(5, dtype=np.int8))
        store.get_variable("odd/scalar", shape=(), dtype=np.float64).assign(3.25)
        store.get_variable("odd/text", shape=(2,), dtype="U3", initializer=np.array(["", ""], "U3")).assign(np.array(["ab", "xyz"]))
        store.get_variable("odd/empty", shape=(0, 4), dtype=np.float32).assign(np.zeros((0, 4), np.float32))
    return store


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_batch_round_trip_of_many_small_variables(tmp_path: Path, suffix: str) -> None:
    values = np.random.default_rng(1).standard_normal((300, 7)).astype(np.float32)
    path = save(tmp_path / f"m{suffix}", _small_store(values), layout="packed")
    target = _small_store(np.zeros_like(values))
    pointer = target.get_variable_by_name("small/v123").host_view().ctypes.data
    result = restore(path, target)
    assert len(result.restored) == 304 and result.missing == [] and result.unexpected == []
    np.testing.assert_array_equal(target.get_variable_by_name("small/v123").numpy(), values[123])
    assert target.get_variable_by_name("small/v123").host_view().ctypes.data == pointer
    assert target.get_variable_by_name("odd/text").numpy().tolist() == ["ab", "xyz"]
    assert target.get_variable_by_name("odd/scalar").numpy() == 3.25
    assert target.get_variable_by_name("odd/i8").numpy().tolist() == [0, 1, 2, 3, 4]
    with open_checkpoint(path) as reader:
        np.testing.assert_array_equal(reader["small/v299"], values[299])


def test_batch_restore_shape_mismatch_names_variable_and_changes_nothing(tmp_path: Path) -> None:
    values = np.ones((20, 4), np.float32)
    path = save(tmp_path / "m.h5", _small_store(values, extra_dtypes=False), layout="packed")
    target = VariableStore()
    for i in range(20):
        shape = (5,) if i == 13 else (4,)
        target.get_variable(f"small/v{i:03d}", shape=shape, dtype=np.float32, initializer=np.zeros)
    target.initialize()
    with pytest.raises(ShapeMismatchError, match="small/v013"):
        restore(path, target)
    assert all(v.numpy().sum() == 0 for v in target.variables())


def test_batch_restore_checksum_error_names_variable_and_changes_nothing(tmp_path: Path) -> None:
    values = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = save(tmp_path / "m.h5", _small_store(values, extra_dtypes=False), layout="packed")
    with open_checkpoint(path) as reader:
        packed_offset = reader._packed["file_offset"]
        offset = packed_offset + reader.record("small/v006").offset
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    target = _small_store(np.zeros_like(values), extra_dtypes=False)
    with pytest.raises(ChecksumError, match="small/v006"):
        restore(path, target)
    assert all(v.numpy().sum() == 0 for v in target.variables())


def test_batch_restore_casts_float32_into_float64_variables(tmp_path: Path) -> None:
    values = np.full((6, 3), 0.5, np.float32)
    path = save(tmp_path / "m.h5", _small_store(values, extra_dtypes=False), layout="packed")
    target = _small_store(np.zeros((6, 3), np.float64), extra_dtypes=False)
    restore(path, target)
    assert target.get_variable_by_name("small/v004").numpy().tolist() == [0.5, 0.5, 0.5]
    assert target.get_variable_by_name("small/v004").dtype == np.float64


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("varstore-crc", "varstore-readahead"))]


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_validation_runs_for_every_target_before_any_is_written(tmp_path: Path, suffix: str) -> None:
    path = save(tmp_path / f"m{suffix}", {"a": np.full(4, 1.0, np.float32), "b": np.full(3, 2.0, np.float32)},
                pack_threshold_bytes=0)
    targets = {"a": np.zeros(4, np.float32), "b": np.zeros(3, np.float32)}
    seen: list[tuple[str, tuple[int, ...]]] = []

    def refuse_b(name: str, obj: object, source: object) -> None:
        seen.append((name, source.shape))  # type: ignore[attr-defined]
        if name == "b":
            raise ShapeMismatchError("b refused")

    with open_checkpoint(path) as reader:
        with pytest.raises(ShapeMismatchError, match="b refused"):
            read_into_targets(reader, [("a", "a", targets["a"]), ("b", "b", targets["b"])],
                              verify=True, lazy=False, validate=refuse_b)
        assert seen == [("a", (4,)), ("b", (3,))]
        assert targets["a"].tolist() == [0.0] * 4  # nothing was written
        assert reader.session is None and _engine_threads() == []
        read_into_targets(reader, [("a", "x", targets["a"])], verify=True, lazy=False,
                          validate=lambda *_: None)
        assert targets["a"].tolist() == [1.0] * 4


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_large_value_checked_in_the_helper_thread_raises_naming_it(tmp_path: Path, suffix: str) -> None:
    big = np.arange(1 << 19, dtype=np.float32)  # 2 MiB: checksummed off the reading thread
    path = save(tmp_path / f"m{suffix}", {"enc/big": big, "enc/small": np.ones(3, np.float32)})
    with open_checkpoint(path) as reader:
        record = reader.record("enc/big")
        extent = reader._extent_of(record.path, np.dtype(np.float32), (1 << 19,))  # noqa: SLF001 - find its bytes
    raw = bytearray(extent.file.read_bytes())
    raw[extent.offset + 4096] ^= 0x10
    extent.file.write_bytes(bytes(raw))
    target = {"enc/big": np.zeros_like(big), "enc/small": np.zeros(3, np.float32)}
    with pytest.raises(ChecksumError, match=rf"'enc/big' in '.*m{suffix}' is corrupt"):
        restore(path, target)
    assert _engine_threads() == []


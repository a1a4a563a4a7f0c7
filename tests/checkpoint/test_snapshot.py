"""Async save: the call returns after a consistent snapshot; snapshot memory is bounded."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore import CheckpointManager, SaveHandle, restore, save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.write import snapshot as snapshot_module
from varstore.errors import ShapeMismatchError
from varstore.store.scopes import VariableStore


def _store(count: int, size: int) -> VariableStore:
    store = VariableStore()
    for i in range(count):
        store.get_variable(f"layer_{i:02d}/w", shape=(size,), dtype=np.float32,
                           initializer=lambda shape, dtype=None, i=i: np.full(shape, float(i), np.float32))
    store.initialize()
    return store


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("limit", [None, 0, 3 * 4096 * 4])
def test_mutating_right_after_async_save_keeps_the_snapshot(tmp_path: Path, suffix: str,
                                                            limit: int | None) -> None:
    store = _store(8, 4096)  # 16 KiB each: own arrays, not packed
    small = store.get_variable("small/b", shape=(3,), dtype=np.float32, initializer=np.ones)
    expected = {v.name: v.numpy() for v in store.variables()}
    handle = save(tmp_path / f"m{suffix}", store, step=3, blocking=False, max_snapshot_bytes=limit)
    assert isinstance(handle, SaveHandle)
    for variable in store.variables():
        variable.assign_add(np.full(variable.shape, 100.0, np.float32))  # training step right away
    small.assign([7.0, 8.0, 9.0])
    assert handle.wait() == tmp_path / f"m{suffix}" and handle.done() and handle.exception() is None
    target = _store(8, 4096)
    target.get_variable("small/b", shape=(3,), dtype=np.float32, initializer=np.zeros)
    restore(handle.path, target, strict=True)
    for variable in target.variables():
        np.testing.assert_array_equal(variable.numpy(), expected[variable.name])
    with open_checkpoint(handle.path) as reader:
        assert reader.step == 3 and reader["layer_05/w"][0] == 5.0


def test_snapshot_memory_stays_under_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer starts only once the caller has copied as much as it may
    # (the bound, or everything without one), so the peak does not depend on
    # how fast the writer thread drains the copies.
    peaks: list[int] = []
    filled = threading.Event()
    fill_to = [0]
    original = snapshot_module._SnapshotBudget
    original_publish = snapshot_module.publish

    class Recording(original):  # type: ignore[misc, valid-type]
        def acquire(self, nbytes: int) -> bool:
            admitted: bool = super().acquire(nbytes)
            if self.used >= fill_to[0]:
                filled.set()
            return admitted

        def fail(self) -> None:
            peaks.append(self.peak)
            super().fail()

    def gated_publish(*args: Any, **kwargs: Any) -> Any:
        assert filled.wait(30), "the caller never filled its snapshot budget"
        return original_publish(*args, **kwargs)

    monkeypatch.setattr(snapshot_module, "_SnapshotBudget", Recording)
    monkeypatch.setattr(snapshot_module, "publish", gated_publish)
    store = _store(10, 4096)  # 10 x 16 KiB
    for limit, expected_peak in ((3 * 16384, 3 * 16384), (None, 10 * 16384)):
        filled.clear()
        fill_to[0] = expected_peak
        path = tmp_path / f"m{len(peaks)}.h5"
        save(path, store, blocking=False, max_snapshot_bytes=limit).wait()
        with open_checkpoint(path) as reader:
            assert reader["layer_09/w"][0] == 9.0
    assert peaks == [3 * 16384, 10 * 16384]


def test_async_errors_come_from_wait(tmp_path: Path) -> None:
    bad = {"w": np.ones(3)}
    from varstore.checkpoint.format.entry import SaveEntry
    entries = [SaveEntry("w", (4,), np.dtype("float64"), lambda: bad["w"])]
    handle = snapshot_module.save_async(tmp_path / "m.h5", entries)
    with pytest.raises(ShapeMismatchError, match="'w'"):
        handle.wait()
    assert isinstance(handle.exception(), ShapeMismatchError)
    assert not (tmp_path / "m.h5").exists()


def test_manager_async_save_updates_latest_and_retention(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, max_to_keep=2)
    store = _store(2, 8)
    handles = []
    for step in (1, 2, 3):
        handles.append(manager.save(store, step=step, blocking=False))
        store.variables()[0].assign(np.full(8, 50.0 + step, np.float32))
    paths = [handle.wait() for handle in handles]
    assert [p.name for p in paths] == ["ckpt-1.h5", "ckpt-2.h5", "ckpt-3.h5"]
    assert manager.latest == tmp_path / "ckpt-3.h5"
    assert [p.name for p in manager.checkpoints] == ["ckpt-2.h5", "ckpt-3.h5"]
    with open_checkpoint(manager.latest) as reader:
        assert reader["layer_00/w"][0] == 52.0  # the value at the time step 3 was saved


@pytest.mark.parametrize("limit", [0, 1000, 64 * 1024])
def test_bounded_async_save_of_mixed_small_and_large_variables(tmp_path: Path, limit: int) -> None:
    values = {}
    for i in range(40):
        values[f"s{i:02d}/bias"] = np.full(7 + i, float(i), np.float32)          # packed
        if i % 5 == 0:
            values[f"s{i:02d}/kernel"] = np.full((64, 100), -float(i), np.float32)  # own array
    arrays = {name: value.copy() for name, value in values.items()}
    handle = save(tmp_path / "m.h5", arrays, blocking=False, max_snapshot_bytes=limit)
    for array in arrays.values():
        array += 1000.0
    handle.wait()
    with open_checkpoint(handle.path) as reader:
        assert sorted(reader.keys()) == sorted(values)
        for name, value in values.items():
            np.testing.assert_array_equal(reader[name], value)

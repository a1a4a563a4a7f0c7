"""Checkpoint contract, part 2 (both formats): restore into stores, Variables and arrays; lazy reads."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from varstore import CheckpointManager, restore, save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.read.reader import CheckpointValue
from varstore.errors import DtypeMismatchError, RestoreError, ShapeMismatchError
from varstore.store.scopes import VariableStore


class CountingInitializer:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.calls += 1
        return np.full(shape, -1, dtype=dtype)


def _model(store: VariableStore, scope: str = "net") -> dict[str, object]:
    with store.variable_scope(scope):
        with store.variable_scope("conv1"):
            w = store.get_variable("weights", [5, 5, 3, 8], initializer=lambda s, d: np.arange(
                np.prod(s), dtype=d).reshape(s))
            b = store.get_variable("bias", [8], trainable=False, initializer=lambda s, d: np.ones(s, d))
        step = store.get_variable("step", [], dtype=np.int64, initializer=lambda s, d: np.array(42, d))
    return {"w": w, "b": b, "step": step}


def test_store_round_trip_keeps_trainable_and_collections(ckpt: Path) -> None:
    store = VariableStore()
    _model(store)
    save(ckpt, store, step=3)
    with open_checkpoint(ckpt) as reader:
        assert reader.keys() == ["net/conv1/weights", "net/conv1/bias", "net/step"]
        assert reader.info("net/conv1/bias").trainable is False
        assert reader.info("net/conv1/weights").collections == ("variables", "trainable_variables")
        assert reader.info("net/conv1/bias").collections == ("variables",)
        assert reader["net/step"] == 42 and reader["net/step"].dtype == np.int64


def test_restore_in_place_keeps_buffer_and_skips_initializers(ckpt: Path) -> None:
    source = VariableStore()
    _model(source)
    save(ckpt, source)
    target = VariableStore()
    counting = CountingInitializer()
    with target.variable_scope("net"):
        with target.variable_scope("conv1"):
            w = target.get_variable("weights", [5, 5, 3, 8], initializer=counting)
            target.get_variable("bias", [8], initializer=counting)
        target.get_variable("step", [], dtype=np.int64, initializer=counting)
    w.assign(np.zeros((5, 5, 3, 8), np.float32))
    pointer = w.host_view().ctypes.data
    calls_before = counting.calls
    result = restore(ckpt, target)
    assert result.restored == ["net/conv1/weights", "net/conv1/bias", "net/step"]
    assert w.host_view().ctypes.data == pointer
    np.testing.assert_array_equal(w.numpy(), np.arange(600, dtype=np.float32).reshape(5, 5, 3, 8))
    assert target.get_variable_by_name("net/step").numpy() == 42
    np.testing.assert_array_equal(target.get_variable_by_name("net/conv1/bias").numpy(), np.ones(8))
    assert counting.calls == calls_before == 0


def test_deferred_restore_for_variables_created_later(ckpt: Path) -> None:
    source = VariableStore()
    _model(source)
    save(ckpt, source)
    store = VariableStore()
    result = restore(ckpt, store)
    assert result.deferred == ["net/conv1/weights", "net/conv1/bias", "net/step"]
    counting = CountingInitializer()
    with store.variable_scope("net"), store.variable_scope("conv1"):
        w = store.get_variable("weights", [5, 5, 3, 8], initializer=counting)
    np.testing.assert_array_equal(w.numpy()[0, 0, 0], np.arange(8, dtype=np.float32))
    assert counting.calls == 0


def test_lazy_restore_reads_on_first_use(ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(ckpt, {"a": np.arange(6, dtype=np.float32)})
    reads: list[str] = []
    original = CheckpointValue.read_into
    monkeypatch.setattr(CheckpointValue, "read_into", lambda self, out: (reads.append(self.name),
                                                                         original(self, out))[1])
    store = VariableStore()
    a = store.get_variable("a", [6], initializer=CountingInitializer())
    a.initialize()
    restore(ckpt, store, lazy=True)
    assert reads == [] and a.is_restore_pending
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32))
    assert reads == ["a"]


def test_failed_restore_changes_nothing(ckpt: Path) -> None:
    save(ckpt, {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})
    store = VariableStore()
    a = store.get_variable("a", [3], initializer=lambda s, d: np.zeros(s, d))
    store.get_variable("b", [5], initializer=lambda s, d: np.zeros(s, d))
    with pytest.raises(ShapeMismatchError, match=r"'b'.*\(4,\).*\(5,\)"):
        restore(ckpt, store)
    np.testing.assert_array_equal(a.numpy(), np.zeros(3, np.float32))


def test_strict_by_default_lists_missing_and_keeps_unexpected_on_the_error(ckpt: Path) -> None:
    save(ckpt, {"a": np.ones(3), "old": np.ones(2)})
    store = VariableStore()
    store.get_variable("a", [3], dtype=np.float64, initializer=lambda s, d: np.zeros(s, d))
    store.get_variable("new", [2], dtype=np.float64, initializer=lambda s, d: np.zeros(s, d))
    with pytest.raises(RestoreError, match=r"1 variable\(s\) have no value in the checkpoint: \['new'\]; "
                                           r"the checkpoint also holds 1 value\(s\) no variable takes") as err:
        restore(ckpt, store)
    assert err.value.missing == ["new"] and err.value.unexpected == ["old"]
    assert store.get_variable_by_name("a").numpy().sum() == 0
    result = restore(ckpt, store, strict=False)
    assert (result.restored, result.missing, result.unexpected) == (["a"], ["new"], ["old"])
    assert store.get_variable_by_name("a").numpy().sum() == 3


def test_assignment_map_prefix_and_exact(ckpt: Path) -> None:
    save(ckpt, {"old_scope/w": np.full(2, 1.0), "old_scope/sub/b": np.full(2, 2.0), "x": np.full(2, 3.0),
                "other/z": np.full(2, 4.0)})
    target = {"new_scope/w": np.zeros(2), "new_scope/sub/b": np.zeros(2), "y": np.zeros(2),
              "other/z": np.zeros(2)}
    result = restore(ckpt, target, assignment_map={"old_scope/": "new_scope/", "x": "y"}, strict=True)
    assert sorted(result.restored) == ["new_scope/sub/b", "new_scope/w", "y"]
    assert [target[k][0] for k in ("new_scope/w", "new_scope/sub/b", "y", "other/z")] == [1.0, 2.0, 3.0, 0.0]


def test_dtype_cast_when_safe_else_error_naming_both(ckpt: Path) -> None:
    save(ckpt, {"h": np.array([1.5, 2.5], np.float16), "d": np.array([1.5, 2.5])})
    wide = {"h": np.zeros(2, np.float32)}
    restore(ckpt, wide, assignment_map={"h": "h"})
    np.testing.assert_array_equal(wide["h"], [1.5, 2.5])
    with pytest.raises(DtypeMismatchError, match="float64.*int32"):
        restore(ckpt, {"d": np.zeros(2, np.int32)}, assignment_map={"d": "d"})
    store = VariableStore()
    store.get_variable("d", [2], dtype=np.int32, initializer=lambda s, d: np.zeros(s, d))
    with pytest.raises(DtypeMismatchError, match="'d'.*float64.*int32"):
        restore(ckpt, store, assignment_map={"d": "d"})


def test_open_checkpoint_reads_only_one_variables_bytes(ckpt: Path) -> None:
    big = np.random.default_rng(0).random((1024, 1024))  # 8 MiB each
    save(ckpt, {"big1": big, "big2": big, "small": np.arange(100, dtype=np.float32)})

    def rchar() -> int:
        with open("/proc/self/io") as handle:
            return int(next(line for line in handle if line.startswith("rchar")).split()[1])

    before = rchar()
    with open_checkpoint(ckpt) as reader:
        np.testing.assert_array_equal(reader["small"], np.arange(100, dtype=np.float32))
        middle = rchar()
        np.testing.assert_array_equal(reader["big2"], big)
    after = rchar()
    assert middle - before < 256 * 1024
    assert 8 * 2**20 <= after - middle < 8 * 2**20 + 256 * 1024


@pytest.mark.gpu
def test_restore_onto_gpu_variable(ckpt: Path) -> None:
    save(ckpt, {"g": np.arange(4, dtype=np.float32)})
    store = VariableStore()
    g = store.get_variable("g", [4], device="gpu:0", initializer=lambda s, d: np.zeros(s, d))
    g.initialize()
    restore(ckpt, store)
    assert g.device == "gpu:0"
    np.testing.assert_array_equal(g.numpy(), np.arange(4, dtype=np.float32))


def _open_descriptors_of(path: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    targets = []
    for fd in fds.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            continue
    return [t for t in targets if t.startswith(str(path))]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_restore_closes_the_checkpoint_it_opened_unless_lazy_variables_still_read_from_it(
        tmp_path: Path, suffix: str) -> None:
    path = save(tmp_path / f"m.{suffix}", {"a": np.arange(6, dtype=np.float32), "b": np.ones(3)})
    gc.disable()  # closed by restore itself, not by the collector finding the reader later
    try:
        targets = {"a": np.zeros(6, np.float32), "b": np.zeros(3)}
        restore(path, targets)
        assert targets["a"].tolist() == [0, 1, 2, 3, 4, 5] and _open_descriptors_of(path) == []
        with pytest.raises(ShapeMismatchError, match="'a'"):
            restore(path, {"a": np.zeros(5, np.float32)})
        assert _open_descriptors_of(path) == []  # also when the restore fails

        store = VariableStore()
        a = store.get_variable("a", [6], initializer=CountingInitializer())
        restore(path, store, lazy=True)  # a reads on first use: the reader stays open for it
        assert a.is_restore_pending
        np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32))
    finally:
        gc.enable()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_eager_restore_closes_its_checkpoint_unless_a_deferred_restore_waits_on_it(
        tmp_path: Path, suffix: str) -> None:
    lazy_path = save(tmp_path / f"lazy.{suffix}", {"other": np.full(2, 7.0)})
    only_a = save(tmp_path / f"a.{suffix}", {"a": np.arange(3.0)})
    path = save(tmp_path / f"m.{suffix}", {"a": np.arange(3.0) + 10, "later": np.full(4, 5.0)})
    gc.disable()  # closed by restore itself, not by the collector finding the reader later
    try:
        store = VariableStore()
        other = store.get_variable("other", [2], dtype=np.float64, initializer=CountingInitializer())
        restore(lazy_path, store, lazy=True)  # `other` keeps reading from lazy_path
        a = store.get_variable("a", [3], dtype=np.float64, initializer=CountingInitializer())

        # `other` still waits on another checkpoint's reader: this one is read and closed all the same
        result = restore(only_a, store, strict=False)
        assert (result.restored, result.missing, result.deferred) == (["a"], ["other"], [])
        assert a.numpy().tolist() == [0.0, 1.0, 2.0] and other.is_restore_pending
        assert _open_descriptors_of(only_a) == []

        # the same through a CheckpointManager's restore_latest
        manager = CheckpointManager(tmp_path / "run", format=suffix)
        saved = manager.save({"a": np.arange(3.0) + 20}, step=1)
        result = manager.restore_latest(store, strict=False)
        assert result is not None and (result.restored, result.missing) == (["a"], ["other"])
        assert a.numpy().tolist() == [20.0, 21.0, 22.0] and _open_descriptors_of(Path(saved)) == []

        # "later" waits for its variable: the reader stays open for it and serves it on creation
        result = restore(path, store, strict=False)
        assert (result.restored, result.missing, result.deferred) == (["a"], ["other"], ["later"])
        assert a.numpy().tolist() == [10.0, 11.0, 12.0]
        if suffix == "h5":  # a Zarr reader opens its chunk files per read: no descriptor to see
            assert _open_descriptors_of(path) != []
        init = CountingInitializer()
        later = store.get_variable("later", [4], dtype=np.float64, initializer=init)
        assert later.numpy().tolist() == [5.0] * 4 and init.calls == 0
        np.testing.assert_array_equal(other.numpy(), np.full(2, 7.0))
    finally:
        gc.enable()


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_restore_without_a_map_lists_restored_missing_and_unexpected_in_order(tmp_path: Path, suffix: str) -> None:
    path = save(tmp_path / f"m.{suffix}", {"z": np.full(1, 1.0), "b": np.full(1, 2.0), "x": np.full(1, 3.0),
                                           "a": np.full(1, 4.0)})
    targets = {"q": np.zeros(1), "x": np.zeros(1), "p": np.zeros(1), "a": np.zeros(1)}
    with open_checkpoint(path) as reader:
        stored = reader.keys()
    result = restore(path, targets, strict=False)
    assert result.restored == [name for name in stored if name in ("x", "a")]
    assert result.unexpected == [name for name in stored if name in ("z", "b")]
    assert result.missing == ["q", "p"]  # in the targets' order
    assert [targets[k][0] for k in ("q", "x", "p", "a")] == [0.0, 3.0, 0.0, 4.0]
    with pytest.raises(RestoreError) as err:
        restore(path, targets)
    assert (err.value.missing, sorted(err.value.unexpected)) == (["q", "p"], ["b", "z"])

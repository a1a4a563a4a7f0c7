"""Restore is strict by default (as tf.compat.v1.train.Saver.restore): missing variables raise with hints;
unexpected values are reported and fail only assert_consumed (TF2's checkpoint status)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.read.name_hints import missing_with_hints, suggestions
from varstore.errors import RestoreError


def test_suggestions_swap_separators_first_then_close_names_then_the_same_last_component() -> None:
    stored = ["encoder.dense.kernel", "encoder/dense_1/kernel", "decoder/proj/kernel", "encoder/dense/bias"]
    assert suggestions("encoder/dense/kernel", stored) == [
        "encoder.dense.kernel", "encoder/dense_1/kernel", "decoder/proj/kernel"]
    assert suggestions("encoder.dense.bias", stored)[0] == "encoder/dense/bias"
    assert suggestions("head/kernel", ["decoder/proj/kernel", "x/y"]) == ["decoder/proj/kernel"]
    assert suggestions("zzz", ["encoder/dense/bias"]) == []


def test_missing_with_hints_calls_out_the_separator_and_counts_past_twenty() -> None:
    text = missing_with_hints(["encoder/dense/kernel", "q"], ["encoder.dense.kernel"])
    assert text == ("['encoder/dense/kernel' (stored as 'encoder.dense.kernel': '.' where the target has '/'), 'q']")
    many = missing_with_hints([f"v{i}" for i in range(23)], [])
    assert many.endswith("'v19', and 3 more]") and "'v20'" not in many


def test_restore_and_the_manager_take_typed_explicit_options() -> None:
    parameters = inspect.signature(vs.restore).parameters
    assert parameters["strict"].default is True and parameters["strict"].kind is inspect.Parameter.KEYWORD_ONLY
    assert [p for p in parameters] == ["path", "target", "comm", "assignment_map", "strict", "lazy", "verify",
                                       "format", "storage_options"]
    latest = inspect.signature(vs.CheckpointManager.restore_latest).parameters
    assert latest["strict"].default is True and "restore_options" not in latest
    with pytest.raises(TypeError, match="stict"):
        vs.restore("x.h5", {}, stict=False)  # type: ignore[call-arg]


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_missing_raises_by_default_and_strict_false_restores_the_intersection(tmp_path: Path, suffix: str) -> None:
    path = vs.save(tmp_path / f"m.{suffix}", {"encoder/dense_1/kernel": np.ones((2, 2)), "b": np.full(3, 2.0),
                                               "extra": np.zeros(1)})
    store = vs.VariableStore()
    kernel = store.get_variable("encoder/dense/kernel", [2, 2], dtype=np.float64, initializer=lambda s, d: np.zeros(s, d))
    b = store.get_variable("b", [3], dtype=np.float64, initializer=lambda s, d: np.zeros(s, d))
    with pytest.raises(RestoreError, match=r"\['encoder/dense/kernel' \(did you mean 'encoder/dense_1/kernel'\?\)\]"
                                           r"; the checkpoint also holds 2 value\(s\) no variable takes") as err:
        vs.restore(path, store)
    assert (err.value.missing, sorted(err.value.unexpected)) == (["encoder/dense/kernel"], ["encoder/dense_1/kernel",
                                                                                             "extra"])
    assert not b.numpy().any()  # a failed restore changes nothing
    result = vs.restore(path, store, strict=False)
    assert (result.restored, result.missing) == (["b"], ["encoder/dense/kernel"])
    assert b.numpy().tolist() == [2.0] * 3 and not kernel.numpy().any()


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_unexpected_values_never_raise_under_strict(tmp_path: Path, suffix: str) -> None:
    path = vs.save(tmp_path / f"m.{suffix}", {"a": np.full(2, 1.0), "optimizer/m": np.full(2, 3.0)})
    target = {"a": np.zeros(2)}
    result = vs.restore(path, target)
    assert (result.restored, result.missing, result.unexpected) == (["a"], [], ["optimizer/m"])
    assert result.expect_partial() is result
    with pytest.raises(RestoreError, match=r"was not consumed: checkpoint values no variable took: \['optimizer/m'\]"
                       ) as err:
        result.assert_consumed()
    assert (err.value.missing, err.value.unexpected) == ([], ["optimizer/m"])


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_assert_consumed_follows_a_deferred_restore_as_variables_are_created(tmp_path: Path, suffix: str) -> None:
    path = vs.save(tmp_path / f"m.{suffix}", {"net/w": np.full(2, 1.0), "net/b": np.full(1, 2.0)})
    store = vs.VariableStore()
    result = vs.restore(path, store)  # nothing exists yet: every name waits, nothing is missing
    assert (result.restored, result.missing, sorted(result.deferred)) == ([], [], ["net/b", "net/w"])
    with pytest.raises(RestoreError, match=r"checkpoint values no variable took: \['net/w', 'net/b'\]"):
        result.assert_consumed()
    with store.variable_scope("net"):
        w = store.get_variable("w", [2], dtype=np.float64)
        b = store.get_variable("b", [1], dtype=np.float64)
    assert result.assert_consumed() is result
    assert w.numpy().tolist() == [1.0, 1.0] and b.numpy().tolist() == [2.0]
    # a variable created later that the checkpoint lacks gets its initializer and is missing to assert_consumed
    fresh = store.get_variable("net/fresh", [2], dtype=np.float64, initializer=lambda s, d: np.full(s, 9.0, d))
    assert fresh.numpy().tolist() == [9.0, 9.0]
    with pytest.raises(RestoreError, match=r"variables without a value in the checkpoint: \['net/fresh'") as err:
        result.assert_consumed()
    assert (err.value.missing, err.value.unexpected) == (["net/fresh"], [])


def test_the_manager_restores_strictly_by_default(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run")
    manager.save({"a": np.full(2, 1.0)}, step=1)
    store = vs.VariableStore()
    store.get_variable("a", [2], dtype=np.float64)
    new = store.get_variable("new", [2], dtype=np.float64)
    with pytest.raises(RestoreError, match=r"\['new'\]") as err:
        manager.restore_latest(store)
    assert err.value.missing == ["new"]
    result = manager.restore_latest(store, strict=False)
    assert result is not None and (result.restored, result.missing) == (["a"], ["new"])
    assert not new.is_restore_pending


def test_strict_error_names_both_sides_with_the_pairing_and_caps_the_list(tmp_path: Path) -> None:
    path = vs.save(tmp_path / "m.h5", {"encoder/dense_1/kernel": np.ones((2, 2)), "extra": np.zeros(1)})
    store = vs.VariableStore()
    store.get_variable("encoder/dense/kernel", [2, 2], dtype=np.float64)
    with pytest.raises(RestoreError) as err:
        vs.restore(path, store)
    assert str(err.value) == (
        f"restoring '{path}' failed: 1 variable(s) have no value in the checkpoint: "
        "['encoder/dense/kernel' (did you mean 'encoder/dense_1/kernel'?)]; the checkpoint also holds 2 value(s) "
        "no variable takes: ['encoder/dense_1/kernel' (for 'encoder/dense/kernel'?), 'extra']; pass strict=False "
        "to restore only the names both have (the others keep their values or initializers), or an "
        "assignment_map to rename")
    many = vs.save(tmp_path / "many.h5", {f"u{i:02d}": np.zeros(1) for i in range(25)})
    with pytest.raises(RestoreError, match=r"no variable takes: \['u00', .*'u19', and 5 more\];") as err:
        vs.restore(many, store)
    assert "'u20'" not in str(err.value)

"""varstore.restore reads every registered format into a store, as tf.compat.v1.train.Saver.restore reads a TF checkpoint.

A TF bundle written by TensorFlow (fixtures/tf1_scopes: by its prefix, its
.index, its directory with a `checkpoint` state file), safetensors, a PyTorch
state dict and npz: values bit-exact, initializers never run, and the same
strict / missing / unexpected rules as varstore's own checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.errors import CheckpointNotFoundError, RestoreError, ShapeMismatchError

TF_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "tf1_scopes"


class CountingInitializer:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        self.calls += 1
        return np.full(shape, 7, dtype=dtype)


def _tf_numeric_records() -> list[dict[str, Any]]:
    manifest = json.loads((TF_DIR / "model.ckpt.manifest.json").read_text())
    return [v for v in manifest["variables"] if v["hash_scheme"] == "raw_c_order"]


@pytest.fixture()
def tf_dir(tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(TF_DIR, target)
    return target


@pytest.mark.parametrize("spelling", ["prefix", "index", "directory"])
def test_a_tf_checkpoint_written_by_tensorflow_restores_bit_exact(tf_dir: Path, spelling: str) -> None:
    path = {"prefix": tf_dir / "model.ckpt", "index": tf_dir / "model.ckpt.index", "directory": tf_dir}[spelling]
    records = _tf_numeric_records()
    store = vs.VariableStore()
    init = CountingInitializer()
    variables = {r["name"]: store.get_variable(r["name"], tuple(r["shape"]), dtype=r["dtype"], initializer=init)
                 for r in records}
    result = vs.restore(path, store)
    assert sorted(result.restored) == sorted(variables) and result.missing == []
    assert result.unexpected == ["zoo/names"] and result.deferred == ["zoo/names"]  # the one string tensor
    for record in records:
        value = np.ascontiguousarray(variables[record["name"]].numpy())
        assert hashlib.sha256(value.tobytes()).hexdigest() == record["sha256"], record["name"]
    assert init.calls == 0


def test_a_tf_checkpoint_fills_numpy_arrays_in_place(tf_dir: Path) -> None:
    target = {"encoder/layer_a/biases": np.zeros(8, np.float32), "zoo/i64": np.zeros(4, np.int64)}
    before = {name: array.ctypes.data for name, array in target.items()}
    result = vs.restore(tf_dir / "model.ckpt", target)
    assert sorted(result.restored) == ["encoder/layer_a/biases", "zoo/i64"] and result.missing == []
    with vs.open_checkpoint(tf_dir / "model.ckpt") as reader:
        for name, array in target.items():
            assert array.tobytes() == reader[name].tobytes() and array.ctypes.data == before[name]


def test_a_missing_variable_fails_a_tf_restore_and_changes_nothing(tf_dir: Path) -> None:
    store = vs.VariableStore()
    biases = store.get_variable("encoder/layer_a/biases", [8], initializer=CountingInitializer())
    store.get_variable("encoder/layer_c/biases", [8])
    biases.assign(np.ones(8, np.float32))
    with pytest.raises(RestoreError, match=r"restoring '.*model\.ckpt' failed: 1 variable\(s\) have no value in the "
                                           r"checkpoint: \['encoder/layer_c/biases' \(did you mean "
                                           r"'encoder/layer_b/biases', 'encoder/layer_a/biases'") as err:
        vs.restore(tf_dir / "model.ckpt", store)
    assert err.value.missing == ["encoder/layer_c/biases"] and "global_step" in err.value.unexpected
    np.testing.assert_array_equal(biases.numpy(), np.ones(8, np.float32))  # nothing was assigned
    result = vs.restore(tf_dir / "model.ckpt", store, strict=False)
    assert result.restored == ["encoder/layer_a/biases"] and result.missing == ["encoder/layer_c/biases"]
    assert biases.numpy()[0] == np.float32(0.1)


def test_a_shape_mismatch_names_the_variable_and_the_tf_file_before_anything_changes(tf_dir: Path) -> None:
    target = {"encoder/layer_a/biases": np.zeros(8, np.float32), "zoo/i64": np.zeros(5, np.int64)}
    with pytest.raises(ShapeMismatchError, match=r"'zoo/i64' from 'zoo/i64' in '.*model\.ckpt'.*\(4,\).*\(5,\)"):
        vs.restore(tf_dir / "model.ckpt", target)
    assert not target["encoder/layer_a/biases"].any()


def test_a_deferred_restore_from_a_tf_checkpoint_serves_variables_created_later(tf_dir: Path) -> None:
    store = vs.VariableStore()
    result = vs.restore(tf_dir / "model.ckpt", store)  # nothing exists yet: every name waits
    assert result.restored == [] and result.missing == [] and len(result.deferred) == 18
    init = CountingInitializer()
    scale = store.get_variable("zoo/scale", [], initializer=init)
    kernel = store.get_variable("encoder/layer_b/weights", [3, 3, 8, 16], initializer=init)
    fresh = store.get_variable("head/w", [2], initializer=init)  # the checkpoint lacks it: its initializer runs
    with vs.open_checkpoint(tf_dir / "model.ckpt") as reader:
        assert scale.numpy().tobytes() == reader["zoo/scale"].tobytes()
        assert kernel.numpy().tobytes() == reader["encoder/layer_b/weights"].tobytes()
    assert fresh.numpy().tolist() == [7.0, 7.0] and init.calls == 1
    with pytest.raises(RestoreError, match=r"variables without a value in the checkpoint: \['head/w'") as err:
        result.assert_consumed()
    assert err.value.missing == ["head/w"] and "zoo/names" in err.value.unexpected
    assert "zoo/scale" not in err.value.unexpected and len(err.value.unexpected) == 16


def _write_safetensors(path: Path, values: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(values, str(path / "model.safetensors"))
    return path / "model.safetensors"


def _write_torch(path: Path, values: dict[str, np.ndarray]) -> Path:
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(v.copy()) for k, v in values.items()}, path / "model.pt")
    return path / "model.pt"


def _write_npz(path: Path, values: dict[str, np.ndarray]) -> Path:
    np.savez(path / "model.npz", **values)
    return path / "model.npz"


WRITERS: dict[str, Callable[[Path, dict[str, np.ndarray]], Path]] = {
    "safetensors": _write_safetensors, "pytorch": _write_torch, "npz": _write_npz}


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"encoder.dense.kernel": rng.standard_normal((4, 3)).astype(np.float32),
            "encoder.dense.bias": np.array([np.nan, -0.0, np.inf], np.float32),
            "step": np.array(12345678901, np.int64)}


@pytest.mark.parametrize("format", sorted(WRITERS))
def test_every_registered_format_restores_bit_exact(tmp_path: Path, format: str) -> None:
    values = _values()
    path = WRITERS[format](tmp_path, values)
    store = vs.VariableStore()
    init = CountingInitializer()
    created = {name: store.get_variable(name, value.shape, dtype=value.dtype, initializer=init)
               for name, value in values.items()}
    result = vs.restore(path, store)
    assert sorted(result.restored) == sorted(values) and (result.missing, result.unexpected) == ([], [])
    for name, value in values.items():
        assert created[name].numpy().tobytes() == value.tobytes(), name
    assert init.calls == 0
    assert result.assert_consumed() is result


@pytest.mark.parametrize("format", sorted(WRITERS))
def test_separator_mismatch_is_named_in_the_error(tmp_path: Path, format: str) -> None:
    path = WRITERS[format](tmp_path, _values())
    store = vs.VariableStore()
    store.get_variable("encoder/dense/kernel", [4, 3])
    store.get_variable("step", [], dtype=np.int64)
    with pytest.raises(RestoreError, match=r"\['encoder/dense/kernel' \(stored as 'encoder\.dense\.kernel': '\.' "
                                           r"where the target has '/'") as err:
        vs.restore(path, store)
    assert err.value.missing == ["encoder/dense/kernel"]
    # an assignment_map renames the one name; the bias stays unexpected (reported, not an error)
    result = vs.restore(path, store, assignment_map={"encoder.dense.kernel": "encoder/dense/kernel", "step": "step"})
    assert sorted(result.restored) == ["encoder/dense/kernel", "step"] and result.unexpected == []
    assert store.get_variable_by_name("encoder/dense/kernel").numpy().tobytes() == \
        _values()["encoder.dense.kernel"].tobytes()


def test_unexpected_values_are_reported_and_fail_only_assert_consumed(tmp_path: Path) -> None:
    path = _write_safetensors(tmp_path, _values())
    target = {"step": np.zeros((), np.int64)}
    result = vs.restore(path, target)
    assert result.restored == ["step"] and sorted(result.unexpected) == ["encoder.dense.bias", "encoder.dense.kernel"]
    assert int(target["step"]) == 12345678901
    assert result.expect_partial() is result
    with pytest.raises(RestoreError, match=r"restore from '.*model\.safetensors' was not consumed: checkpoint values "
                                           r"no variable took: \['encoder\.dense\.bias', 'encoder\.dense\.kernel'\]"):
        result.assert_consumed()


def test_an_open_reader_of_any_format_is_restored_from_and_left_open(tmp_path: Path) -> None:
    path = _write_npz(tmp_path, _values())
    target = {"step": np.zeros((), np.int64)}
    with vs.open_checkpoint(path) as reader:
        vs.restore(reader, target)
        assert reader["step"] == 12345678901  # still open: the caller closes it
    assert int(target["step"]) == 12345678901


def test_a_lazy_restore_from_another_format_reads_at_first_use(tmp_path: Path) -> None:
    path = _write_safetensors(tmp_path, _values())
    store = vs.VariableStore()
    kernel = store.get_variable("encoder.dense.kernel", [4, 3], initializer=CountingInitializer())
    vs.restore(path, store, lazy=True)
    assert kernel.is_restore_pending
    assert kernel.numpy().tobytes() == _values()["encoder.dense.kernel"].tobytes()


def test_nothing_at_the_path_says_so(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match=r"no checkpoint at '.*nothing\.ckpt': no such file"):
        vs.restore(tmp_path / "nothing.ckpt", vs.VariableStore())


def _partitioned(store: vs.VariableStore, rows: int = 10) -> list[Any]:
    with store.variable_scope("model"):
        return list(store.get_variable("embedding", [rows, 3], dtype=np.float64,
                                       partitioner=vs.fixed_size_partitioner(3), initializer=CountingInitializer()))


def test_the_parts_of_a_partitioned_variable_take_their_regions_of_a_whole_stored_array(tmp_path: Path) -> None:
    full = np.arange(30.0).reshape(10, 3)
    path = _write_npz(tmp_path, {"model/embedding": full, "other": np.ones(2)})
    store = vs.VariableStore()
    parts = _partitioned(store)
    result = vs.restore(path, store)
    assert sorted(result.restored) == [p.name for p in parts] and result.unexpected == ["other"]
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in parts]), full)
    # created after the restore: each part reads its region at first use
    later = vs.VariableStore()
    vs.restore(path, later)
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in _partitioned(later)]), full)
    with pytest.raises(ShapeMismatchError, match=r"partitioned variable 'model/embedding' \(part "
                                                 r"'model/embedding/part_0'\).*\(10, 3\).*\(12, 3\)"):
        vs.restore(path, _partitioned_store(12))


def _partitioned_store(rows: int) -> vs.VariableStore:
    store = vs.VariableStore()
    _partitioned(store, rows)
    return store


class _LyingReader(CheckpointReader):
    """A reader whose metadata declares (2,) for 'w' while reading gives 3 values (a damaged file)."""

    format = "lying"

    def keys(self) -> list[str]:
        return ["a", "w"]

    def info(self, name: str) -> Any:
        from varstore.checkpoint.format.variable_info import VariableInfo

        return VariableInfo(name=name, shape=(2,), dtype="float32", nbytes=8)

    def read(self, name: str, out: Any = None) -> np.ndarray:
        return np.ones(2 if name == "a" else 3, np.float32)


def test_a_value_longer_than_its_declared_shape_fails_before_anything_is_assigned(tmp_path: Path) -> None:
    target = {"a": np.zeros(2, np.float32), "w": np.zeros(2, np.float32)}
    with pytest.raises(vs.CorruptCheckpointError, match=r"'w' in '.*lie\.bin': its lying metadata declares shape "
                                                        r"\(2,\), reading it gave \(3,\)"):
        vs.restore(_LyingReader(tmp_path / "lie.bin"), target)
    assert not target["a"].any() and not target["w"].any()

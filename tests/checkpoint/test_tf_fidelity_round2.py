"""Issue 37 (checkpoint side): no silent value change on restore, partitioned variables saved whole, resume finds TF's state file.

The values TensorFlow 2.21 gives are written in each test, with the TF call
they come from in a comment (TensorFlow is not installed here).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.errors import ValueOutOfRangeError


def _saved(path: Path, **values: np.ndarray) -> Path:
    store = vs.VariableStore()
    kept = [vs.Variable(value, name=name, store=store) for name, value in values.items()]
    vs.save(path, kept)
    return path


# ------------------------------------------------ item 1: narrowing restores refuse a changed value
@pytest.mark.parametrize("target_kind", ["store", "list", "dict_of_variables", "dict_of_arrays", "lazy"])
def test_int64_2_pow_40_into_int32_is_refused(ckpt: Path, target_kind: str) -> None:
    # TF: tf.train.Checkpoint(v=tf.Variable(tf.zeros([2], tf.int32))).restore(<int64 [1, 2**40]>) raises
    # InvalidArgumentError ("expected dtype int32 does not equal original dtype int64"); NumPy would give 0.
    _saved(ckpt, step=np.array([1, 2**40], np.int64))
    store = vs.VariableStore()
    step = vs.Variable(np.zeros(2, np.int32), name="step", store=store)
    array = np.zeros(2, np.int32)
    target = {"store": store, "list": [step], "dict_of_variables": {"step": step},
              "dict_of_arrays": {"step": array}, "lazy": [step]}[target_kind]
    with pytest.raises(ValueOutOfRangeError) as raised:
        vs.restore(ckpt, target, lazy=target_kind == "lazy")
        step.numpy()  # a lazy restore reads at first use
    message = str(raised.value)
    assert "'step'" in message and "int64" in message and "int32" in message and "1099511627776" in message
    assert "[1]" in message  # the index of the offending value
    assert array.tolist() == [0, 0]
    if target_kind != "lazy":  # a lazy restore stays pending: every read raises again, never a wrapped value
        assert step.numpy().tolist() == [0, 0]  # nothing changed
    else:
        with pytest.raises(ValueOutOfRangeError):
            step.numpy()


def test_float32_1e5_into_float16_is_refused(ckpt: Path) -> None:
    # TF: restoring a float32 1e5 into a float16 variable raises InvalidArgumentError (dtype mismatch);
    # a cast would make it inf (float16's largest is 65504).
    _saved(ckpt, w=np.array([1.0, 1e5], np.float32))
    w = vs.Variable(np.zeros(2, np.float16), name="w", store=vs.VariableStore())
    with pytest.raises(ValueOutOfRangeError, match=r"'w'.*100000\.0.*float32.*float16.*inf"):
        vs.restore(ckpt, [w])
    assert w.numpy().tolist() == [0.0, 0.0]


def test_a_lossless_narrowing_restore_stays_allowed(ckpt: Path) -> None:
    # varstore's documented deviation: TF refuses any dtype mismatch; varstore casts 'same_kind' when no value changes.
    _saved(ckpt, i=np.array([-(2**31), 2**31 - 1], np.int64), f=np.array([1.5, 65504.0, np.inf, np.nan], np.float32))
    store = vs.VariableStore()
    i = vs.Variable(np.zeros(2, np.int32), name="i", store=store)
    f = vs.Variable(np.zeros(4, np.float16), name="f", store=store)
    vs.restore(ckpt, store)
    assert i.numpy().tolist() == [-(2**31), 2**31 - 1]
    got = f.numpy()
    assert got[:3].tolist() == [1.5, 65504.0, np.inf] and np.isnan(got[3])  # inf stays inf, NaN stays NaN


def test_packed_values_are_checked_too(tmp_path: Path) -> None:
    # small variables go through the packed blob (restore_many): the same refusal
    path = _saved(tmp_path / "small.h5", a=np.array([3], np.int64), b=np.array([70000], np.int64))
    store = vs.VariableStore()
    a = vs.Variable(np.zeros(1, np.int16), name="a", store=store)
    b = vs.Variable(np.zeros(1, np.int16), name="b", store=store)
    with pytest.raises(ValueOutOfRangeError, match="'b'.*70000.*int16"):
        vs.restore(path, store)
    assert b.numpy().tolist() == [0]


def test_foreign_checkpoints_are_checked_too(tmp_path: Path) -> None:
    # a NumPy .npz (another format's reader, restored through foreign_read): int64 2**40 into int32
    path = tmp_path / "values.npz"
    np.savez(path, step=np.array([2**40], np.int64))
    step = vs.Variable(np.zeros(1, np.int32), name="step", store=vs.VariableStore())
    with pytest.raises(ValueOutOfRangeError, match="1099511627776"):
        vs.restore(path, [step])
    assert step.numpy().tolist() == [0]


def test_strings_restore_whole_or_not_at_all(ckpt: Path) -> None:
    # TF strings have no width: a restore gives the full b"defgh"; a fixed-width U3 variable refuses to cut it
    _saved(ckpt, s=np.array(["defgh"]))
    s = vs.Variable(np.array(["abc"]), name="s", store=vs.VariableStore())
    with pytest.raises(ValueOutOfRangeError, match="'defgh'"):
        vs.restore(ckpt, [s])
    assert s.numpy().tolist() == ["abc"]


# ------------------------------------------------ item 2: a partitioned variable is ONE global value
def _embedding(store: vs.VariableStore, rows: int) -> vs.PartitionedVariable:
    return store.get_variable("emb", [rows, 2], initializer=np.arange(rows * 2, dtype=np.float32).reshape(rows, 2),
                              partitioner=vs.fixed_size_partitioner(2))


@pytest.mark.parametrize("rows", [4, 5])  # 5 rows: parts of (3, 2) and (2, 2)
@pytest.mark.parametrize("form", ["store", "dict", "list_of_parts", "list", "partitioned_variable"])
def test_partitioned_variable_saves_one_value_under_its_name(ckpt: Path, form: str, rows: int) -> None:
    # TF: tf.compat.v1.train.Saver({"emb": pv}) (or var_list=list(pv), or the graph's variables) writes ONE
    # tensor "emb" of shape (4, 2) (saveable_object_util groups the parts by save_slice_info.full_name);
    # varstore used to stack a dict's parts into (2, 2, 2), and refused parts of different sizes.
    store = vs.VariableStore()
    pv = _embedding(store, rows)
    target = {"store": store, "dict": {"emb": pv}, "list_of_parts": list(pv), "list": [pv],
              "partitioned_variable": pv}[form]
    vs.save(ckpt, target)
    with vs.open_checkpoint(ckpt) as reader:
        assert reader.keys() == ["emb"]
        assert reader.info("emb").shape == (rows, 2)
        assert reader.read("emb").tolist() == np.arange(rows * 2).reshape(rows, 2).tolist()
    pv.assign(np.zeros((rows, 2), np.float32))
    # TF: Saver.restore(sess, path) with the same var_list fills every part from "emb"
    vs.restore(ckpt, target)
    assert pv.numpy().tolist() == np.arange(rows * 2).reshape(rows, 2).tolist()
    assert [p.numpy().shape for p in pv] == [((rows + 1) // 2, 2), (rows // 2, 2)]


def test_partitioned_variable_with_plain_variables_in_a_dict(ckpt: Path) -> None:
    store = vs.VariableStore()
    pv = _embedding(store, 4)
    w = store.get_variable("w", [2], initializer=np.array([7.0, 8.0], np.float32))
    vs.save(ckpt, {"emb": pv, "w": w})
    with vs.open_checkpoint(ckpt) as reader:
        assert sorted(reader.keys()) == ["emb", "w"] and reader.info("emb").shape == (4, 2)
    w.assign([0.0, 0.0])
    pv.assign(np.zeros((4, 2)))
    vs.restore(ckpt, {"emb": pv, "w": w})
    assert w.numpy().tolist() == [7.0, 8.0] and pv.numpy()[3].tolist() == [6.0, 7.0]


def test_partitioned_variable_under_another_key_is_refused(ckpt: Path) -> None:
    pv = _embedding(vs.VariableStore(), 4)
    with pytest.raises(vs.PartitionError, match="'emb'.*'table'"):
        vs.save(ckpt, {"table": pv})
    with pytest.raises(vs.PartitionError, match="ndarray"):
        vs.save(ckpt, {"emb": pv, "a": np.zeros(2)})
    assert not ckpt.exists()


# ------------------------------------------------ item 4: latest_checkpoint finds what open_checkpoint opens
FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"


def test_latest_checkpoint_of_a_tf_saver_directory(tmp_path: Path) -> None:
    # TF: tf.train.latest_checkpoint("run") -> "run/model.ckpt" (the state file's model_checkpoint_path);
    # varstore returned None while open_checkpoint("run") read the same state file.
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "tf1_scopes", run)
    latest = vs.latest_checkpoint(run)
    assert latest == str(run / "model.ckpt")
    with vs.open_checkpoint(run) as by_directory, vs.open_checkpoint(latest) as by_prefix:
        assert by_directory.keys() == by_prefix.keys() and by_directory.keys()


def test_latest_checkpoint_says_why_not(tmp_path: Path) -> None:
    # TF: tf.train.latest_checkpoint(d) is None without a state file -> varstore too (documented None)
    assert vs.latest_checkpoint(tmp_path) is None
    # TF logs "Couldn't match files for checkpoint" and returns None; varstore raises (a resume must not restart)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\n', encoding="utf-8")
    with pytest.raises(vs.CheckpointNotFoundError, match="model.ckpt-7"):
        vs.latest_checkpoint(tmp_path)
    (tmp_path / "checkpoint").write_text("all_model_checkpoint_paths: nothing\n", encoding="utf-8")
    with pytest.raises(vs.CorruptCheckpointError, match="model_checkpoint_path"):
        vs.latest_checkpoint(tmp_path)


def test_latest_checkpoint_of_a_manager_directory_comes_first(tmp_path: Path) -> None:
    store = vs.VariableStore()
    vs.Variable(np.ones(2, np.float32), name="w", store=store)
    manager = vs.CheckpointManager(tmp_path)
    saved = manager.save(store, step=3)
    shutil.copy(FIXTURES / "tf1_scopes" / "checkpoint", tmp_path / "checkpoint")  # a stray TF state file too
    assert vs.latest_checkpoint(tmp_path) == saved


# ------------------------------------------------ item 5: CheckpointManager.save() numbers checkpoints itself
def test_manager_save_without_step_numbers_checkpoints(tmp_path: Path) -> None:
    # TF: manager = tf.train.CheckpointManager(ckpt, d, max_to_keep=5); manager.save(); manager.save()
    #     -> "d/ckpt-1", "d/ckpt-2" (checkpoint_number=None: the save counter)
    store = vs.VariableStore()
    w = vs.Variable(np.zeros(2, np.float32), name="w", store=store)
    manager = vs.CheckpointManager(tmp_path, max_to_keep=5)
    first, second = manager.save(store), manager.save(store)
    assert [Path(first).name, Path(second).name] == ["ckpt-1.h5", "ckpt-2.h5"]
    with vs.open_checkpoint(second) as reader:
        assert reader.step == 2
    manager.save(store, step=10)
    again = vs.CheckpointManager(tmp_path)  # a new manager continues after the largest step
    w.assign([5.0, 6.0])
    assert Path(again.save(store)).name == "ckpt-11.h5"
    assert vs.latest_checkpoint(tmp_path) == tmp_path / "ckpt-11.h5"


def test_parts_restored_from_a_global_value_are_checked(ckpt: Path) -> None:
    # the regions of a stored global array (a partitioned variable's parts) pass the same check
    _saved(ckpt, emb=np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 1e5], [7.0, 8.0]], np.float32))
    store = vs.VariableStore()
    pv = store.get_variable("emb", [4, 2], dtype=np.float16, initializer=vs.zeros_initializer(),
                            partitioner=vs.fixed_size_partitioner(2))
    with pytest.raises(ValueOutOfRangeError, match="100000.0"):
        vs.restore(ckpt, store)
    assert pv.numpy()[1].tolist() == [0.0, 0.0]  # the failing part is unchanged
    later = vs.VariableStore()  # a deferred restore: the part created after restore refuses at first read
    vs.restore(ckpt, later, strict=False)
    part_of = later.get_variable("emb", [4, 2], dtype=np.float16, partitioner=vs.fixed_size_partitioner(2))
    assert part_of[0].numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(ValueOutOfRangeError, match="100000.0"):
        part_of[1].numpy()

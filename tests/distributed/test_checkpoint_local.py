"""Partitioned variables in checkpoints, one process (no MPI): one global array, region restores, checksums."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import zarr

import varstore as vs
from tests.convert.tf_bundle_writer import BundleWriter
from varstore.checkpoint.format.checksum import crc32c_of
from varstore.distributed.crc import crc32c_combine, crc32c_of_runs
from varstore.checkpoint.write.writer import save as _save_one  # the one-process engine: parts under their own names
from varstore.checkpoint.read.restoration import restore as _restore_one

FULL = np.arange(30, dtype=np.float32).reshape(10, 3)


def build(parts: int | None, rows: int = 10, axis0: bool = True) -> vs.VariableStore:
    store = vs.VariableStore()
    with store.variable_scope("model"):
        partitioner = None if parts is None else (
            vs.fixed_size_partitioner(parts) if axis0 else vs.fixed_size_partitioner(parts, axis=1))
        store.get_variable("embedding", [rows, 3], partitioner=partitioner)
        store.get_variable("dense/kernel", [2, 2])
    store.get_variable("global_step", [], dtype=np.int64, trainable=False)
    return store


def fill(store: vs.VariableStore, full: np.ndarray = FULL) -> None:
    for v in store.variables():
        info = v.save_slice_info
        if info is not None:
            v.assign(full[tuple(slice(o, o + n) for o, n in zip(info.var_offset, v.shape))])
        elif v.name == "model/embedding":
            v.assign(full)
        elif v.name == "model/dense/kernel":
            v.assign([[1, 2], [3, 4]])
        else:
            v.assign(42)


def embedding(store: vs.VariableStore) -> np.ndarray:
    out = np.zeros_like(FULL)
    for v in store.variables():
        info = v.save_slice_info
        if info is not None:
            out[tuple(slice(o, o + n) for o, n in zip(info.var_offset, v.shape))] = v.numpy()
        elif v.name == "model/embedding":
            out[...] = v.numpy()
    return out


def test_crc32c_combine_equals_crc_of_the_concatenation():
    a, b = b"partitioned " * 7, b"variables" * 1000
    assert crc32c_combine(crc32c_of(a), crc32c_of(b), len(b)) == crc32c_of(a + b)
    runs = [(len(a), len(b), crc32c_of(b)), (0, len(a), crc32c_of(a))]
    assert crc32c_of_runs(runs, len(a) + len(b)) == crc32c_of(a + b)
    assert crc32c_of_runs(runs[:1], len(a) + len(b)) is None  # a gap: not a tiling


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_partitioned_variable_is_one_global_array_readable_by_plain_libraries(tmp_path, suffix):
    store = build(3)
    fill(store)
    path = vs.save(tmp_path / f"model.{suffix}", store, step=5)
    if suffix == "h5":
        with h5py.File(path) as f:
            np.testing.assert_array_equal(f["model/embedding"][...], FULL)
            assert "model/embedding/part_0" not in f
            assert int(f.attrs["varstore_written_by_ranks"]) == 1
    else:
        np.testing.assert_array_equal(zarr.open_array(str(path / "model/embedding"), mode="r")[...], FULL)
    reader = vs.checkpoint.open_varstore(path)
    assert reader.keys() == ["global_step", "model/dense/kernel", "model/embedding"]
    reader.verify()
    section = reader.distributed
    assert section["world_size"] == 1
    assert [p["name"] for p in section["arrays"]["model/embedding"]["parts"]] == [
        "model/embedding/part_0", "model/embedding/part_1", "model/embedding/part_2"]
    assert [p["offset"] for p in section["arrays"]["model/embedding"]["parts"]] == [[0, 0], [4, 0], [7, 0]]
    assert reader.record("model/embedding").checksum == crc32c_of(FULL)


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
@pytest.mark.parametrize("saved, restored", [(3, 2), (2, 4), (None, 3), (3, None), (4, 1)])
def test_restore_into_any_partitioning(tmp_path, suffix, saved, restored):
    store = build(saved)
    fill(store)
    path = vs.save(tmp_path / f"model.{suffix}", store)
    target = build(restored)
    result = vs.restore(path, target, strict=True)
    np.testing.assert_array_equal(embedding(target), FULL)
    assert {v.name: v for v in target.variables()}["global_step"].numpy() == 42
    assert "global_step" in result.restored and result.missing == [] and result.unexpected == []


def test_restore_along_the_second_axis_and_lazily(tmp_path):
    store = build(2)
    fill(store)
    path = vs.save(tmp_path / "model.h5", store)
    target = build(3, axis0=False)
    vs.restore(path, target, lazy=True)
    parts = [v for v in target.variables() if v.save_slice_info is not None]
    assert [p.shape for p in parts] == [(10, 1), (10, 1), (10, 1)]
    assert not any(p.is_allocated for p in parts)
    np.testing.assert_array_equal(embedding(target), FULL)


def test_region_reads_check_the_recorded_write_checksums(tmp_path):
    store = build(2)
    fill(store)
    path = vs.save(tmp_path / "model.h5", store)
    reader = vs.checkpoint.open_varstore(path)
    record = reader.record("model/embedding")
    offset = record.file_offset + 5 * 3 * 4  # row 5: the second part's first row
    reader.close()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(np.float32(-1).tobytes())
    with pytest.raises(vs.ChecksumError, match=r"'model/embedding' .*region at \[5, 0\]"):
        vs.restore(path, build(2))
    with pytest.raises(vs.ChecksumError, match="model/embedding"):
        vs.checkpoint.open_varstore(path).verify()
    target = build(2)
    vs.restore(path, target, verify=False)
    assert embedding(target)[5, 0] == -1


def test_restore_errors_name_the_partitioned_variable_and_strict_lists_names(tmp_path):
    store = build(2)
    fill(store)
    path = vs.save(tmp_path / "model.h5", store)
    with pytest.raises(vs.ShapeMismatchError, match=r"partitioned variable 'model/embedding'.*\(10, 3\).*\(12, 3\)"):
        vs.restore(path, build(2, rows=12))
    other = build(2)
    other.get_variable("extra", [2])
    with pytest.raises(vs.RestoreError, match=r"1 variable\(s\) have no value in the checkpoint: \['extra'\]") as err:
        vs.restore(path, other)  # strict by default
    assert err.value.missing == ["extra"] and err.value.unexpected == []


def test_assignment_map_renames_the_global_array(tmp_path):
    store = build(2)
    fill(store)
    path = vs.save(tmp_path / "model.h5", store)
    target = vs.VariableStore()
    with target.variable_scope("new"):
        target.get_variable("embedding", [10, 3], partitioner=vs.fixed_size_partitioner(3))
    result = vs.restore(path, target, assignment_map={"model/": "new/"})
    np.testing.assert_array_equal(embedding_of(target, "new/embedding"), FULL)
    assert result.restored == ["new/embedding/part_0", "new/embedding/part_1", "new/embedding/part_2"]


def embedding_of(store: vs.VariableStore, name: str) -> np.ndarray:
    parts = sorted((v for v in store.variables() if v.save_slice_info is not None
                    and v.save_slice_info.full_name == name), key=lambda v: v.save_slice_info.var_offset)
    return np.concatenate([p.numpy() for p in parts])


def test_phase_one_checkpoints_with_part_names_still_restore(tmp_path):
    store = build(2)
    fill(store)
    arrays = {v.name: v.numpy() for v in store.variables()}  # parts under their own names
    path = _save_one(tmp_path / "old.h5", arrays)
    target = build(2)
    vs.restore(path, target, strict=True)
    np.testing.assert_array_equal(embedding(target), FULL)


def test_converted_tf1_partitioned_checkpoint_restores_into_partitioned_variables(tmp_path):
    writer = BundleWriter(tmp_path / "model.ckpt")
    writer.add_partitioned("model/embedding", FULL, [((0, 5), (0, -1)), ((5, 5), (0, -1))])
    writer.add("global_step", np.array(7, dtype=np.int64))
    writer.finish()
    converted = tmp_path / "model.h5"
    vs.convert(tmp_path / "model.ckpt", converted)
    target = vs.VariableStore()
    with target.variable_scope("model"):
        target.get_variable("embedding", [10, 3], partitioner=vs.fixed_size_partitioner(3))
    step = target.get_variable("global_step", [], dtype=np.int64)
    vs.restore(converted, target)
    np.testing.assert_array_equal(embedding_of(target, "model/embedding"), FULL)
    assert step.numpy() == 7


def test_a_tf1_partitioned_checkpoint_restores_into_partitioned_variables_without_converting(tmp_path):
    writer = BundleWriter(tmp_path / "model.ckpt")
    writer.add_partitioned("model/embedding", FULL, [((0, 5), (0, -1)), ((5, 5), (0, -1))])
    writer.add("global_step", np.array(7, dtype=np.int64))
    writer.finish()
    target = vs.VariableStore()
    with target.variable_scope("model"):
        target.get_variable("embedding", [10, 3], partitioner=vs.fixed_size_partitioner(3))
    step = target.get_variable("global_step", [], dtype=np.int64)
    result = vs.restore(tmp_path / "model.ckpt", target)  # as tf.compat.v1.train.Saver.restore
    assert sorted(result.restored) == ["global_step"] + [f"model/embedding/part_{i}" for i in range(3)]
    np.testing.assert_array_equal(embedding_of(target, "model/embedding"), FULL)
    assert step.numpy() == 7 and result.assert_consumed() is result
    from varstore.distributed import SingleProcess

    with pytest.raises(vs.UnsupportedFormatError, match=r"collective restore \(comm=\) reads varstore checkpoints "
                                                        r"only, and '.*model\.ckpt' is a tf checkpoint"):
        vs.restore(tmp_path / "model.ckpt", target, comm=SingleProcess())


def test_manager_saves_partitioned_stores_as_global_arrays(tmp_path):
    store = build(2)
    fill(store)
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=1)
    manager.save(store, 1)
    last = manager.save(store, 2)
    assert manager.checkpoints == [last]
    target = build(3)
    manager.restore_latest(target)
    np.testing.assert_array_equal(embedding(target), FULL)
    with h5py.File(last) as f:
        manifest = json.loads(bytes(f["_varstore/manifest"][...]))
    assert manifest["distributed"]["world_size"] == 1 and manifest["step"] == 2


class _Rank:
    """What ownership needs from a communicator: rank 1 of 2 (no MPI needed to bind a store)."""

    rank, size = 1, 2


def test_plain_restore_into_a_bound_store_skips_variables_of_other_ranks(tmp_path):
    source = vs.VariableStore()
    source.get_variable("a", [2])
    source.get_variable("b", [2])
    source.get_variable("c", [2])
    values = {"a": np.array([1, 2], np.float32), "b": np.array([3, 4], np.float32),
              "c": np.array([5, 6], np.float32)}
    path = _save_one(tmp_path / "model.h5", values, layout="packed")
    store = vs.VariableStore()
    with vs.device("/job:ps/task:0"):
        a = store.get_variable("a", [2])
    with vs.device("/job:ps/task:1"):
        b = store.get_variable("b", [2])
    c = store.get_variable("c", [2])
    store.initialize(comm=_Rank())
    result = _restore_one(path, store)
    assert not a.is_allocated and a.is_owned is False  # rank 0's: never allocated here
    np.testing.assert_array_equal(b.numpy(), [3, 4])
    np.testing.assert_array_equal(c.numpy(), [5, 6])
    assert sorted(result.restored) == ["b", "c"]


def test_variables_created_after_the_restore_take_their_values_deferred(tmp_path):
    store = build(2)
    fill(store)
    path = vs.save(tmp_path / "model.h5", store)
    target = vs.VariableStore()
    with target.variable_scope("model"):
        target.get_variable("embedding", [10, 3], partitioner=vs.fixed_size_partitioner(2))
    result = vs.restore(path, target)
    assert result.deferred == ["global_step", "model/dense/kernel"]
    with target.variable_scope("model"):
        kernel = target.get_variable("dense/kernel", [2, 2])
    np.testing.assert_array_equal(kernel.numpy(), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(embedding(target), FULL)

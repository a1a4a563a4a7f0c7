"""Deferred restore into partitioned variables created AFTER vs.restore, one process (HDF5 and Zarr).

The store's pending-restore resolvers get each part's SaveSliceInfo; the
checkpoint answers with the part's region of the stored global array, so the
initializer never runs and only the region is read (checked by crc32c).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.write.writer import save as _save_one  # the one-process engine: parts under their own names

FULL = np.arange(30, dtype=np.float32).reshape(10, 3)


class Counting:
    """An initializer that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shape, dtype=None):
        self.calls += 1
        return np.full(shape, -7.0, dtype=dtype)


def saved(tmp_path: Path, suffix: str, parts: int | None = 2) -> Path:
    """A checkpoint of model/embedding (FULL, written as `parts` parts) and model/dense/kernel."""
    store = vs.VariableStore()
    with store.variable_scope("model"):
        partitioner = None if parts is None else vs.fixed_size_partitioner(parts)
        embedding = store.get_variable("embedding", [10, 3], partitioner=partitioner)
        store.get_variable("dense/kernel", [2, 2]).assign([[1, 2], [3, 4]])
    embedding.assign(FULL)
    return vs.save(tmp_path / f"model.{suffix}", store)


def create(store: vs.VariableStore, parts: int | None, initializer: Counting, scope: str = "model"):
    with store.variable_scope(scope):
        partitioner = None if parts is None else vs.fixed_size_partitioner(parts)
        return store.get_variable("embedding", [10, 3], initializer=initializer, partitioner=partitioner)


def whole(variable) -> np.ndarray:
    return variable.numpy()  # a PartitionedVariable concatenates its parts


def damage_row_5(path: Path) -> None:
    """Flips row 5, column 0 of model/embedding on disk (inside the second written part)."""
    if path.suffix == ".zarr":
        chunk = path / "model" / "embedding" / "c" / "1" / "0"  # rows 5..9 of the 2-part save
        data = bytearray(chunk.read_bytes())
        data[0:4] = np.float32(-1).tobytes()
        chunk.write_bytes(bytes(data))
        return
    reader = vs.checkpoint.open_varstore(path)
    offset = reader.record("model/embedding").file_offset + 5 * 3 * 4
    reader.close()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(np.float32(-1).tobytes())


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
@pytest.mark.parametrize("parts", [3, None, 2])
def test_a_partitioned_variable_created_after_restore_takes_its_saved_values(tmp_path, suffix, parts):
    path = saved(tmp_path, suffix)
    target = vs.VariableStore()
    result = vs.restore(path, target)
    assert result.deferred == ["model/dense/kernel", "model/embedding"]
    counting = Counting()
    embedding = create(target, parts, counting)
    variables = list(embedding) if parts else [embedding]
    assert [v.shape for v in variables] == {3: [(4, 3), (3, 3), (3, 3)], 2: [(5, 3), (5, 3)], None: [(10, 3)]}[parts]
    assert not any(v.is_allocated for v in variables)  # deferred: nothing read until first use
    np.testing.assert_array_equal(whole(embedding), FULL)
    assert counting.calls == 0
    with target.variable_scope("model"):
        np.testing.assert_array_equal(target.get_variable("dense/kernel", [2, 2]).numpy(), [[1, 2], [3, 4]])


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_lazy_deferred_and_assignment_map_apply_to_the_full_name(tmp_path, suffix):
    path = saved(tmp_path, suffix)
    target = vs.VariableStore()
    result = vs.restore(path, target, lazy=True, assignment_map={"model/": "net/"})
    assert result.deferred == ["net/dense/kernel", "net/embedding"]
    counting = Counting()
    embedding = create(target, 4, counting, scope="net")
    assert [p.name for p in embedding] == [f"net/embedding/part_{k}" for k in range(4)]
    assert embedding[3].save_slice_info.var_offset == (8, 0)
    np.testing.assert_array_equal(embedding[3].numpy(), FULL[8:10])
    np.testing.assert_array_equal(whole(embedding), FULL)
    assert counting.calls == 0
    again = create(vs.VariableStore(), 4, counting, scope="model")  # another store: no pending restore
    assert again[0].numpy()[0, 0] == -7.0 and counting.calls == 1


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
@pytest.mark.parametrize("parts", [3, None])
def test_a_damaged_byte_raises_when_the_deferred_part_is_materialized(tmp_path, suffix, parts):
    path = saved(tmp_path, suffix)
    damage_row_5(path)
    target = vs.VariableStore()
    vs.restore(path, target)
    embedding = create(target, parts, Counting())
    damaged = embedding[1] if parts else embedding  # rows 4..6 cut across the two written parts
    if parts:
        np.testing.assert_array_equal(embedding[0].numpy(), FULL[0:4])  # its write [0:5) is intact
    with pytest.raises(vs.ChecksumError, match=r"'model/embedding' in '.*model\.(h5|zarr)'"):
        damaged.numpy()
    assert not damaged.is_initialized  # nothing damaged became the value


def test_a_checkpoint_without_recorded_writes_and_parts_under_their_own_names(tmp_path):
    plain = saved(tmp_path / "plain", "h5", parts=None)  # one process, no partitioner: one array, whole crc
    target = vs.VariableStore()
    vs.restore(plain, target)
    counting = Counting()
    np.testing.assert_array_equal(whole(create(target, 3, counting)), FULL)
    # phase-1 files stored each part under its own name (the one-process engine writes them so)
    store = vs.VariableStore()
    create(store, 2, Counting()).assign(FULL)
    phase1 = _save_one(tmp_path / "phase1.h5", store)
    assert vs.checkpoint.open_varstore(phase1).keys() == ["model/embedding/part_0", "model/embedding/part_1"]
    target = vs.VariableStore()
    assert vs.restore(phase1, target).deferred == ["model/embedding/part_0", "model/embedding/part_1"]
    np.testing.assert_array_equal(whole(create(target, 2, counting)), FULL)
    assert counting.calls == 0


def test_a_wrong_full_shape_raises_at_creation_and_creates_nothing(tmp_path):
    path = saved(tmp_path, "h5")
    target = vs.VariableStore()
    vs.restore(path, target)
    with pytest.raises(vs.ShapeMismatchError,
                       match=r"partitioned variable 'model/embedding' \(part 'model/embedding/part_0'\) from "
                             r"'.*model\.h5': the checkpoint's array 'model/embedding' has shape \(10, 3\), "
                             r"the variable was created with \(12, 3\)"):
        with target.variable_scope("model"):
            target.get_variable("embedding", [12, 3], partitioner=vs.fixed_size_partitioner(3))
    assert target.variables() == []
    np.testing.assert_array_equal(whole(create(target, 3, Counting())), FULL)  # the right shape still restores

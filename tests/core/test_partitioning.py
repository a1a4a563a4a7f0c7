"""Partitioned variables (get_variable(partitioner=...)): part names, slices, reuse, initial values, as TF1."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore import initializers as init


@pytest.fixture
def store():
    vs.set_random_seed(1234)
    yield vs.VariableStore()
    vs.set_random_seed(None)


# ------------------------------------------------------------- get_variable(partitioner=)
def test_parts_are_named_and_sliced_as_tf(store):
    with store.variable_scope("model"):
        emb = store.get_variable("embedding", [10, 4], partitioner=vs.fixed_size_partitioner(3))
    assert isinstance(emb, vs.PartitionedVariable)
    assert (emb.name, emb.shape, emb.dtype, emb.partitions, len(emb)) == ("model/embedding", (10, 4), np.float32, [3, 1], 3)
    assert [p.name for p in emb] == ["model/embedding/part_0", "model/embedding/part_1", "model/embedding/part_2"]
    assert [p.shape for p in emb] == [(4, 4), (3, 4), (3, 4)]
    infos = emb.save_slice_infos
    assert [i.var_offset for i in infos] == [(0, 0), (4, 0), (7, 0)]
    assert {i.full_name for i in infos} == {"model/embedding"} and {i.full_shape for i in infos} == {(10, 4)}
    assert infos[1].spec == "10 4 4,3:0,4"
    assert [v.name for v in store.global_variables()] == [p.name for p in emb]
    assert [v.name for v in store.trainable_variables()] == [p.name for p in emb]


def test_parts_are_placed_one_by_one_by_the_device_function(store):
    setter = vs.replica_device_setter(ps_tasks=2)
    with vs.device(setter):
        emb = store.get_variable("emb", [8, 2], partitioner=vs.fixed_size_partitioner(4))
        w = store.get_variable("w", [2, 2])
    assert [p.task for p in emb] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:1"]
    assert [p.owner_rank for p in emb] == [0, 1, 0, 1]
    assert w.task == "/job:ps/task:0" and w.device == "cpu:0"
    assert setter.loads == [2 * 2 * 4 * 2 + 16, 2 * 2 * 4 * 2]


@pytest.mark.parametrize("initializer", [
    None,  # glorot_uniform with the WHOLE shape's fans: computed part by part
    init.RandomUniform(-1.0, 1.0),
    init.HeUniform(),
    init.TruncatedNormal(stddev=1.0),  # built whole once, then sliced
    init.Orthogonal(),
    init.Constant(2.5),
    init.Identity(3.0),
    lambda shape, dtype: np.arange(np.prod(shape), dtype=dtype).reshape(shape),
])
@pytest.mark.parametrize("partitioner", [vs.fixed_size_partitioner(2), vs.fixed_size_partitioner(4),
                                         vs.fixed_size_partitioner(3, axis=1)])
def test_initial_values_do_not_depend_on_the_partitioning(store, initializer, partitioner):
    whole = store.get_variable("m", [9, 6], initializer=initializer)
    other = vs.VariableStore()
    parted = other.get_variable("m", [9, 6], initializer=initializer, partitioner=partitioner)
    np.testing.assert_array_equal(parted.numpy(), whole.numpy())


def test_part_values_are_drawn_without_building_the_whole_value(store, monkeypatch):
    calls = []
    original = init.VarianceScaling.__call__
    monkeypatch.setattr(init.VarianceScaling, "__call__", lambda self, *a, **k: calls.append(a) or original(self, *a, **k))
    emb = store.get_variable("emb", [1000, 8], partitioner=vs.fixed_size_partitioner(4))
    first = emb[3].numpy()
    assert calls == [] and first.shape == (250, 8)
    assert abs(first).max() <= np.sqrt(6.0 / 1008) and first.std() > 0.02


def test_a_value_initializer_is_sliced(store):
    value = np.arange(12, dtype=np.int64).reshape(6, 2)
    parted = store.get_variable("v", initializer=value, partitioner=vs.fixed_size_partitioner(4))
    assert parted.dtype == np.int64 and [p.shape for p in parted] == [(2, 2), (2, 2), (1, 2), (1, 2)]
    np.testing.assert_array_equal(parted[2].numpy(), [[8, 9]])
    np.testing.assert_array_equal(parted.numpy(), value)


def test_assign_writes_each_part_its_slice(store):
    parted = store.get_variable("v", [5, 2], partitioner=vs.fixed_size_partitioner(2))
    parted.assign(np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(parted[1].numpy(), [[6.0, 7.0], [8.0, 9.0]])
    with pytest.raises(vs.ShapeMismatchError, match="'v' of shape"):
        parted.assign(np.zeros((4, 2)))


def test_reuse_rules_as_tf(store):
    part = vs.fixed_size_partitioner(2)
    with store.variable_scope("s"):
        first = store.get_variable("e", [4, 3], partitioner=part)
        with pytest.raises(vs.VariableExistsError, match="partitioned variable 's/e' already exists"):
            store.get_variable("e", [4, 3], partitioner=part)
        with pytest.raises(vs.PartitionError, match="no partitioner was given"):
            store.get_variable("e", [4, 3])
    with store.variable_scope("s", reuse=True):
        assert store.get_variable("e", [4, 3], partitioner=part) is first
        assert store.get_variable("e", partitioner=part) is first
        with pytest.raises(vs.PartitionError, match=r"gives partitions \[4, 1\], the existing variable has \[2, 1\]"):
            store.get_variable("e", [4, 3], partitioner=vs.fixed_size_partitioner(4))
        with pytest.raises(vs.ShapeMismatchError, match="asked for shape"):
            store.get_variable("e", [4, 2], partitioner=part)
        with pytest.raises(vs.DtypeMismatchError, match="float64"):
            store.get_variable("e", [4, 3], dtype=np.float64, partitioner=part)
        with pytest.raises(vs.VariableNotFoundError, match="'s/missing' does not exist"):
            store.get_variable("missing", [4, 3], partitioner=part)
    with store.variable_scope("s", reuse=vs.AUTO_REUSE):
        assert store.get_variable("e", [4, 3], partitioner=part) is first
    store.get_variable("plain", [4, 3])
    with pytest.raises(vs.PartitionError, match="unpartitioned variable 'plain' exists"):
        store.get_variable("plain", [4, 3], partitioner=part)


def test_scalars_ignore_the_partitioner_as_tf(store):
    step = store.get_variable("step", [], dtype=np.int64, partitioner=vs.fixed_size_partitioner(2))
    assert isinstance(step, vs.Variable) and step.shape == ()
    with pytest.raises(vs.PartitionError, match="rank at least 1"):
        store.get_variable("c", initializer=np.float32(1.0), partitioner=vs.fixed_size_partitioner(2))


def test_pending_restore_fills_a_part(store):
    class Source:
        origin, shape, dtype = "a test source", (2, 2), np.dtype(np.float32)

        def read_into(self, out):
            out[...] = 7.0

    store.add_pending_restore(lambda name, info: Source() if name == "e/part_1" else None)
    parted = store.get_variable("e", [4, 2], partitioner=vs.fixed_size_partitioner(2))
    np.testing.assert_array_equal(parted[1].numpy(), np.full((2, 2), 7.0))
    assert parted[0].numpy().std() > 0


def test_resolvers_receive_each_parts_save_slice_info(store):
    asked = []

    class Region:  # the part's slice of a stored global value, as the checkpoint layer answers
        origin, dtype = "a test region", np.dtype(np.float32)

        def __init__(self, info):
            self.info = info
            self.shape = info.var_shape

        def read_into(self, out):
            out[...] = np.arange(20, dtype=np.float32).reshape(5, 4)[self.info.index]

    def resolver(name, info):
        asked.append((name, None if info is None else (info.full_name, info.full_shape, info.var_offset,
                                                       info.var_shape)))
        return Region(info) if info is not None and info.full_name == "e" else None

    store.add_pending_restore(resolver)
    parted = store.get_variable("e", [5, 4], partitioner=vs.fixed_size_partitioner(2), initializer=init.ones())
    plain = store.get_variable("p", [1])
    assert asked == [("e/part_0", ("e", (5, 4), (0, 0), (3, 4))), ("e/part_1", ("e", (5, 4), (3, 0), (2, 4))),
                     ("p", None)]
    assert parted[1].save_slice_info.var_offset == (3, 0) and not parted[1].is_allocated
    np.testing.assert_array_equal(parted.numpy(), np.arange(20, dtype=np.float32).reshape(5, 4))
    assert plain.numpy().shape == (1,)

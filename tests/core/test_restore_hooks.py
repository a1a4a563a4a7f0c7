"""The contract the checkpoint layer relies on: ValueSource, restore_from, check_restorable, host_view, pending restores."""

from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import varstore as vs
from varstore.errors import DtypeMismatchError, ShapeMismatchError
from varstore.store.value_sources import ValueSource, check_restorable
from varstore.store.variables import Variable


class ArraySource:
    """A ValueSource backed by an array, counting reads."""

    def __init__(self, array, origin: str = "'w' in 'run/model.h5'") -> None:
        self.array = np.asarray(array)
        self.origin = origin
        self.shape = tuple(self.array.shape)
        self.dtype = self.array.dtype
        self.reads = 0

    def read_into(self, out: np.ndarray) -> None:
        assert out.flags.c_contiguous and out.flags.writeable
        self.reads += 1
        np.copyto(out, self.array, casting="same_kind")


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shape, dtype):
        self.calls += 1
        return np.zeros(shape, dtype)


def test_value_source_is_a_runtime_protocol():
    assert isinstance(ArraySource([1.0]), ValueSource)
    assert not isinstance(object(), ValueSource)


def test_check_restorable_names_variable_origin_and_both_shapes(store):
    v = store.get_variable("enc/kernel", [512, 128])
    with pytest.raises(ShapeMismatchError) as info:
        check_restorable(v, ArraySource(np.zeros((512, 256), np.float32), origin="'enc/kernel' in 'run7/ckpt-300.h5'"))
    message = str(info.value)
    assert "'enc/kernel'" in message and "'run7/ckpt-300.h5'" in message
    assert "(512, 256)" in message and "(512, 128)" in message
    with pytest.raises(DtypeMismatchError, match=r"'enc/kernel'.*complex64.*float32"):
        check_restorable(v, ArraySource(np.zeros((512, 128), np.complex64)))
    assert not v.is_initialized


@pytest.mark.parametrize("stored, target", [
    (np.float32, np.float32), (np.float64, np.float32), (np.int64, np.float32), (np.float32, np.float16),
    (ml_dtypes.bfloat16, np.float32), (np.float32, ml_dtypes.bfloat16), (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
])
def test_restorable_dtypes(store, stored, target):
    v = store.get_variable("v", [3], dtype=target)
    source = ArraySource(np.array([1.0, 2.0, 3.0]).astype(stored))
    check_restorable(v, source)
    v.restore_from(source)
    assert v.numpy().astype(np.float64).tolist() == [1.0, 2.0, 3.0]


def test_int_variable_rejects_float_source(store):
    v = store.get_variable("step", [], dtype="int64")
    with pytest.raises(DtypeMismatchError, match=r"'step'.*float32.*int64"):
        v.restore_from(ArraySource(np.float32(3.0)))


def test_restore_into_a_materialized_variable_fills_the_same_buffer(store):
    v = Variable([[1.0, 2.0], [3.0, 4.0]], name="w", store=store)
    pointer = v.host_view().ctypes.data
    source = ArraySource(np.array([[5.0, 6.0], [7.0, 8.0]], np.float32))
    v.restore_from(source)
    assert source.reads == 1 and v.host_view().ctypes.data == pointer
    assert v.numpy().tolist() == [[5, 6], [7, 8]] and v.is_initialized


def test_lazy_restore_into_a_materialized_variable_keeps_the_buffer(store):
    v = Variable([1.0, 2.0], name="w", store=store)
    pointer = v.host_view().ctypes.data
    source = ArraySource(np.array([9.0, 9.0], np.float32))
    v.restore_from(source, lazy=True)
    assert source.reads == 0 and v.is_restore_pending and not v.is_initialized
    assert v.numpy().tolist() == [9.0, 9.0] and source.reads == 1
    assert v.host_view().ctypes.data == pointer and not v.is_restore_pending


def test_restore_before_first_use_never_runs_the_initializer(store):
    count = Counting()
    v = store.get_variable("w", [2], initializer=count)
    source = ArraySource(np.array([3.0, 4.0], np.float32))
    v.restore_from(source)
    assert source.reads == 0 and store.report_uninitialized() == ["w"]
    store.initialize()
    assert v.numpy().tolist() == [3.0, 4.0] and count.calls == 0 and source.reads == 1


def test_assign_drops_a_pending_restore(store):
    v = store.get_variable("w", [2])
    source = ArraySource(np.array([3.0, 4.0], np.float32))
    v.restore_from(source, lazy=True)
    v.assign([1.0, 1.0])
    assert v.numpy().tolist() == [1.0, 1.0] and source.reads == 0


def test_a_failed_restore_changes_nothing(store):
    v = Variable([1.0, 2.0], store=store)
    with pytest.raises(ShapeMismatchError):
        v.restore_from(ArraySource(np.zeros(3, np.float32)))
    assert v.numpy().tolist() == [1.0, 2.0] and v.is_initialized


def test_host_view_is_a_read_only_view_of_the_live_buffer(store):
    v = store.get_variable("w", [3], initializer=vs.initializers.ones())
    view = v.host_view()
    assert v.is_initialized and not view.flags.writeable
    v.assign_add(1.0)
    assert view.tolist() == [2.0, 2.0, 2.0]  # a view, not a copy
    with pytest.raises(ValueError):
        view[0] = 0.0


def test_collections_property(store):
    v = store.get_variable("w", [1])
    local = store.get_variable("l", [1], trainable=False, collections=[vs.LOCAL_VARIABLES])
    store.add_to_collection("extra", v)
    assert v.collections == (vs.GLOBAL_VARIABLES, vs.TRAINABLE_VARIABLES, "extra")
    assert local.collections == (vs.LOCAL_VARIABLES,)


def test_store_inventory(store):
    a = store.get_variable("a", [1])
    b = Variable(1.0, name="b", trainable=False, store=store)
    c = store.get_variable("c", [1], collections=[vs.LOCAL_VARIABLES], trainable=False)
    d = Variable(1.0, name="d", collections=["custom"], trainable=False, store=store)
    assert [v.name for v in store.variables()] == ["a", "b", "c", "d"]
    assert [v.name for v in store.global_variables()] == ["a", "b"]
    assert [v.name for v in store.trainable_variables()] == ["a"]
    assert [v.name for v in store.local_variables()] == ["c"]
    assert store.get_variable_by_name("d") is d and store.get_variable_by_name("zzz") is None
    del b
    gc.collect()
    assert [v.name for v in store.variables()] == ["a", "c", "d"]
    assert a is store.get_variable_by_name("a") and c.name == "c"


def test_pending_restore_resolvers(store):
    sources = {"conv1/w": ArraySource(np.full((2, 2), 7.0, np.float32), origin="'conv1/w' in 'a.h5'"),
               "b": ArraySource(np.array([1.0, 2.0, 3.0], np.float32))}
    asked = []

    def resolver(name, info):
        asked.append(name)
        return sources.get(name)

    store.get_variable("before", [1])  # created before the call: never asked
    store.add_pending_restore(resolver)
    count = Counting()
    with store.variable_scope("conv1"):
        w = store.get_variable("w", [2, 2], initializer=count)
    b = store.get_variable("b")  # shape from the source
    other = store.get_variable("other", [1], initializer=count)
    assert asked == ["conv1/w", "b", "other"]
    assert w.numpy().tolist() == [[7, 7], [7, 7]] and b.shape == (3,) and b.numpy().tolist() == [1, 2, 3]
    other.numpy()
    assert count.calls == 1  # only "other" ran its initializer
    store.remove_pending_restore(resolver)
    store.get_variable("later", [1])
    assert asked == ["conv1/w", "b", "other"]


def test_resolvers_are_asked_newest_first_and_apply_to_plain_variables(store):
    old = ArraySource(np.array([1.0], np.float32))
    new = ArraySource(np.array([2.0], np.float32))
    store.add_pending_restore(lambda name, info: old if name in ("v", "only_old") else None)
    store.add_pending_restore(lambda name, info: new if name == "v" else None)
    assert store.get_variable("v", [1]).numpy().tolist() == [2.0]
    with store.variable_scope("s"):
        pass
    plain = Variable([0.0], name="only_old", store=store)
    assert plain.numpy().tolist() == [1.0]


def test_pending_restore_for_variables_in_the_default_store():
    default = vs.get_default_store()
    default.add_pending_restore(lambda name, info: ArraySource(np.array([4.0], np.float32)) if name == "x" else None)
    assert Variable([0.0], name="x").numpy().tolist() == [4.0]
    assert vs.get_variable("x2", [1], initializer=vs.initializers.zeros()).numpy().tolist() == [0.0]


def test_pending_restore_shape_mismatch_raises_at_creation(store):
    store.add_pending_restore(lambda name, info: ArraySource(np.zeros(5, np.float32), origin="'w' in 'x.h5'"))
    with pytest.raises(ShapeMismatchError, match=r"'w'.*'x.h5'.*\(5,\).*\(2,\)"):
        store.get_variable("w", [2])

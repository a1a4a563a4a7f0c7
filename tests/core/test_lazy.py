"""Behavior 12: lazy get_variable, initialize(), report_uninitialized(), initializers reading other variables, cycles."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import varstore as vs
from varstore.errors import InitializationCycleError
from varstore.store.variables import Variable


class CountingInitializer:
    """A callable initializer that counts its calls per shape."""

    def __init__(self, fill: float = 1.0) -> None:
        self.calls = 0
        self.fill = fill

    def __call__(self, shape, dtype):
        self.calls += 1
        return np.full(shape, self.fill, dtype=dtype)


def test_get_variable_allocates_nothing_until_first_use(store):
    count = CountingInitializer(2.0)
    big = store.get_variable("big", [1024, 1024, 64], initializer=count)  # 256 MiB if it were allocated
    assert count.calls == 0 and not big.is_initialized and big._state.buffer is None
    assert big.shape == (1024, 1024, 64) and big.nbytes == 2**28
    assert store.report_uninitialized() == ["big"]
    assert repr(big) == "<varstore.Variable 'big' shape=(1024, 1024, 64) dtype=float32 device=cpu:0, <not initialized>>"


@pytest.mark.parametrize("first_use", ["read_value", "numpy", "array", "ufunc", "assign_add", "initialize",
                                       "store.initialize", "index", "host_view", "dlpack"])
def test_each_first_use_runs_the_initializer_exactly_once(store, first_use):
    count = CountingInitializer(3.0)
    v = store.get_variable("v", [2, 2], initializer=count)
    {
        "read_value": lambda: v.read_value(),
        "numpy": lambda: v.numpy(),
        "array": lambda: np.asarray(v),
        "ufunc": lambda: v + 1,
        "assign_add": lambda: v.assign_add(1.0),
        "initialize": lambda: v.initialize(),
        "store.initialize": lambda: store.initialize(),
        "index": lambda: v[0],
        "host_view": lambda: v.host_view(),
        "dlpack": lambda: np.from_dlpack(v),
    }[first_use]()
    assert count.calls == 1 and v.is_initialized
    v.read_value(), v.numpy(), v + 1, store.initialize(), v.initialize()
    assert count.calls == 1
    expected = 4.0 if first_use == "assign_add" else 3.0
    assert v.numpy().tolist() == [[expected, expected], [expected, expected]]


def test_assign_on_an_uninitialized_variable_skips_the_initializer(store):
    count = CountingInitializer()
    v = store.get_variable("v", [3], initializer=count)
    v.assign([1.0, 2.0, 3.0])
    assert count.calls == 0 and v.is_initialized and v.numpy().tolist() == [1, 2, 3]


def test_initialize_materializes_everything_and_report_lists_the_rest(store):
    counts = {name: CountingInitializer() for name in ["conv1/weights", "conv2/weights", "local"]}
    with store.variable_scope("conv1"):
        w1 = store.get_variable("weights", [2], initializer=counts["conv1/weights"])
    with store.variable_scope("conv2"):
        store.get_variable("weights", [2], initializer=counts["conv2/weights"])
    store.get_variable("local", [1], initializer=counts["local"], collections=[vs.LOCAL_VARIABLES])
    w1.numpy()
    assert store.report_uninitialized() == ["conv2/weights", "local"]
    store.initialize()
    assert store.report_uninitialized() == []
    assert {name: c.calls for name, c in counts.items()} == {"conv1/weights": 1, "conv2/weights": 1, "local": 1}
    assert vs.report_uninitialized() == []  # the default store is a different one


def test_initializers_may_read_other_variables_in_any_order(store):
    count_a = CountingInitializer(5.0)
    # b is created first but depends on a, created later
    b = store.get_variable("b", [3], initializer=lambda shape, dtype: store.get_variable_by_name("a").initialized_value() * 2)
    a = store.get_variable("a", [3], initializer=count_a)
    c = store.get_variable("c", initializer=b)  # a Variable as initializer gives its shape and value
    store.initialize()
    assert a.numpy().tolist() == [5, 5, 5] and b.numpy().tolist() == [10, 10, 10] and c.numpy().tolist() == [10, 10, 10]
    assert count_a.calls == 1


def test_initialized_value_reflects_later_assigns(store):
    v = store.get_variable("v", [2], initializer=vs.initializers.ones())
    first = v.initialized_value()
    v.assign_add(1.0)
    assert first.tolist() == [1, 1] and v.initialized_value().tolist() == [2, 2]


def test_an_initializer_cycle_raises_naming_the_cycle(store):
    def reads(name):
        return lambda shape, dtype: store.get_variable_by_name(name).initialized_value()

    a = store.get_variable("a", [1], initializer=reads("b"))
    store.get_variable("b", [1], initializer=reads("c"))
    store.get_variable("c", [1], initializer=reads("a"))
    with pytest.raises(InitializationCycleError, match=r"a -> b -> c -> a"):
        store.initialize()
    assert store.report_uninitialized() == ["a", "b", "c"]
    with pytest.raises(InitializationCycleError, match=r"b -> c -> a -> b"):
        store.get_variable_by_name("b").numpy()
    store.get_variable_by_name("c").assign([7.0])  # breaking the cycle by hand
    assert a.numpy().tolist() == [7.0]


def test_self_cycle(store):
    v = store.get_variable("self", [1], initializer=lambda shape, dtype: store.get_variable_by_name("self").numpy())
    with pytest.raises(InitializationCycleError, match="self -> self"):
        v.initialize()


def test_variables_from_values_are_materialized_at_once(store):
    v = Variable([1.0], store=store)
    assert v.is_initialized and store.report_uninitialized() == []


def test_concurrent_first_reads_initialize_once(store):
    count = CountingInitializer()
    v = store.get_variable("shared", [100], initializer=count)
    results = []
    threads = [threading.Thread(target=lambda: results.append(v.numpy().sum())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count.calls == 1 and results == [100.0] * 8

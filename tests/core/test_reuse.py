"""get_variable's reuse rules (varstore/store/reuse.py): sharing, refusing, and the spec of a new variable, as tf.compat.v1."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.store import reuse
from varstore.errors import (
    DtypeMismatchError,
    InitializerError,
    PartitionError,
    ShapeMismatchError,
    VariableExistsError,
    VariableNotFoundError,
)


def test_reuse_true_for_a_missing_name_raises(store):
    with store.variable_scope("foo", reuse=True):
        with pytest.raises(VariableNotFoundError, match=r"'foo/v' does not exist.*AUTO_REUSE"):
            store.get_variable("v", [1])


def test_auto_reuse_gets_or_creates(store):
    def foo():
        with store.variable_scope("foo", reuse=vs.AUTO_REUSE):
            return store.get_variable("v", [1])

    assert foo() is foo()
    assert len(store.variables()) == 1
    assert repr(vs.AUTO_REUSE) == "AUTO_REUSE"


def test_reuse_with_another_shape_or_dtype_names_both(store):
    store.get_variable("w", [2, 3], dtype="float32")
    with store.variable_scope(store.current_scope(), reuse=True):
        with pytest.raises(ShapeMismatchError, match=r"'w'.*\(3, 3\).*\(2, 3\)"):
            store.get_variable("w", [3, 3])
        with pytest.raises(ShapeMismatchError, match=r"'w'"):
            store.get_variable("w", [2])
        with pytest.raises(DtypeMismatchError, match=r"'w'.*float64.*float32"):
            store.get_variable("w", [2, 3], dtype="float64")
        assert store.get_variable("w", [None, 3]).shape == (2, 3)  # None matches any size
        assert store.get_variable("w").dtype == np.float32  # no dtype given: not checked


def test_existing_variable_applies_the_reuse_modes_in_tf1_order(store):
    w = store.get_variable("w", [2])
    assert reuse.existing_variable("w", True, w, partitioned=False, weak_exists=False, shape=(2,), dtype=None) is w
    assert reuse.existing_variable("x", vs.AUTO_REUSE, None, partitioned=False, weak_exists=False,
                                   shape=None, dtype=None) is None
    with pytest.raises(VariableExistsError, match=r"'w' already exists; to share it"):
        reuse.existing_variable("w", False, w, partitioned=False, weak_exists=False, shape=None, dtype=None)
    with pytest.raises(PartitionError, match=r"partitioned variable 'w'"):
        reuse.existing_variable("w", True, w, partitioned=True, weak_exists=False, shape=None, dtype=None)
    with pytest.raises(VariableNotFoundError, match=r"'x' does not exist"):
        reuse.existing_variable("x", True, None, partitioned=False, weak_exists=False, shape=None, dtype=None)
    with pytest.raises(VariableExistsError, match=r"'x' already exists, created with Variable"):
        reuse.existing_variable("x", False, None, partitioned=False, weak_exists=True, shape=None, dtype=None)


def test_new_variable_spec_takes_shape_and_dtype_from_a_value_and_defaults_the_initializer():
    asked = []

    def pending(name):
        asked.append(name)
        return None

    shape, dtype, init, source = reuse.new_variable_spec("a/v", None, None, [[1.0, 2.0]], pending)
    assert (shape, dtype, source) == ((1, 2), np.dtype(np.float32), None)
    np.testing.assert_array_equal(init, np.array([[1.0, 2.0]], np.float32))
    assert asked == ["a/v"]
    shape, dtype, init, _ = reuse.new_variable_spec("b", [3], "int32", None, pending)
    assert (shape, dtype, type(init).__name__) == ((3,), np.dtype(np.int32), "Zeros")
    _, _, init, _ = reuse.new_variable_spec("c", [3], None, vs.initializers.Ones, pending)
    assert type(init).__name__ == "Ones"  # an Initializer class is instantiated
    with pytest.raises(ShapeMismatchError, match=r"get_variable\('d'\): shape \(4,\) differs"):
        reuse.new_variable_spec("d", [4], None, np.zeros(3), pending)
    with pytest.raises(InitializerError, match=r"get_variable\('e'\) needs a fully defined shape"):
        reuse.new_variable_spec("e", [None], None, None, pending)
    with pytest.raises(InitializerError, match=r"complex64 has no default initializer"):
        reuse.new_variable_spec("f", [1], "complex64", None, pending)

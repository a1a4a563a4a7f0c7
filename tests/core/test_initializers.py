"""Behavior 8: initializer formulas (TF2 Keras), defaults, reproducibility from (seed, name), callables."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import varstore as vs
from varstore import initializers as init
from varstore.errors import InitializerError, ShapeMismatchError
from varstore.store.variables import Variable


@pytest.mark.parametrize("shape, fans", [
    ((), (1, 1)), ((7,), (7, 7)), ((3, 5), (3, 5)),
    ((5, 5, 32, 64), (5 * 5 * 32, 5 * 5 * 64)), ((3, 16, 8), (3 * 16, 3 * 8)),
])
def test_fans_as_tf2(shape, fans):
    assert init.compute_fans(shape) == fans


def test_exact_values_of_deterministic_initializers():
    assert init.zeros()((2, 2), "int8").tolist() == [[0, 0], [0, 0]]
    assert init.zeros()((2,)).dtype == np.float32
    assert init.ones()((3,), "float64").tolist() == [1.0, 1.0, 1.0]
    assert init.constant(0.25)((2,)).tolist() == [0.25, 0.25]
    assert init.constant([1, 2])((2, 2), "int32").tolist() == [[1, 2], [1, 2]]  # broadcast
    assert init.constant([1, 2, 3, 4, 5, 6])((2, 3)).tolist() == [[1, 2, 3], [4, 5, 6]]  # TF1 reshape
    with pytest.raises(InitializerError, match="fits neither"):
        init.constant([1, 2, 3])((2, 2))
    assert init.identity()((2, 3)).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert init.identity(gain=2.0)((2, 2), "float64").tolist() == [[2, 0], [0, 2]]
    with pytest.raises(InitializerError, match="2-D"):
        init.identity()((2, 2, 2))


def test_glorot_uniform_bounds_and_std():
    shape = (300, 200)
    values = init.glorot_uniform(seed=1)(shape, np.float32, name="w")
    limit = math.sqrt(6.0 / (300 + 200))
    assert values.dtype == np.float32 and values.shape == shape
    assert values.max() <= limit and values.min() >= -limit
    assert values.max() > 0.99 * limit and values.min() < -0.99 * limit
    assert values.std() == pytest.approx(limit / math.sqrt(3.0), rel=0.02)
    assert abs(values.mean()) < 0.002


@pytest.mark.parametrize("factory, scale, fan", [
    (init.glorot_normal, 1.0, "avg"), (init.he_normal, 2.0, "in"), (init.lecun_normal, 1.0, "in"),
])
def test_truncated_normal_variance_scaling_has_the_target_variance(factory, scale, fan):
    shape = (3, 3, 64, 128)
    fan_in, fan_out = 3 * 3 * 64, 3 * 3 * 128
    n = {"avg": (fan_in + fan_out) / 2, "in": fan_in}[fan]
    values = factory(seed=3)(shape, np.float32, name="k")
    target = math.sqrt(scale / n)  # the 0.8796 correction restores this after truncation
    raw_stddev = target / 0.87962566103423978
    assert np.abs(values).max() <= 2 * raw_stddev + 1e-7  # truncated at 2 stddev
    assert values.std() == pytest.approx(target, rel=0.02)


def test_uniform_variance_scaling_limits():
    values = init.he_uniform(seed=0)((50, 40), "float64", name="k")
    assert np.abs(values).max() <= math.sqrt(6.0 / 50)
    values = init.variance_scaling(scale=3.0, mode="fan_out", distribution="uniform", seed=0)((50, 40), name="k")
    assert np.abs(values).max() <= math.sqrt(3 * 3.0 / 40)
    untruncated = init.variance_scaling(distribution="untruncated_normal", seed=0)((400, 100), name="u")
    assert untruncated.std() == pytest.approx(math.sqrt(1 / 400), rel=0.03)
    assert np.abs(untruncated).max() > 2 * math.sqrt(1 / 400)  # not truncated
    with pytest.raises(InitializerError, match="mode"):
        init.variance_scaling(mode="fan_sum")
    with pytest.raises(InitializerError, match="scale"):
        init.variance_scaling(scale=0.0)


def test_random_normal_uniform_truncated_defaults_and_ranges():
    normal = init.random_normal(seed=0)((20000,), name="n")
    assert normal.mean() == pytest.approx(0.0, abs=0.002) and normal.std() == pytest.approx(0.05, rel=0.03)
    uniform = init.random_uniform(seed=0)((20000,), name="u")
    assert uniform.min() >= -0.05 and uniform.max() < 0.05
    ints = init.random_uniform(0, 10, seed=0)((1000,), "int32", name="i")
    assert ints.dtype == np.int32 and ints.min() == 0 and ints.max() == 9
    truncated = init.truncated_normal(mean=1.0, stddev=0.5, seed=0)((20000,), name="t")
    assert truncated.min() >= 0.0 and truncated.max() <= 2.0
    with pytest.raises(InitializerError, match="floating"):
        init.random_normal()((2,), "int32")


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 3, 5, 2)])
def test_orthogonal_is_orthogonal(shape):
    q = init.orthogonal(gain=1.5, seed=2)(shape, "float64", name="q")
    flat = q.reshape(-1, shape[-1])
    small = flat.T @ flat if flat.shape[0] >= flat.shape[1] else flat @ flat.T
    np.testing.assert_allclose(small, 1.5 ** 2 * np.eye(small.shape[0]), atol=1e-10)
    with pytest.raises(InitializerError, match="at least 2"):
        init.orthogonal()((3,))


def test_bfloat16_is_supported():
    values = init.glorot_uniform(seed=0)((4, 4), ml_dtypes.bfloat16, name="b")
    assert values.dtype == np.dtype(ml_dtypes.bfloat16)


def test_seeded_values_depend_on_seed_and_full_name_not_creation_order():
    def build(order):
        store = vs.VariableStore()
        with store.variable_scope("net"):
            made = {n: store.get_variable(n, [3, 4], initializer=init.glorot_uniform(seed=7)) for n in order}
        return {n: v.numpy() for n, v in made.items()}

    first, second = build(["a", "b"]), build(["b", "a"])
    np.testing.assert_array_equal(first["a"], second["a"])
    np.testing.assert_array_equal(first["b"], second["b"])
    assert not np.array_equal(first["a"], first["b"])
    direct = init.glorot_uniform(seed=7)((3, 4), np.float32, name="net/a")
    np.testing.assert_array_equal(first["a"], direct)


def test_global_seed_is_used_when_the_initializer_has_none(store):
    vs.set_random_seed(42)
    assert vs.get_random_seed() == 42
    a = store.get_variable("a", [5]).numpy()  # default glorot_uniform
    other = vs.VariableStore()
    np.testing.assert_array_equal(other.get_variable("a", [5]).numpy(), a)
    vs.set_random_seed(43)
    assert not np.array_equal(vs.VariableStore().get_variable("a", [5]).numpy(), a)
    vs.set_random_seed(None)
    x, y = vs.VariableStore().get_variable("a", [50]).numpy(), vs.VariableStore().get_variable("a", [50]).numpy()
    assert not np.array_equal(x, y)  # no seed: fresh entropy


def test_default_initializers_by_dtype(store):
    w = store.get_variable("w", [10, 10])
    assert w.dtype == np.float32 and np.abs(w.numpy()).max() <= math.sqrt(6 / 20) and w.numpy().std() > 0
    assert store.get_variable("i", [3], dtype="int64").numpy().tolist() == [0, 0, 0]
    assert store.get_variable("b", [2], dtype=bool).numpy().tolist() == [False, False]
    with pytest.raises(InitializerError, match="complex128.*initializer"):
        store.get_variable("c", [2], dtype="complex128")


def test_array_or_variable_initializer_gives_the_shape(store):
    a = store.get_variable("a", initializer=np.arange(6, dtype=np.int64).reshape(2, 3))
    assert a.shape == (2, 3) and a.dtype == np.int64 and a.numpy()[1, 2] == 5
    b = store.get_variable("b", initializer=[1.0, 2.0])
    assert b.shape == (2,) and b.dtype == np.float32
    src = Variable([1.0, 2.0, 3.0], store=store)
    c = store.get_variable("c", initializer=src)
    assert c.shape == (3,) and c.numpy().tolist() == [1, 2, 3]
    d = store.get_variable("d", [2, 3], initializer=np.ones((2, 3)))
    assert d.dtype == np.float64
    with pytest.raises(ShapeMismatchError, match=r"'e'.*\(3, 2\).*\(2, 3\)"):
        store.get_variable("e", [3, 2], initializer=np.ones((2, 3)))


def test_any_callable_and_initializer_classes_work(store):
    f = store.get_variable("f", [2, 2], initializer=lambda shape, dtype: np.full(shape, 3, dtype=dtype))
    assert f.numpy().tolist() == [[3, 3], [3, 3]]
    g = store.get_variable("g", [2], initializer=init.Ones)  # a class is instantiated, as TF1
    assert g.numpy().tolist() == [1, 1]
    bad = store.get_variable("bad", [2], initializer=lambda shape, dtype: np.zeros(3))
    with pytest.raises(ShapeMismatchError, match=r"'bad'.*\(3,\).*\(2,\)"):
        bad.numpy()
    assert not bad.is_initialized
    with pytest.raises(InitializerError, match="shape"):
        store.get_variable("noshape")

"""Issue 27 item 4: the tf.compat.v1.*_initializer spellings keep TF1's defaults; vs.initializers keeps TF2's.

Statistics are checked on 1000 x 1000 draws with a fixed seed against TF's
formulas (tensorflow/python/ops/init_ops.py for TF1, keras initializers for TF2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import varstore as vs
from varstore.store import initializers_v1 as v1
from varstore.errors import InitializerError

SHAPE = (1000, 1000)
# stddev of a standard normal truncated to [-2, 2] (TF's 0.87962566103423978 correction)
TRUNCATED_STD = 0.87962566103423978


def draw(initializer, shape=SHAPE, dtype=np.float32):
    return initializer(shape, dtype, name="w")


def test_random_normal_initializer_has_stddev_one_as_tf1():
    values = draw(vs.random_normal_initializer(seed=1))
    assert values.dtype == np.float32
    assert abs(values.mean()) < 0.005 and abs(values.std() - 1.0) < 0.005
    tf2 = draw(vs.initializers.random_normal(seed=1))
    assert abs(tf2.std() - 0.05) < 0.0005  # TF2 (tf.keras / tf.random_normal_initializer in TF 2.x)


def test_truncated_normal_initializer_has_stddev_one_before_truncation():
    values = draw(vs.truncated_normal_initializer(seed=2))
    assert np.abs(values).max() <= 2.0
    assert abs(values.std() - TRUNCATED_STD) < 0.005
    assert abs(draw(vs.initializers.truncated_normal(seed=2)).std() - 0.05 * TRUNCATED_STD) < 0.0005


def test_random_uniform_initializer_draws_in_zero_one():
    values = draw(vs.random_uniform_initializer(seed=3))
    assert values.min() >= 0.0 and values.max() < 1.0
    assert abs(values.mean() - 0.5) < 0.005 and abs(values.std() - math.sqrt(1 / 12)) < 0.005
    tf2 = draw(vs.initializers.random_uniform(seed=3))
    assert tf2.min() >= -0.05 and tf2.max() < 0.05
    ints = vs.random_uniform_initializer(0, 10, seed=3)((1000,), np.int32, name="i")
    assert ints.dtype == np.int32 and ints.min() == 0 and ints.max() == 9
    with pytest.raises(InitializerError, match="maxval for integer dtype int32"):
        vs.random_uniform_initializer()((3,), np.int32)


def test_constant_initializer_fills_the_rest_with_the_last_value():
    init = vs.constant_initializer([0, 1, 2, 3, 4, 5, 6, 7])  # TF1's docstring example
    np.testing.assert_array_equal(init((2, 4), np.float32), [[0, 1, 2, 3], [4, 5, 6, 7]])
    np.testing.assert_array_equal(init((3, 4), np.float32), [[0, 1, 2, 3], [4, 5, 6, 7], [7, 7, 7, 7]])
    with pytest.raises(InitializerError, match="needed at most 6, but received 8"):
        init((2, 3), np.float32)
    with pytest.raises(InitializerError, match=r"verify_shape=True\): expected the value's shape to be \(3, 4\), got \(8,\)"):
        vs.constant_initializer([0, 1, 2, 3, 4, 5, 6, 7], verify_shape=True)((3, 4), np.float32)
    np.testing.assert_array_equal(vs.constant_initializer(2.5)((2, 2), np.float64), np.full((2, 2), 2.5))
    assert vs.constant_initializer()((2,), np.float32).tolist() == [0.0, 0.0]


def test_constant_initializer_through_get_variable(store):
    with store.variable_scope("c"):
        x = store.get_variable("x", shape=[3, 4], initializer=vs.constant_initializer([0, 1, 2, 3, 4, 5, 6, 7]))
    assert x.numpy().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [7, 7, 7, 7]]


def test_variance_scaling_initializer_defaults_as_tf1():
    init = vs.variance_scaling_initializer(seed=4)
    assert (init.scale, init.mode, init.distribution) == (1.0, "fan_in", "truncated_normal")
    values = draw(init)  # stddev sqrt(1 / fan_in) after truncation
    assert abs(values.std() - math.sqrt(1 / 1000)) < 0.0002
    assert np.abs(values).max() <= 2 * math.sqrt(1 / 1000) / TRUNCATED_STD + 1e-6
    assert vs.variance_scaling_initializer(distribution="normal").distribution == "truncated_normal"


def test_glorot_initializers_as_tf1():
    values = draw(vs.glorot_uniform_initializer(seed=5), (1000, 500))
    limit = math.sqrt(6 / 1500)
    assert np.abs(values).max() <= limit and abs(values.std() - limit / math.sqrt(3)) < 0.0005
    normal = draw(vs.glorot_normal_initializer(seed=5), (1000, 500))
    assert abs(normal.std() - math.sqrt(2 / 1500)) < 0.0005


def test_zeros_ones_and_the_constructor_dtype():
    assert vs.zeros_initializer()((2,)).dtype == np.float32
    assert vs.zeros_initializer(dtype=np.int64)((2,)).tolist() == [0, 0]
    assert vs.zeros_initializer(dtype=np.int64)((2,)).dtype == np.int64
    assert vs.ones_initializer()((2, 1), np.float16).tolist() == [[1.0], [1.0]]
    assert vs.random_normal_initializer(dtype=np.float64)((3,), name="x").dtype == np.float64


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 2, 4)])
def test_orthogonal_initializer_is_orthogonal(shape):
    q = vs.orthogonal_initializer(gain=2.0, seed=6)(shape, np.float64, name="q").reshape(-1, shape[-1])
    rows, cols = q.shape
    product = q.T @ q if rows >= cols else q @ q.T
    np.testing.assert_allclose(product, 4.0 * np.eye(min(rows, cols)), atol=1e-10)


def test_tf1_classes_are_the_tf1_module_s():
    assert vs.random_normal_initializer is v1.RandomNormal and vs.initializers_v1 is v1
    assert vs.initializers.random_normal is vs.initializers.RandomNormal
    same_seed = vs.random_normal_initializer(stddev=0.05, seed=7)((4,), name="n")
    np.testing.assert_array_equal(same_seed, vs.initializers.RandomNormal(seed=7)((4,), name="n"))

"""Behavior 9: variable scopes, TF1 reuse rules, scope objects, defaults, the guide's my_image_filter example."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import varstore as vs
from varstore.errors import ScopeError, VariableExistsError
from varstore.store.variables import Variable


def conv2d_same(images: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """NHWC convolution with stride 1 and 'SAME' padding (tf.nn.conv2d), in NumPy."""
    kh, kw = kernel.shape[:2]
    padded = np.pad(images, ((0, 0), (kh // 2, (kh - 1) // 2), (kw // 2, (kw - 1) // 2), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(1, 2))
    return np.einsum("nhwcij,ijco->nhwo", windows, kernel)


def conv_relu(store, images, kernel_shape, bias_shape):
    weights = store.get_variable("weights", kernel_shape, initializer=vs.initializers.random_normal())
    biases = store.get_variable("biases", bias_shape, initializer=vs.initializers.constant(0.0))
    return np.maximum(conv2d_same(images, np.asarray(weights)) + biases, 0.0)


def my_image_filter(store, images):
    with store.variable_scope("conv1"):
        relu1 = conv_relu(store, images, [5, 5, 32, 32], [32])
    with store.variable_scope("conv2"):
        return conv_relu(store, relu1, [5, 5, 32, 32], [32])


@pytest.fixture
def images():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2, 6, 6, 32)).astype(np.float32), rng.standard_normal((2, 6, 6, 32)).astype(np.float32)


def test_guide_example_second_call_without_reuse_fails(store, images):
    result1 = my_image_filter(store, images[0])
    assert result1.shape == (2, 6, 6, 32) and (result1 >= 0).all()
    with pytest.raises(VariableExistsError, match=r"'conv1/weights' already exists.*reuse=True.*AUTO_REUSE"):
        my_image_filter(store, images[1])
    assert [v.name for v in store.variables()] == ["conv1/weights", "conv1/biases", "conv2/weights", "conv2/biases"]


def test_conv2d_same_matches_a_direct_loop():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 4, 2))
    k = rng.standard_normal((3, 3, 2, 1))
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    direct = np.array([[sum((padded[0, i:i + 3, j:j + 3, :] * k[..., 0]).ravel()) for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(conv2d_same(x, k)[0, ..., 0], direct)


@pytest.mark.parametrize("style", ["reuse=True", "reuse_variables", "scope object", "AUTO_REUSE"])
def test_guide_example_shares_variables(store, images, style):
    if style == "reuse=True":
        with store.variable_scope("model"):
            output1 = my_image_filter(store, images[0])
        with store.variable_scope("model", reuse=True):
            output2 = my_image_filter(store, images[1])
    elif style == "reuse_variables":
        with store.variable_scope("model") as scope:
            output1 = my_image_filter(store, images[0])
            scope.reuse_variables()
            output2 = my_image_filter(store, images[1])
    elif style == "scope object":
        with store.variable_scope("model") as scope:
            output1 = my_image_filter(store, images[0])
        with store.variable_scope(scope, reuse=True):
            output2 = my_image_filter(store, images[1])
    else:
        with store.variable_scope("model", reuse=vs.AUTO_REUSE):
            output1 = my_image_filter(store, images[0])
            output2 = my_image_filter(store, images[1])
    names = [v.name for v in store.variables()]
    assert names == ["model/conv1/weights", "model/conv1/biases", "model/conv2/weights", "model/conv2/biases"]
    # same weights: the second filter applied to the first input gives the first output
    with store.variable_scope("model", reuse=True):
        again = my_image_filter(store, images[0])
    np.testing.assert_array_equal(again, output1)
    assert not np.array_equal(output1, output2)


def test_scopes_nest(store):
    with store.variable_scope("foo"):
        with store.variable_scope("bar"):
            v = store.get_variable("v", [1])
    assert v.name == "foo/bar/v"
    with store.variable_scope("image_filters/conv1"):
        assert store.get_variable("weights", [1]).name == "image_filters/conv1/weights"
        assert store.current_scope().name == "image_filters/conv1"
    assert store.current_scope().name == ""


def test_reuse_is_inherited_and_cannot_be_turned_off_inside(store):
    with store.variable_scope("root"):
        assert store.current_scope().reuse is False
        with store.variable_scope("foo"):
            v = store.get_variable("v", [1])
        with store.variable_scope("foo", reuse=True):
            assert store.current_scope().reuse is True
            with store.variable_scope("bar"):
                assert store.current_scope().reuse is True
            with store.variable_scope("bar", reuse=False):  # False means "inherit", as TF1
                assert store.current_scope().reuse is True
        with store.variable_scope("foo", reuse=vs.AUTO_REUSE):
            with store.variable_scope("deeper"):
                assert store.current_scope().reuse is vs.AUTO_REUSE
        assert store.current_scope().reuse is False
    with store.variable_scope("root/foo", reuse=True):
        assert store.get_variable("v") is v


def test_scope_object_reenters_by_its_absolute_name(store):
    with store.variable_scope("foo") as foo_scope:
        v = store.get_variable("v", [1])
    with store.variable_scope("bar"):
        with store.variable_scope(foo_scope, reuse=True) as again:
            assert again.name == "foo" and again.original_name_scope == "foo/"
            assert store.get_variable("v") is v
        with store.variable_scope(foo_scope):
            w = store.get_variable("w", [1])  # the scope object is not reusing: creation works
            assert w.name == "foo/w"
    with store.variable_scope("foo") as reused:
        reused.reuse_variables()
        assert store.get_variable("v") is v
    with store.variable_scope(reused):  # the object remembers reuse=True
        assert store.current_scope().reuse is True


def test_default_name_is_made_unique_within_the_parent(store):
    names = []
    with store.variable_scope("net"):
        for _ in range(3):
            with store.variable_scope(None, default_name="dense"):
                names.append(store.get_variable("kernel", [1]).name)
    with store.variable_scope("net", reuse=True):
        with store.variable_scope(None, default_name="dense") as scope:
            names.append(scope.name)  # counters reset when the parent is re-entered, as TF1
    assert names == ["net/dense/kernel", "net/dense_1/kernel", "net/dense_2/kernel", "net/dense"]
    with store.variable_scope("x"):
        pass
    with store.variable_scope(None, default_name="x") as scope:
        assert scope.name == "x_1"


def test_scope_errors(store):
    with pytest.raises(ScopeError, match="default_name"):
        with store.variable_scope(None):
            pass
    with pytest.raises(ScopeError, match="reuse=True"):
        with store.variable_scope(None, default_name="d", reuse=True):
            pass
    other = vs.VariableStore()
    with other.variable_scope("o") as foreign:
        pass
    with pytest.raises(ScopeError, match="another VariableStore"):
        with store.variable_scope(foreign):
            pass


def test_scope_initializer_and_dtype_defaults_are_inherited(store):
    with store.variable_scope("a", initializer=vs.initializers.constant(0.5), dtype="float64"):
        with store.variable_scope("b"):
            v = store.get_variable("v", [2])
            u = store.get_variable("u", [1], initializer=vs.initializers.ones(), dtype="float16")
        scope = store.current_scope()
        scope.set_initializer(vs.initializers.zeros())
        w = store.get_variable("w", [1])
    assert v.dtype == np.float64 and v.numpy().tolist() == [0.5, 0.5]
    assert u.dtype == np.float16 and u.numpy().tolist() == [1.0]
    assert w.numpy().tolist() == [0.0]


def test_variable_inside_a_store_scope_registers_with_that_store(store):
    with store.variable_scope("s"):
        assert vs.get_default_store() is store
        v = Variable([1.0])
        w = vs.get_variable("w", [1])
    assert v.name == "s/Variable" and w.name == "s/w"
    assert store.get_variable_by_name("s/Variable") is v and store.get_variable_by_name("s/w") is w
    assert vs.get_default_store() is not store
    assert vs.get_default_store().variables() == []


def test_scopes_are_per_thread(store):
    seen = []
    entered, release = threading.Event(), threading.Event()

    def other_thread():
        entered.wait()
        seen.append(store.current_scope().name)
        seen.append(store.get_variable("t", [1]).name)
        release.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with store.variable_scope("main_thread"):
        entered.set()
        release.wait()
    thread.join()
    assert seen == ["", "t"]

"""Behaviors 1, 3, 4: creation and dtypes, in-place assign with checks, copies and read_value."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from varstore.errors import DtypeMismatchError, ShapeMismatchError, UnsupportedDtypeError
from varstore.store.variables import Variable


def _pointer(v: Variable) -> int:
    return v.host_view().ctypes.data


# ---------------------------------------------------------------- behavior 1
@pytest.mark.parametrize("value, dtype", [
    (1.5, np.float32),
    ([[1.0, 1.0, 0.0], [9.0, 9.0, 6.0]], np.float32),
    ([1, 2, 3], np.int32),
    (7, np.int32),
    ([1, 2.5], np.float32),
    (1 + 2j, np.complex128),
    ([False, False, False, True], np.bool_),
    ([2**40], np.int64),
])
def test_python_values_follow_the_tf_dtype_convention(store, value, dtype):
    v = Variable(value, store=store)
    assert v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v.numpy(), np.asarray(value, dtype=dtype))


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float16, np.uint8, np.complex64, ml_dtypes.bfloat16])
def test_arrays_keep_their_dtype(store, dtype):
    value = np.arange(6).reshape(2, 3).astype(dtype)
    v = Variable(value, store=store)
    assert v.dtype == np.dtype(dtype)
    assert v.shape == (2, 3) and v.ndim == 2 and v.size == 6
    assert v.nbytes == 6 * np.dtype(dtype).itemsize
    np.testing.assert_array_equal(v.numpy(), value)


def test_numpy_scalars_keep_their_dtype(store):
    assert Variable(np.float64(2.0), store=store).dtype == np.float64
    assert Variable(np.int8(3), store=store).shape == ()


def test_issue_example_attributes(store):
    v = Variable([[1.0, 1.0, 0.0], [9.0, 9.0, 6.0]], store=store)
    assert (v.shape, v.dtype, v.name, v.device, v.trainable) == ((2, 3), np.float32, "Variable", "cpu:0", True)
    host = v.numpy()
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    host[0, 0] = 100.0  # a copy: the variable is unchanged
    assert v.numpy()[0, 0] == 1.0


def test_explicit_dtype_casts_same_kind_only(store):
    assert Variable([1, 2], dtype=np.float16, store=store).dtype == np.float16
    assert Variable(np.arange(3), dtype="float32", store=store).numpy().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(DtypeMismatchError, match="int32"):
        Variable([1.5, 2.5], dtype=np.int32, store=store)
    with pytest.raises(DtypeMismatchError, match="int8"):
        Variable(np.array([1.0]), dtype=np.int8, store=store)


def test_object_and_ragged_values_are_rejected(store):
    with pytest.raises(UnsupportedDtypeError):
        Variable([[1, 2], [3]], store=store)
    with pytest.raises(UnsupportedDtypeError):
        Variable(np.array([object()]), store=store)


def test_callable_initial_value_is_called_once(store):
    calls = []
    v = Variable(lambda: calls.append(1) or np.ones(2), store=store)
    assert calls == [1] and v.numpy().tolist() == [1.0, 1.0]


def test_trainable_false(store):
    step = Variable(1, trainable=False, store=store)
    assert step.trainable is False and step.dtype == np.int32


# ---------------------------------------------------------------- behavior 3
def test_assign_reuses_the_buffer_and_casts(store):
    v = Variable([[1.0, 1.0, 0.0], [9.0, 9.0, 6.0]], store=store)
    before = _pointer(v)
    result = v.assign([[1, 2, 3], [4, 5, 6]])
    assert result is v
    assert _pointer(v) == before
    assert v.dtype == np.float32
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 3], [4, 5, 6]])
    v.assign(np.full((2, 3), 0.5, dtype=np.float64))  # float64 -> float32 is same_kind
    assert _pointer(v) == before and v.numpy()[1, 2] == 0.5


def test_assign_rejects_a_shape_change_naming_variable_and_shapes(store):
    v = Variable([[1.0, 1.0, 0.0], [9.0, 9.0, 6.0]], name="w", store=store)
    with pytest.raises(ShapeMismatchError, match=r"'w'.*\(2, 3\)") as info:
        v.assign([1.0, 2.0, 3.0])
    assert "(3,)" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ShapeMismatchError, match=r"\(\).*'w'"):
        v.assign(1.0)  # TF: assign needs the exact shape, no broadcasting
    np.testing.assert_array_equal(v.numpy(), [[1, 1, 0], [9, 9, 6]])


def test_assign_rejects_unsafe_casts(store):
    v = Variable([1, 2, 3], name="counts", store=store)  # int32
    with pytest.raises(DtypeMismatchError, match="counts"):
        v.assign([1.5, 2.0, 3.0])
    with pytest.raises(DtypeMismatchError, match="float64.*int32"):
        v.assign(np.array([1.0, 2.0, 3.0]))
    with pytest.raises(DtypeMismatchError, match="overflows"):
        Variable(np.zeros(2, np.int8), name="small", store=store).assign([1, 300])
    f = Variable([1.0, 2.0], store=store)
    with pytest.raises(DtypeMismatchError):
        f.assign(np.array([1 + 1j, 2]))
    np.testing.assert_array_equal(v.numpy(), [1, 2, 3])


def test_python_ints_assign_to_unsigned_and_int8(store):
    u = Variable(np.zeros(3, np.uint8), store=store)
    u.assign([1, 2, 255])
    assert u.numpy().tolist() == [1, 2, 255]
    u.assign_add(1)
    assert u.numpy().tolist() == [2, 3, 0]  # uint8 wraps, as NumPy


def test_assign_add_and_sub_in_place_with_broadcasting(store):
    v = Variable([[1.0, 2.0], [3.0, 4.0]], store=store)
    before = _pointer(v)
    assert v.assign_add(1) is v
    np.testing.assert_array_equal(v.numpy(), [[2, 3], [4, 5]])
    assert v.assign_sub([1.0, 2.0]) is v  # broadcasts over rows
    np.testing.assert_array_equal(v.numpy(), [[1, 1], [3, 3]])
    assert _pointer(v) == before
    with pytest.raises(ShapeMismatchError, match=r"assign_add.*\(3,\).*\(2, 2\)"):
        v.assign_add([1.0, 2.0, 3.0])
    with pytest.raises(ShapeMismatchError, match=r"\(2, 2, 2\)"):
        v.assign_sub(np.ones((2, 2, 2)))
    with pytest.raises(DtypeMismatchError):
        Variable([1, 2], store=store).assign_add(0.5)


def test_in_place_operators_update_the_variable(store):
    v = Variable([1.0, 2.0], store=store)
    alias = v
    v += 1
    v -= 0.5
    v *= 2
    v /= 4
    assert v is alias
    np.testing.assert_allclose(v.numpy(), [0.75, 1.25])


# ---------------------------------------------------------------- behavior 4
def test_variable_from_variable_copies(store):
    a = Variable([1.0, 2.0], store=store)
    b = Variable(a, store=store)
    assert not np.shares_memory(a.host_view(), b.host_view())
    a.assign([5.0, 6.0])
    assert b.numpy().tolist() == [1.0, 2.0]
    assert b.dtype == a.dtype and b.name == "Variable_1"


def test_read_value_is_a_copy_reflecting_every_assign(store):
    v = Variable([1, 2, 3], store=store)
    first = v.read_value()
    v.assign([4, 5, 6])
    v.assign_add(1)
    assert first.tolist() == [1, 2, 3]
    second = v.read_value()
    assert second.tolist() == [5, 6, 7]
    second[0] = 0
    assert v.numpy().tolist() == [5, 6, 7]
    assert v.value().tolist() == [5, 6, 7]


def test_repr_shows_name_shape_dtype_device_and_value(store):
    v = Variable([1.0, 2.0], name="w", store=store)
    assert repr(v) == "<varstore.Variable 'w' shape=(2,) dtype=float32 device=cpu:0, numpy=[1., 2.]>"


def test_variables_are_not_picklable(store):
    v = Variable([1.0], store=store)
    with pytest.raises(TypeError, match="checkpoint"):
        v.__reduce_ex__(4)  # what pickle calls; varstore never pickles


# ---------------------------------------------------------------- generated
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from varstore.store.scopes import VariableStore  # noqa: E402

_DTYPES = st.sampled_from(["float32", "float64", "float16", "int8", "int32", "uint16", "complex64", "bool"])


@given(data=st.data(), dtype=_DTYPES, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
def test_generated_values_round_trip_and_assign_in_place(data, dtype, shape):
    store = VariableStore()
    first = data.draw(hnp.arrays(dtype, shape))
    second = data.draw(hnp.arrays(dtype, shape))
    v = Variable(first, store=store)
    assert v.shape == shape and v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v.numpy(), first)
    before = v.host_view().__array_interface__["data"][0]
    assert v.assign(second) is v
    np.testing.assert_array_equal(v.read_value(), second)
    assert v.host_view().__array_interface__["data"][0] == before

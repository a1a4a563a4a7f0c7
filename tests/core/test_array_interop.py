"""Behavior 2: NumPy functions, ufuncs and operators; fixed shape; DLPack; indexing and iteration."""

from __future__ import annotations

import numpy as np
import pytest

from varstore.errors import ReshapeError
from varstore.store.variables import Variable


@pytest.fixture
def v(store):
    return Variable([[1.0, 1.0, 0.0], [9.0, 9.0, 6.0]], name="v", store=store)


def test_numpy_functions_return_plain_arrays(v):
    assert np.argmax(v, axis=0).tolist() == [1, 1, 1]
    total = np.sum(v)
    assert total == 26.0 and not isinstance(total, Variable)
    mean = np.mean(v, axis=1)
    assert type(mean) is np.ndarray and mean.tolist() == [pytest.approx(2 / 3), 8.0]
    stacked = np.concatenate([v, v])
    assert type(stacked) is np.ndarray and stacked.shape == (4, 3)
    assert np.linalg.norm(v) == pytest.approx(np.sqrt(1 + 1 + 81 + 81 + 36))


def test_np_reshape_returns_a_new_array_not_a_view(v):
    r = np.reshape(v, (1, 6))
    assert type(r) is np.ndarray and r.tolist() == [[1, 1, 0, 9, 9, 6]]
    r[0, 0] = 42.0
    assert v.numpy()[0, 0] == 1.0
    t = np.transpose(v)
    assert not np.shares_memory(t, v.host_view())
    resized = np.resize(v, (3, 3))  # NumPy's np.resize returns a new array
    assert resized.shape == (3, 3) and v.shape == (2, 3)


def test_shape_queries_do_not_materialize(store):
    lazy = store.get_variable("lazy", [4, 5])
    assert np.shape(lazy) == (4, 5) and np.ndim(lazy) == 2 and np.size(lazy) == 20 and len(lazy) == 4
    assert not lazy.is_initialized


def test_variable_cannot_be_reshaped_in_place(v):
    with pytest.raises(ReshapeError, match=r"'v'.*fixed shape \(2, 3\)"):
        v.reshape((3, 2))
    with pytest.raises(ReshapeError, match="fixed shape"):
        v.shape = (6,)
    with pytest.raises(ReshapeError, match="resized"):
        v.resize((6,))
    assert v.shape == (2, 3)


def test_ufuncs_and_operators(v, store):
    w = Variable([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], store=store)
    assert (v * 2).tolist() == [[2, 2, 0], [18, 18, 12]]
    assert (2 * v).tolist() == (v * 2).tolist()
    assert (v + w).tolist() == [[2, 3, 3], [13, 14, 12]]
    assert (w - 1).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert (1 - w).tolist() == [[0, -1, -2], [-3, -4, -5]]
    assert (w / 2)[0].tolist() == [0.5, 1.0, 1.5]
    assert (6 / w)[0].tolist() == [6, 3, 2]
    assert (w // 2).tolist() == [[0, 1, 1], [2, 2, 3]]
    assert (w % 2).tolist() == [[1, 0, 1], [0, 1, 0]]
    assert (w ** 2)[1].tolist() == [16, 25, 36]
    assert (2 ** Variable([1, 2], store=store)).tolist() == [2, 4]
    assert (v @ np.ones(3)).tolist() == [2.0, 24.0]
    assert (np.ones((1, 2)) @ w).tolist() == [[5, 7, 9]]
    assert (-w)[0].tolist() == [-1, -2, -3]
    assert abs(Variable([-1.0, 2.0], store=store)).tolist() == [1, 2]
    assert (w > 2).tolist() == [[False, False, True], [True, True, True]]
    assert (w == v).tolist() == [[True, False, False], [False, False, True]]
    assert (w != v).sum() == 4
    assert (w <= 1).sum() == 1 and (w >= 6).sum() == 1 and (w < 2).sum() == 1
    assert type(np.add(w, np.ones((2, 3)))) is np.ndarray
    assert type(np.ones((2, 3)) + w) is np.ndarray
    b = Variable([True, False], store=store)
    assert (b & True).tolist() == [True, False] and (~b).tolist() == [False, True]
    assert (b | False).tolist() == [True, False] and (b ^ True).tolist() == [False, True]


def test_array_protocol_gives_a_read_only_view_or_a_copy(v):
    view = np.asarray(v)
    assert np.shares_memory(view, v.host_view()) and not view.flags.writeable
    copy = np.array(v)
    assert copy.flags.writeable and not np.shares_memory(copy, v.host_view())
    assert np.asarray(v, dtype=np.float64).dtype == np.float64


def test_ufunc_out_writes_into_the_variable(v):
    result = np.multiply(v, 2, out=v)
    assert result is v
    assert v.numpy().tolist() == [[2, 2, 0], [18, 18, 12]]


def test_indexing_and_iteration_return_copies(v):
    row = v[1]
    assert row.tolist() == [9, 9, 6]
    row[0] = -1
    assert v.numpy()[1, 0] == 9.0
    assert v[0, 2] == 0.0 and v[:, 0].tolist() == [1, 9]
    assert v[np.array([1, 0])].tolist() == [[9, 9, 6], [1, 1, 0]]
    assert [r.tolist() for r in v] == [[1, 1, 0], [9, 9, 6]]
    assert len(v) == 2


def test_scalar_conversions(store):
    s = Variable(3, store=store)
    assert int(s) == 3 and float(s) == 3.0 and bool(s) and complex(s) == 3 + 0j
    assert [10, 20, 30, 40][s] == 40  # __index__ for integer variables
    assert f"{Variable(0.5, store=store):.2f}" == "0.50"
    with pytest.raises(TypeError, match="len"):
        len(s)
    with pytest.raises(TypeError, match="one element"):
        float(Variable([1.0, 2.0], store=store))


def test_dlpack_shares_memory_with_the_variable(v):
    assert v.__dlpack_device__() == (1, 0)
    exported = np.from_dlpack(v)
    assert np.shares_memory(exported, v.host_view())
    assert exported.ctypes.data == v.host_view().ctypes.data
    v.assign_add(1)
    assert exported.tolist() == [[2, 2, 1], [10, 10, 7]]


def test_variables_hash_by_identity(store):
    a = Variable([1.0], store=store)
    b = Variable([1.0], store=store)
    table = {a: "a", b: "b"}
    assert table[a] == "a" and table[b] == "b" and len({a, b, a}) == 2

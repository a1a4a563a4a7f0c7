"""GPU behavior (CuPy): default placement, in-place assign and restore on the device, DLPack, mixed-device ops.

Every test carries @pytest.mark.gpu and is skipped without CuPy and a CUDA device.
"""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.store import devices
from varstore.store.variables import Variable

pytestmark = pytest.mark.gpu


@pytest.fixture
def cp():
    return pytest.importorskip("cupy")


class ArraySource:
    def __init__(self, array, origin="'w' in 'gpu.h5'"):
        self.array, self.origin = np.asarray(array), origin
        self.shape, self.dtype = self.array.shape, self.array.dtype

    def read_into(self, out):
        assert isinstance(out, np.ndarray)
        np.copyto(out, self.array, casting="same_kind")


def test_default_placement_is_gpu0_for_supported_dtypes(store, cp):
    v = Variable([1.0, 2.0], store=store)
    assert v.device == "gpu:0" and isinstance(v._state.buffer, cp.ndarray)
    assert store.get_variable("w", [3]).device == "gpu:0"
    assert Variable(np.zeros(2, vs.initializers.Zeros()((1,), "bfloat16").dtype), store=store).device == "cpu:0"
    with vs.device("cpu:0"):
        assert Variable([1.0], store=store).device == "cpu:0"


def test_assign_is_in_place_on_the_gpu(store, cp):
    v = Variable(np.zeros((4, 4), np.float32), store=store)
    pointer = v._state.buffer.data.ptr
    v.assign(np.ones((4, 4)))
    v.assign_add(cp.ones((4, 4), dtype=cp.float32))
    v.assign_sub(1)
    assert v._state.buffer.data.ptr == pointer
    assert v.numpy().tolist() == np.ones((4, 4)).tolist()
    assert isinstance(v.read_value(), cp.ndarray) and isinstance(v.numpy(), np.ndarray)
    host = v.host_view()
    assert isinstance(host, np.ndarray) and host.sum() == 16.0


def test_restore_from_into_a_gpu_variable(store, cp):
    v = Variable(np.zeros(3, np.float32), name="w", store=store)
    pointer = v._state.buffer.data.ptr
    v.restore_from(ArraySource(np.array([1.0, 2.0, 3.0])))
    assert v._state.buffer.data.ptr == pointer and v.numpy().tolist() == [1.0, 2.0, 3.0]
    lazy = store.get_variable("lazy", [2])
    lazy.restore_from(ArraySource(np.array([5.0, 6.0], np.float32)))
    assert lazy.numpy().tolist() == [5.0, 6.0] and lazy.device == "gpu:0"


def test_dlpack_exports_the_device_buffer(store, cp):
    v = Variable([1.0, 2.0, 3.0], store=store)
    assert v.__dlpack_device__() == (2, 0)
    view = cp.from_dlpack(v)
    assert view.data.ptr == v._state.buffer.data.ptr
    v.assign_add(1.0)
    assert view.get().tolist() == [2.0, 3.0, 4.0]


def test_mixed_device_ops_follow_the_context(store, cp):
    gpu = Variable([1.0, 2.0], store=store)
    cpu = Variable([10.0, 20.0], device="cpu:0", store=store)
    with vs.device("cpu:0"):
        result = gpu + cpu
    assert type(result) is np.ndarray and result.tolist() == [11.0, 22.0]
    with vs.device("gpu:0"):
        result = np.add(cpu, gpu)
    assert isinstance(result, cp.ndarray) and result.get().tolist() == [11.0, 22.0]
    assert devices.device_of_array(result) == "gpu:0"


def test_eager_restore_into_uninitialized_gpu_variables_lands_on_the_device(store, cp, tmp_path):
    """Issue 9: restore(lazy=False) reads, checks and places values of uninitialized GPU variables."""
    path = vs.save(tmp_path / "g.h5", {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    w = store.get_variable("w", [2, 3])
    assert w.device == "gpu:0" and not w.is_allocated
    vs.restore(path, store)
    assert w.is_initialized and isinstance(w._state.buffer, cp.ndarray)
    assert cp.asnumpy(w._state.buffer).tolist() == [[0, 1, 2], [3, 4, 5]]

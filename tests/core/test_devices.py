"""Behaviors 7 and 11: device names, default and soft placement, placement log, mixed-device ops, replica_device_setter."""

from __future__ import annotations

import logging
import numpy as np
import pytest

import varstore as vs
from varstore.store import devices
from varstore.store import placement
from varstore.errors import DeviceError
from varstore.store.variables import Variable


@pytest.fixture
def no_gpu():
    devices._set_gpu_count_override(0)
    yield
    devices._set_gpu_count_override(None)


@pytest.mark.parametrize("spec, label", [
    ("cpu:0", "cpu:0"), ("/cpu:0", "cpu:0"), ("CPU:0", "cpu:0"), ("/device:CPU:3", "cpu:3"),
    ("/device:GPU:0", "gpu:0"), ("gpu:1", "gpu:1"), ("GPU", "gpu:0"), ("cpu", "cpu:0"),
])
def test_device_names_are_normalized(spec, label):
    assert devices.parse_device(spec) == label


@pytest.mark.parametrize("bad", ["tpu:0", "cpu:-1", "/job:ps/task:0", "", "gpu:x"])
def test_malformed_device_names_raise(bad):
    with pytest.raises(DeviceError, match="cpu:N"):
        devices.parse_device(bad)


def test_only_the_device_module_imports_cupy():
    import pathlib
    import re

    root = pathlib.Path(vs.__file__).parent
    importers = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                       if re.search(r"^\s*(import cupy|from cupy)", p.read_text(encoding="utf-8"), re.M))
    assert importers == ["store/devices.py"]


def test_default_placement_without_a_gpu_is_cpu(store, no_gpu):
    assert Variable([1.0], store=store).device == "cpu:0"
    assert store.get_variable("w", [2]).device == "cpu:0"
    assert devices.place(None, np.float32) == "cpu:0"


def test_default_placement_prefers_a_gpu_that_supports_the_dtype(monkeypatch):
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)
    assert devices.place(None, np.float32) == "gpu:0"
    assert devices.place(None, vs.initializers.Zeros()((1,), "bfloat16").dtype) == "cpu:0"  # CuPy has no bfloat16
    assert devices.place(None, np.dtype("U3")) == "cpu:0"


def test_gpu_request_soft_falls_back_to_cpu(store, no_gpu):
    with vs.device("gpu:0"):
        v = Variable([1.0], store=store)
        w = store.get_variable("w", [2])
    assert v.device == "cpu:0" and w.device == "cpu:0"
    assert Variable([1.0], device="/device:GPU:1", store=store).device == "cpu:0"


def test_gpu_request_raises_without_soft_placement(store, no_gpu):
    vs.set_soft_device_placement(False)
    assert vs.get_soft_device_placement() is False
    with pytest.raises(DeviceError, match=r"'gpu_var'.*gpu:0.*no GPU.*soft placement"):
        with vs.device("gpu:0"):
            Variable([1.0], name="gpu_var", store=store)
    assert Variable([1.0], device="cpu:0", store=store).device == "cpu:0"


def test_device_contexts_nest_and_innermost_wins(store):
    with vs.device("cpu:1"):
        a = Variable(1.0, store=store)
        with vs.device("/cpu:2"):
            b = Variable(1.0, store=store)
            with vs.device(None):  # clears outer contexts, as tf.device(None)
                c = Variable(1.0, store=store)
        d = store.get_variable("d", [1])
        e = Variable(1.0, device="cpu:3", store=store)  # explicit argument beats the context
    assert [a.device, b.device, c.device, d.device, e.device] == ["cpu:1", "cpu:2", "cpu:0", "cpu:1", "cpu:3"]


def test_device_function_sees_name_shape_dtype_and_bytes(store):
    seen = []

    def by_size(request: placement.PlacementRequest) -> str:
        seen.append(request)
        return "cpu:1" if request.nbytes > 100 else "cpu:0"

    with vs.device("cpu:5"):
        with vs.device(by_size):
            with store.variable_scope("layer"):
                big = store.get_variable("kernel", [10, 10])
                small = store.get_variable("bias", [10])
    assert (big.device, small.device) == ("cpu:1", "cpu:0")
    assert seen[0] == placement.PlacementRequest("layer/kernel", (10, 10), np.dtype(np.float32), 400)
    assert seen[1].name == "layer/bias" and seen[1].nbytes == 40


def test_device_function_returning_none_defers_to_outer_context(store):
    with vs.device("cpu:4"):
        with vs.device(lambda request: None):
            assert Variable(1.0, store=store).device == "cpu:4"


def test_placement_is_logged(store, caplog):
    vs.set_log_device_placement(True)
    with caplog.at_level(logging.INFO, logger="varstore.placement"):
        with vs.device("cpu:1"):
            Variable([1.0], name="a", store=store)
        with store.variable_scope("s"):
            store.get_variable("b", [1], device="cpu:0")
    messages = [r.getMessage() for r in caplog.records if r.name == "varstore.placement"]
    assert messages == ["a -> cpu:1", "s/b -> cpu:0"]
    vs.set_log_device_placement(False)
    caplog.clear()
    Variable([1.0], store=store)
    assert [r for r in caplog.records if r.name == "varstore.placement"] == []


def test_mixed_device_ops_compute_on_the_context_device(store, no_gpu):
    a = Variable([1.0, 2.0], device="cpu:1", store=store)
    b = Variable([10.0, 20.0], device="cpu:0", store=store)
    with vs.device("cpu:0"):
        total = a + b
        product = np.multiply(a, b)
        stacked = np.stack([a, b])
    assert type(total) is np.ndarray and total.tolist() == [11.0, 22.0]
    assert type(product) is np.ndarray and product.tolist() == [10.0, 40.0]
    assert stacked.shape == (2, 2)
    with vs.device("gpu:0"):  # no GPU here: computes on the CPU
        assert type(a * b) is np.ndarray
    assert placement.compute_device("cpu:0") == "cpu:0"
    with vs.device("gpu:0"):
        assert placement.compute_device("cpu:1") == "cpu:0"


# ------------------------------------------------------------- behavior 11
def test_replica_device_setter_round_robin_in_creation_order(store):
    setter = vs.replica_device_setter(ps_devices=["cpu:0", "cpu:1", "cpu:2"])
    with vs.device(setter):
        created = [store.get_variable(f"v{i}", [i + 1]) for i in range(5)]
    assert [v.device for v in created] == ["cpu:0", "cpu:1", "cpu:2", "cpu:0", "cpu:1"]
    with vs.device(setter), store.variable_scope(store.current_scope(), reuse=True):
        assert store.get_variable("v0").device == "cpu:0"  # reuse does not consume a slot
        with store.variable_scope("new", reuse=vs.AUTO_REUSE):
            assert store.get_variable("x", [1]).device == "cpu:2"


def test_replica_device_setter_greedy_places_on_the_least_loaded_device(store):
    setter = vs.replica_device_setter(ps_devices=["cpu:0", "cpu:1", "cpu:2"], ps_strategy="greedy")
    sizes = [100, 10, 10, 30, 5, 200]  # float32 elements
    with vs.device(setter):
        created = [Variable(np.zeros(n, np.float32), store=store) for n in sizes]
    # loads (bytes): [400,0,0] -> [400,40,0] -> [400,40,40] -> [400,160,40] -> [400,160,60] -> [400,160,860]
    assert [v.device for v in created] == ["cpu:0", "cpu:1", "cpu:2", "cpu:1", "cpu:2", "cpu:2"]
    assert setter.loads == [400, 160, 860]


def test_replica_device_setter_custom_strategy_and_errors(store):
    setter = vs.replica_device_setter(ps_devices=["cpu:0", "/cpu:1"], ps_strategy=lambda request: len(request.name) % 2)
    with vs.device(setter):
        assert Variable(0.0, name="ab", store=store).device == "cpu:0"
        assert Variable(0.0, name="abc", store=store).device == "cpu:1"
    with pytest.raises(DeviceError, match="at least one"):
        vs.replica_device_setter(ps_devices=[])
    with pytest.raises(DeviceError, match="ps_strategy"):
        vs.replica_device_setter(ps_devices=["cpu:0"], ps_strategy="random")


def test_without_a_loaded_cupy_nothing_is_a_device_array_and_nothing_is_staged():
    from varstore.store import device_transfers

    if devices.cupy_if_loaded() is not None:
        pytest.skip("CuPy is loaded with a device in this process")

    class LooksLikeCupy:
        pass

    LooksLikeCupy.__module__ = "cupy._core.core"  # probes CuPy: missing or without a device here
    assert not devices.is_device_array(LooksLikeCupy()) and not devices.is_device_array(np.zeros(2))
    assert not devices.gpu_in_use() and devices.device_of_array(LooksLikeCupy()) == "cpu:0"
    assert device_transfers.release_staging() == 0 and device_transfers.current() is None
    with device_transfers.batch(1 << 20):
        assert device_transfers.current() is not None
        assert not device_transfers.guard(np.zeros(4), None) and not device_transfers.is_staged(np.zeros(4))
    assert device_transfers.current() is None

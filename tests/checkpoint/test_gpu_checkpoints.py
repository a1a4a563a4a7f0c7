"""Checkpoints of CuPy variables: restores through pinned staging (device_transfers) and device-side async snapshots.

Every test carries @pytest.mark.gpu and is skipped without CuPy and a CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from varstore.store import device_transfers, devices
from varstore import restore, save
from varstore.checkpoint import open_varstore
from varstore.errors import ChecksumError
from varstore.store.scopes import VariableStore

from tests.checkpoint.test_eager_restore import _flip

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

_VALUES = {
    "f32": np.arange(40_000, dtype=np.float32).reshape(200, 200),
    "f16": np.linspace(-3, 3, 30_000).astype(np.float16),
    "i8": (np.arange(50_000) % 251 - 125).astype(np.int8),
    "flag": np.arange(70_000) % 3 == 0,
    "c64": (np.arange(9_000) + 1j * np.arange(9_000)).astype(np.complex64),
    "big": np.random.default_rng(0).standard_normal(300_000).astype(np.float32),  # 1.2 MB: above the small ring
    "empty": np.zeros((0, 4), np.float32),
    "scalar": np.array(2.5, np.float64),
}


@pytest.fixture
def small_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256 KiB staging ring: restores wrap around it many times and "big" takes the pageable path."""
    monkeypatch.setattr(device_transfers, "STAGING_MIN_BYTES", 256 << 10)
    monkeypatch.setattr(device_transfers, "STAGING_MAX_BYTES", 256 << 10)
    monkeypatch.setattr(device_transfers, "_idle_rings", {})


def _gpu_store(values: dict[str, np.ndarray], fill: float | None) -> tuple[VariableStore, dict[str, object]]:
    store = VariableStore()
    made = {}
    for name, value in values.items():
        made[name] = store.get_variable(name, value.shape, dtype=value.dtype, device="gpu:0",
                                        initializer=lambda s, d: np.full(s, fill if fill is not None else 0, d))
        if fill is not None:
            made[name].initialize()
    return store, made


@pytest.fixture(params=["default", "small"])
def ring(request: pytest.FixtureRequest) -> str:
    """The default staging ring, then the small one."""
    if request.param == "small":
        request.getfixturevalue("small_ring")
    return str(request.param)


@pytest.fixture
def restored(ckpt: Path, ring: str) -> Callable[[float | None], dict[str, Any]]:
    """Saves _VALUES to `ckpt` and restores them into new GPU variables (allocated with `fill`, or not at all)."""
    def run(fill: float | None) -> dict[str, Any]:
        save(ckpt, _VALUES, pack_threshold_bytes=0)
        store, made = _gpu_store(_VALUES, fill=fill)
        made["pointers before"] = {name: v._state.buffer.data.ptr for name, v in made.items() if v.is_allocated}
        restore(ckpt, store)
        return made
    return run


def test_restore_into_allocated_gpu_variables_fills_the_same_device_buffers(restored: Any) -> None:
    made = restored(7)
    pointers = made.pop("pointers before")
    for name, value in _VALUES.items():
        v = made[name]
        assert v.device == "gpu:0" and isinstance(v._state.buffer, cp.ndarray)
        assert v._state.buffer.data.ptr == pointers[name], name
        np.testing.assert_array_equal(v.numpy(), value, err_msg=name)


def test_restore_into_unallocated_gpu_variables_reads_straight_to_the_device(restored: Any) -> None:
    made = restored(None)
    assert made.pop("pointers before") == {}
    for name, value in _VALUES.items():
        v = made[name]
        assert v.is_allocated and isinstance(v._state.buffer, cp.ndarray), name
        np.testing.assert_array_equal(cp.asnumpy(v._state.buffer), value, err_msg=name)


def test_lazy_restore_reads_each_gpu_variable_at_first_use(ckpt: Path, small_ring: None) -> None:
    save(ckpt, _VALUES, pack_threshold_bytes=0)
    store, made = _gpu_store(_VALUES, fill=None)
    restore(ckpt, store, lazy=True)
    assert not made["f32"].is_allocated
    doubled = made["f32"].read_value() * 2
    assert isinstance(doubled, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(doubled), _VALUES["f32"] * 2)
    np.testing.assert_array_equal(made["big"].numpy(), _VALUES["big"])


_DAMAGED = {"a": np.full(8192, 3, np.float32), "big": np.arange(1 << 19, dtype=np.float32),
            "c": np.full(8192, 5, np.float32)}


@pytest.mark.parametrize("threads", [1, 8])
def test_a_large_damaged_value_into_allocated_gpu_variables_is_the_documented_partial(
        ckpt: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/errors.md: a large GPU value is checked in its reader thread before its copy; the others are restored."""
    monkeypatch.setattr(device_transfers, "READ_THREADS", threads)
    values = {**_DAMAGED, "big2": np.arange(1 << 19, 0, -1, dtype=np.float32)}
    save(ckpt, values, pack_threshold_bytes=0)
    _flip(ckpt, "big", at=4096)
    store, made = _gpu_store(values, fill=0)
    with pytest.raises(ChecksumError, match="'big'"):
        restore(ckpt, store)
    assert made["a"].numpy().tolist() == [3.0] * 8192 and made["c"].numpy().tolist() == [5.0] * 8192
    assert (made["big"].numpy() == 0).all()  # not copied: the damaged bytes never reached the device
    np.testing.assert_array_equal(made["big2"].numpy(), values["big2"])


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_many_large_values_restore_through_the_reader_threads_into_the_same_buffers(
        ckpt: Path, threads: int, small_ring: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reader threads fill the ring out of order and wrap around it; every value lands in its own buffer."""
    monkeypatch.setattr(device_transfers, "READ_THREADS", threads)
    monkeypatch.setattr(device_transfers, "PARALLEL_FILL_BYTES", 16 << 10)
    rng = np.random.default_rng(1)
    values = {f"w{i:02d}": rng.standard_normal(int(rng.integers(4096, 40_000))).astype(np.float32)
              for i in range(40)}
    save(ckpt, values, pack_threshold_bytes=0)
    for fill in (0, None):  # into memory, then into variables without it
        store, made = _gpu_store(values, fill=fill)
        before = {name: v._state.buffer.data.ptr for name, v in made.items() if v.is_allocated}
        restore(ckpt, store)
        for name, value in values.items():
            np.testing.assert_array_equal(made[name].numpy(), value, err_msg=name)
            if fill is not None:
                assert made[name]._state.buffer.data.ptr == before[name], name


def test_a_damaged_value_leaves_gpu_variables_without_memory_untouched(ckpt: Path) -> None:
    save(ckpt, _DAMAGED, pack_threshold_bytes=0)
    _flip(ckpt, "big", at=4096)
    store, made = _gpu_store(_DAMAGED, fill=None)
    with pytest.raises(ChecksumError, match="'big'"):
        restore(ckpt, store)
    assert not any(v.is_allocated for v in made.values())


def test_staging_is_pinned_host_memory_and_known_as_staged() -> None:
    uploads = device_transfers.Transfers("gpu:0", 1 << 20)
    try:
        staged = uploads.staging((1000,), np.float32)
        assert staged is not None and device_transfers.is_staged(staged)
        attributes = cp.cuda.runtime.pointerGetAttributes(staged.ctypes.data)
        assert attributes.type == getattr(cp.cuda.runtime, "memoryTypeHost", 1)  # page-locked, not pageable
        staged[...] = np.arange(1000)
        target = cp.empty(1000, np.float32)
        uploads.copy(staged, target)
    finally:
        uploads.finish()
    assert cp.asnumpy(target).tolist() == list(range(1000))
    assert not device_transfers.is_staged(np.empty(1000, np.float32))
    assert uploads.staging((device_transfers.STAGING_MAX_BYTES + 1,), np.uint8) is None


@pytest.mark.parametrize("room", [True, False])
def test_async_save_of_gpu_variables_keeps_the_values_of_the_call(
        ckpt: Path, room: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not room:  # no device has 1 PiB spare: every snapshot goes to the host
        monkeypatch.setattr(device_transfers, "SNAPSHOT_HEADROOM_BYTES", 1 << 50)
    store = VariableStore()
    w = store.get_variable("w", [1000, 100], device="gpu:0", initializer=lambda s, d: np.ones(s, d)).initialize()
    b = store.get_variable("b", [100], device="gpu:0", initializer=lambda s, d: np.full(s, 2, d)).initialize()
    handle = save(ckpt, store, blocking=False)
    w.assign_add(cp.ones((1000, 100), np.float32))  # after the call: not in the checkpoint
    b.assign(cp.zeros(100, np.float32))
    handle.wait()
    with open_varstore(ckpt) as reader:
        assert (reader["w"] == 1).all() and (reader["b"] == 2).all()
    assert (w.numpy() == 2).all() and not b.numpy().any()


@pytest.mark.parametrize("max_snapshot_bytes", [None, 64 << 10])
def test_async_save_of_many_gpu_variables_of_every_kind_keeps_the_values_of_the_call(
        ckpt: Path, max_snapshot_bytes: int | None) -> None:
    """Unbounded: one device allocation for every copy (device_snapshots); bounded: a copy each, as before."""
    store = VariableStore()
    made = {}
    for name, value in _VALUES.items():
        made[name] = store.get_variable(name, value.shape, dtype=value.dtype, device="gpu:0",
                                        initializer=lambda s, d, value=value: value.copy()).initialize()
    lazy = store.get_variable("never_read", [3, 5], device="gpu:0", initializer=lambda s, d: np.full(s, 4, d))
    handle = save(ckpt, store, blocking=False, max_snapshot_bytes=max_snapshot_bytes)
    for name, variable in made.items():  # after the call: none of this is in the checkpoint
        if variable.shape and _VALUES[name].size:
            variable.assign(cp.zeros(variable.shape, variable.dtype))
    handle.wait()
    with open_varstore(ckpt) as reader:
        for name, value in _VALUES.items():
            np.testing.assert_array_equal(reader[name], value, err_msg=name)
            assert reader[name].dtype == value.dtype and reader[name].shape == value.shape, name
        assert (reader["never_read"] == 4).all()
    assert lazy.is_initialized and not made["big"].numpy().any()


def test_device_copies_share_one_allocation_and_equal_their_values() -> None:
    values = [cp.arange(n, dtype=cp.float32) for n in (0, 1, 1000, 70_000)] + [cp.ones((4, 6), cp.int8)[:, ::2]]
    copies = devices.device_copies(values, "gpu:0")
    cp.cuda.Device(0).synchronize()
    for value, copy in zip(values, copies):
        assert copy.shape == value.shape and copy.dtype == value.dtype and copy.data.ptr != value.data.ptr
        np.testing.assert_array_equal(cp.asnumpy(copy), cp.asnumpy(value))
    assert len({copy.data.mem.ptr for copy in copies}) == 1  # one block


def test_has_room_counts_free_device_memory() -> None:
    free, _ = cp.cuda.runtime.memGetInfo()
    assert device_transfers.has_room("gpu:0", 1 << 20)
    assert not device_transfers.has_room("gpu:0", free + cp.get_default_memory_pool().total_bytes() + 1)


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(st.sampled_from([np.float32, np.float64, np.int32, np.uint8, np.bool_, np.complex128]),
                  hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)))
def test_generated_values_round_trip_through_gpu_variables(tmp_path_factory: pytest.TempPathFactory,
                                                           value: np.ndarray) -> None:
    path = tmp_path_factory.mktemp("gpu") / "v.h5"
    save(path, {"v": value}, pack_threshold_bytes=0)
    store = VariableStore()
    v = store.get_variable("v", value.shape, dtype=value.dtype, device="gpu:0",
                           initializer=lambda s, d: np.zeros(s, d)).initialize()
    restore(path, store)
    assert v.device == "gpu:0"
    np.testing.assert_array_equal(v.numpy(), value)


@pytest.mark.parametrize("shape", [(3,), (1024, 1024), (2048, 4096)])
def test_to_host_gives_a_new_host_array_with_the_device_value(shape: tuple[int, ...]) -> None:
    value = cp.arange(int(np.prod(shape)), dtype=cp.float32).reshape(shape)
    host = device_transfers.to_host(value)
    assert type(host) is np.ndarray and host.flags.owndata and not device_transfers.is_staged(host)
    np.testing.assert_array_equal(host, cp.asnumpy(value))
    strided = value[..., ::2]  # not contiguous: the plain path
    np.testing.assert_array_equal(device_transfers.to_host(strided), cp.asnumpy(strided))


def test_cupy_arrays_made_before_varstore_looked_for_a_gpu_are_device_arrays(tmp_path: Path) -> None:
    """A fresh process: CuPy arrays first, varstore after (its GPU probe had not run yet)."""
    import subprocess
    import sys

    code = ("import cupy as cp, numpy as np\n"
            "x = cp.arange(1 << 20, dtype=cp.float32)\n"
            "from varstore.store import device_transfers\n"
            "from varstore import save\nfrom varstore.checkpoint import open_varstore\n"
            "assert device_transfers.to_host(x)[-1] == (1 << 20) - 1\n"
            f"save({str(tmp_path / 'x.h5')!r}, {{'x': x}})\n"
            f"with open_varstore({str(tmp_path / 'x.h5')!r}) as r:\n"
            "    assert r['x'][5] == 5.0\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_release_staging_frees_the_idle_ring_once(ckpt: Path) -> None:
    save(ckpt, _VALUES, pack_threshold_bytes=0)
    store, _ = _gpu_store(_VALUES, fill=0)
    restore(ckpt, store)  # leaves its ring idle for the next restore
    assert device_transfers.release_staging() >= device_transfers.STAGING_MIN_BYTES
    assert device_transfers.release_staging() == 0
    restore(ckpt, store)  # pins a new ring
    np.testing.assert_array_equal(store.get_variable_by_name("big").numpy(), _VALUES["big"])


def test_async_save_under_a_non_blocking_stream_writes_the_values_of_the_call(ckpt: Path) -> None:
    """The snapshot is queued on the caller's stream; the writer (another thread, another stream) waits for it."""
    store = VariableStore()
    w = store.get_variable("w", [4096, 1024], device="gpu:0", initializer=lambda s, d: np.ones(s, d)).initialize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        w.assign(cp.full((4096, 1024), 3, np.float32))  # queued on the stream, maybe not yet run
        handle = save(ckpt, store, blocking=False)
        w.assign_add(cp.ones((4096, 1024), np.float32))  # after the call: not in the checkpoint
    handle.wait()
    stream.synchronize()
    with open_varstore(ckpt) as reader:
        assert (reader["w"] == 3).all()
    assert (w.numpy() == 4).all()


def test_restore_under_a_non_blocking_stream_lands_after_the_callers_queued_kernels(ckpt: Path) -> None:
    save(ckpt, {"w": np.full((4096, 1024), 5, np.float32)}, pack_threshold_bytes=0)
    store = VariableStore()
    w = store.get_variable("w", [4096, 1024], device="gpu:0", initializer=lambda s, d: np.ones(s, d)).initialize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        w.assign_add(cp.ones((4096, 1024), np.float32))  # queued; the restore's copy must land after it
        restore(ckpt, store)
        doubled = w.read_value() * 2
    stream.synchronize()
    assert (cp.asnumpy(doubled) == 10).all()

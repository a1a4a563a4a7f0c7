"""Host arrays that reads fill start on a page (or cache line), and are adopted without a copy."""

from __future__ import annotations

from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import varstore as vs
from varstore.store import host_arrays
from varstore.store.host_arrays import ALIGN_MIN_BYTES, PAGE_BYTES, host_empty, owns_memory
from varstore.store.scopes import VariableStore


@pytest.mark.parametrize(("shape", "dtype", "boundary"), [
    ((512, 512), np.float32, PAGE_BYTES),        # 1 MiB
    ((ALIGN_MIN_BYTES,), np.uint8, PAGE_BYTES),  # the threshold itself
    ((3, 5, 7, 1001), np.float64, PAGE_BYTES),
    ((40_000,), ml_dtypes.bfloat16, 64),         # 80,000 bytes: a cache line
    ((1024,), np.float32, 64),                   # 4 KiB: a cache line
])
def test_host_empty_starts_on_its_boundary(shape: tuple[int, ...], dtype: type, boundary: int) -> None:
    array = host_empty(shape, dtype)
    assert array.shape == shape and array.dtype == np.dtype(dtype)
    assert array.flags.c_contiguous and array.flags.writeable
    assert array.ctypes.data % boundary == 0
    assert owns_memory(array)
    array[...] = 1  # every byte is the array's to write
    assert array.base.nbytes - array.nbytes == boundary  # the padding, never more


@pytest.mark.parametrize("shape", [(), (0,), (10,), (1023,), (0, 100_000)])
def test_small_and_empty_arrays_are_plain(shape: tuple[int, ...]) -> None:
    array = host_empty(shape, np.float32)
    assert array.shape == shape and array.flags.owndata and owns_memory(array)


def test_object_arrays_are_never_offset() -> None:
    array = host_empty((100_000,), object)
    assert array.flags.owndata and array[0] is None


def test_owns_memory_refuses_views_and_shared_buffers() -> None:
    fresh = np.zeros((1000, 100), np.float32)
    assert owns_memory(fresh) and not owns_memory(fresh[1:]) and not owns_memory(fresh.reshape(-1))
    aligned = host_empty((1000, 100), np.float32)
    other = aligned.reshape(-1)  # a second view of the same buffer
    assert not owns_memory(aligned) and not owns_memory(other)
    del other
    assert owns_memory(aligned)
    buffer = np.zeros(404_096, np.uint8)  # a view of all but its padding, as host_empty makes
    assert not owns_memory(buffer[16:400_016])  # someone else's buffer: `buffer` is still referenced here
    assert not owns_memory(aligned[:500])  # part of it


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_loaded_and_restored_values_are_page_aligned(tmp_path: Path, suffix: str) -> None:
    rng = np.random.default_rng(0)
    values = {"bias": rng.standard_normal(50_257).astype(np.float32),  # an odd size first
              "kernel": rng.standard_normal((300, 301)).astype(np.float32),
              "small": rng.standard_normal(2_000).astype(np.float32)}
    path = vs.save(tmp_path / f"ck{suffix}", values)
    loaded = vs.load(path)
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert owns_memory(loaded[name]) and loaded[name].flags.writeable
    assert loaded["kernel"].ctypes.data % PAGE_BYTES == 0 and loaded["bias"].ctypes.data % 64 == 0
    with vs.open_checkpoint(path) as ck:
        assert ck["kernel"].ctypes.data % PAGE_BYTES == 0
    store = VariableStore()
    made = {name: store.get_variable(name, shape=value.shape, dtype=value.dtype) for name, value in values.items()}
    vs.restore(path, store)  # variables without memory: the reads' arrays become their buffers
    for name, value in values.items():
        buffer = made[name]._state.buffer
        np.testing.assert_array_equal(buffer, value)
        assert owns_memory(buffer)
    assert made["kernel"]._state.buffer.ctypes.data % PAGE_BYTES == 0


def test_hdf5_values_start_on_64_byte_lines(tmp_path: Path) -> None:
    """A value of an odd size does not shift the ones after it: each starts on a multiple of 64 bytes,
    read back by plain h5py at the same offsets."""
    values = {f"v{i}": np.arange(5_003 + 7 * i, dtype=np.uint8) for i in range(6)}
    values["w"] = np.ones((129, 33), np.float32)
    path = vs.save(tmp_path / "ck.h5", values, pack_threshold_bytes=0)
    with h5py.File(path, "r") as f:
        for name, value in values.items():
            assert f[name].id.get_offset() % 64 == 0, name
            np.testing.assert_array_equal(f[name][()], value)


def test_held_by_one_name_counts_the_other_holders_whatever_the_interpreter_borrows() -> None:
    """The initializer adoption test (`Variable._run_initializer`) compares against a probe counted the same way,
    not a written-down refcount (CPython 3.14 documents smaller getrefcount values)."""
    def check() -> tuple[bool, bool, bool]:
        fresh = np.zeros(5)
        alone = host_arrays.held_by_one_name(fresh)
        other = fresh  # noqa: F841 - a second name holds it now
        shared = host_arrays.held_by_one_name(fresh)
        del other
        return alone, shared, host_arrays.held_by_one_name(fresh)

    assert check() == (True, False, True)
    holder = [np.zeros(5)]
    assert not host_arrays.held_by_one_name(holder[0])  # a list's reference counts too


def test_a_fresh_initializer_result_becomes_the_variable_buffer_without_a_copy() -> None:
    store = VariableStore()
    addresses: list[int] = []

    def initializer(shape: tuple[int, ...], dtype: object) -> np.ndarray:
        value = host_arrays.host_empty(shape, np.float32)
        value.fill(3.0)
        addresses.append(value.ctypes.data)
        return value

    v = store.get_variable("v", shape=(256, 1024), dtype=np.float32, initializer=initializer)
    assert v.host_view().ctypes.data == addresses[0] and v.numpy()[0, 0] == 3.0

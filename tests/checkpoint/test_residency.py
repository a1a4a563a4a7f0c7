"""residency.populated: new arrays faulted in ahead of the reads, never a byte changed; vs.load uses it."""

from __future__ import annotations

import mmap
import os
import sys
import threading
import time

import numpy as np
import pytest

import varstore as vs
from tests._page_cache import evict
from varstore.checkpoint.read import residency
from varstore.store.host_arrays import owns_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _populate_works() -> bool:
    if not sys.platform.startswith("linux") or not residency._libc_madvise():
        return False
    probe = np.empty(1 << 20, dtype=np.uint8)
    start = -(-probe.ctypes.data // 4096) * 4096
    return residency._libc_madvise()(start, 4096, residency._MADV_POPULATE_WRITE) == 0


needs_populate = pytest.mark.skipif(not _populate_works(), reason="needs Linux 5.14+ (MADV_POPULATE_WRITE)")


def _populate_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "varstore-populate"]


@needs_populate
def test_new_arrays_become_resident_while_the_block_runs_and_stay_zero() -> None:
    # 48 MiB never written here, in fresh anonymous mappings (np.empty may reuse resident heap memory)
    arrays = [np.frombuffer(mmap.mmap(-1, 8 << 20), dtype=np.uint8) for _ in range(6)]
    before = _rss_bytes()
    with residency.populated(arrays):
        deadline = time.monotonic() + 10
        while _rss_bytes() - before < 44 << 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        grown = _rss_bytes() - before
    assert grown >= 44 << 20  # ~48 MiB faulted in by the helper, none by this thread
    assert all(not a.any() for a in arrays)  # faulted in, not written: anonymous pages read as zero
    assert _populate_threads() == []  # stopped and joined when the block ended


@needs_populate
def test_bytes_written_before_or_during_the_block_are_kept() -> None:
    rng = np.random.default_rng(7)
    arrays = [np.empty((1024, 1024), dtype=np.float32) for _ in range(8)]  # 32 MiB
    expected = [rng.standard_normal(a.shape, dtype=np.float32) for a in arrays]
    arrays[0][...] = expected[0]  # before: already resident and filled
    with residency.populated(arrays):
        for a, e in zip(arrays[1:], expected[1:]):  # the reader racing the helper
            a[...] = e
    for a, e in zip(arrays, expected):
        np.testing.assert_array_equal(a, e)


def test_small_or_odd_arrays_start_no_thread() -> None:
    small = [np.empty(1 << 20, dtype=np.uint8) for _ in range(4)]  # 4 MiB < MIN_POPULATE_BYTES
    strided = np.empty((8192, 4096), dtype=np.uint8)[:, ::2]  # 32 MiB buffer, not C-contiguous
    for arrays in (small, [strided], []):
        with residency.populated(arrays):
            assert _populate_threads() == []


def test_an_exception_in_the_block_ends_the_helper_and_propagates() -> None:
    arrays = [np.empty(32 << 20, dtype=np.uint8)]
    with pytest.raises(KeyError, match="boom"):
        with residency.populated(arrays):
            raise KeyError("boom")
    assert _populate_threads() == []


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_load_of_a_large_checkpoint_fills_populated_arrays_exactly(tmp_path, monkeypatch, suffix) -> None:
    rng = np.random.default_rng(3)
    values = {f"layer_{i}/kernel": rng.standard_normal((512, 1024), dtype=np.float32) for i in range(10)}
    values["bias"] = rng.standard_normal((7,), dtype=np.float32)
    path = tmp_path / f"model{suffix}"
    vs.save(path, values)
    seen: list[int] = []
    original = residency.populated

    def counting(arrays, resident):  # what vs.load hands over: every new array, in read order
        seen.append(sum(a.nbytes for a in arrays))
        asked.append(resident())
        return original(arrays, resident)

    asked: list[bool] = []
    monkeypatch.setattr("varstore.checkpoint.read.load.populated", counting)
    loaded = vs.load(path)
    assert seen == [sum(v.nbytes for v in values.values())]  # 20 MiB: over MIN_POPULATE_BYTES
    assert asked == [True] or not hasattr(os, "RWF_NOWAIT")  # just written: in the page cache (or a tmpfs)
    assert list(loaded) == list(values)
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert loaded[name].flags.writeable and owns_memory(loaded[name])


def test_restore_into_variables_without_memory_populates_their_new_arrays(tmp_path, monkeypatch) -> None:
    from varstore.store.scopes import VariableStore

    rng = np.random.default_rng(4)
    values = {f"dense_{i}/kernel": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(5)}
    path = tmp_path / "model.h5"
    vs.save(path, values)
    store = VariableStore()
    variables = [store.get_variable(name, shape=v.shape, dtype=np.float32) for name, v in values.items()]
    assert not any(v.is_allocated for v in variables)
    seen: list[list[int]] = []
    original = residency.populated

    def counting(arrays, resident):
        seen.append([a.nbytes for a in arrays])
        return original(arrays, resident)

    monkeypatch.setattr("varstore.checkpoint.read.read_engine.populated", counting)
    vs.restore(path, store)
    assert seen == [[4 << 20] * 5]  # every new host array, in read order
    for variable in variables:
        np.testing.assert_array_equal(variable.numpy(), values[variable.name.split(":")[0]])


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@needs_populate
def test_arrays_ahead_makes_the_next_arrays_within_its_window_and_hands_each_over_once() -> None:
    made: list[int] = []

    def make(position: int):
        made.append(position)
        return np.empty(8 << 20, dtype=np.uint8)

    plan = [(i, 8 << 20, lambda i=i: make(i)) for i in range(1, 9)]  # 8 reads of 8 MiB
    ahead = residency.ArraysAhead.start(plan, window=24 << 20)
    assert ahead is not None
    try:
        assert _wait_for(lambda: len(made) == 3)
        time.sleep(0.05)
        assert made == [1, 2, 3]  # 24 MiB ahead of a loop that has taken nothing: it waits
        first = ahead.take(1)
        assert first is not None and first.shape == (8 << 20,)
        assert ahead.take(1) is None  # handed over once
        assert _wait_for(lambda: len(made) == 4)  # room for one more
        assert ahead.take(3) is not None  # 2 was skipped by the loop: let go
        assert ahead.take(42) is None  # never planned
    finally:
        ahead.stop()
    assert _populate_threads() == []
    assert ahead.take(6) is None  # stopped: nothing kept


@needs_populate
def test_arrays_ahead_stops_at_a_make_that_raises() -> None:
    def make(position: int):
        if position == 2:
            raise ValueError("claims more bytes than stored")
        return np.empty(16 << 20, dtype=np.uint8)

    ahead = residency.ArraysAhead.start([(i, 16 << 20, lambda i=i: make(i)) for i in range(1, 4)], 64 << 20)
    assert ahead is not None
    assert _wait_for(lambda: not ahead._thread.is_alive())  # ended at position 2, silently
    assert ahead.take(1) is not None
    assert ahead.take(2) is None and ahead.take(3) is None  # the loop makes (and checks) its own
    ahead.stop()


def test_arrays_ahead_is_not_started_for_a_small_plan() -> None:
    plan = [(i, 1 << 20, lambda: np.empty(1 << 20, dtype=np.uint8)) for i in range(4)]
    assert residency.ArraysAhead.start(plan, 64 << 20) is None


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_a_loop_in_key_order_reads_exact_values_into_arrays_made_ahead(tmp_path, monkeypatch, suffix) -> None:
    rng = np.random.default_rng(5)
    values = {f"layer_{i:02d}/kernel": rng.standard_normal((512, 1024), dtype=np.float32) for i in range(12)}
    path = tmp_path / f"model{suffix}"
    vs.save(path, values)
    started: list[int] = []
    original = residency.ArraysAhead.start.__func__

    def start(cls, plan, window, resident=None):
        started.append(len(plan))
        return original(cls, plan, window, resident)

    monkeypatch.setattr(residency.ArraysAhead, "start", classmethod(start))
    with vs.open_checkpoint(path) as ck:
        loaded = {name: ck[name] for name in ck.keys()}
    assert started == [10]  # from the second read on: the 10 variables after it
    assert _populate_threads() == []  # stopped with the reader
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert owns_memory(loaded[name]) and loaded[name].flags.writeable


def test_a_loop_in_key_order_still_reports_a_truncated_variable_by_name(tmp_path) -> None:
    rng = np.random.default_rng(6)
    values = {f"layer_{i:02d}/kernel": rng.standard_normal((512, 1024), dtype=np.float32) for i in range(12)}
    path = tmp_path / "model.zarr"
    vs.save(path, values)
    chunk = path / "layer_07" / "kernel" / "0.0"
    chunk.write_bytes(chunk.read_bytes()[:1000])
    with vs.open_checkpoint(path) as ck:
        for name in list(ck.keys())[:7]:
            np.testing.assert_array_equal(ck[name], values[name])
        with pytest.raises(vs.errors.CorruptCheckpointError, match="layer_07/kernel"):
            ck["layer_07/kernel"]


def test_a_reader_abandoned_mid_loop_is_collected_and_ends_its_helper(tmp_path) -> None:
    import gc

    values = {f"v{i:02d}": np.full((1024, 1024), i, dtype=np.float32) for i in range(40)}  # 160 MiB
    path = tmp_path / "model.h5"
    vs.save(path, values)
    ck = vs.open_checkpoint(path)
    for name in list(ck.keys())[:3]:
        assert ck[name][0, 0] == int(name[1:])
    del ck  # never closed: the helper waits for room in its window
    gc.collect()
    assert _wait_for(lambda: _populate_threads() == [])


def _vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@needs_populate
@pytest.mark.parametrize("resident", [False, True])
def test_arrays_keep_numpys_huge_pages_only_when_the_bytes_are_memory_already(resident) -> None:
    arrays = [np.full(8 << 20, 7, dtype=np.uint8) for _ in range(3)]  # 24 MiB; NumPy asks huge pages for each
    asked: list[bool] = []

    def answer() -> bool:
        asked.append(resident)
        return resident

    plan = [(i, a.nbytes, lambda a=a: a) for i, a in enumerate(arrays)]
    ahead = residency.ArraysAhead.start(plan, 64 << 20, answer)
    assert ahead is not None and asked == [resident]  # asked once, before the helper starts
    assert _wait_for(lambda: not ahead._thread.is_alive())  # every array faulted in
    ahead.stop()
    for array in arrays:
        flags = _vm_flags(array.ctypes.data + (4 << 20))
        assert ("nh" in flags) is not resident  # 4 KiB pages (MADV_NOHUGEPAGE) only for a disk read
        assert (array == 7).all()  # faulted in, never written


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_load_asks_for_huge_pages_only_when_the_checkpoint_is_in_memory(tmp_path, monkeypatch, suffix) -> None:
    from varstore.storage._fs_types import path_in_memory
    from varstore.storage.local_read_ahead import cached_already

    if path_in_memory(str(tmp_path)) or not hasattr(os, "RWF_NOWAIT"):
        pytest.skip("a tmpfs, or no RWF_NOWAIT: nothing to tell apart")
    values = {f"layer_{i}/kernel": np.full((512, 1024), i, dtype=np.float32) for i in range(10)}  # 20 MiB
    path = tmp_path / f"model{suffix}"
    vs.save(path, values)
    files = [str(p) for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()]
    asked: list[bool] = []
    original = residency.populated

    def spying(arrays, resident):
        asked.append(resident())
        return original(arrays, resident)

    monkeypatch.setattr("varstore.checkpoint.read.load.populated", spying)
    assert vs.load(path)["layer_3/kernel"][0, 0] == 3  # just written and read: in the page cache
    evict(files)
    if cached_already(files):
        pytest.skip("pages kept despite POSIX_FADV_DONTNEED: nothing to tell apart")
    evict(files)  # the probe above may have started the kernel's read-ahead
    loaded = vs.load(path)
    assert asked == [True, False]  # the second load read the disk: 4 KiB pages
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)

"""Transfers between the host and CuPy devices through a pinned staging ring; room for device snapshots.

A restore into a GPU variable reads the checkpoint into pinned (page-locked)
host memory and copies it to the device with `cudaMemcpyAsync` on a CUDA
stream, so the copy of one variable overlaps the read of the next and runs
at the pinned host-to-device bandwidth (pageable memory takes a slower,
synchronous path). The pinned memory is one ring per device, of
`STAGING_MIN_BYTES` to `STAGING_MAX_BYTES`, allocated on first use and kept
for the next restore (page-locking is slow: allocate once; `release_staging()`
frees it). Variables larger
than the ring take the pageable path.

A bulk restore opens a `batch()` on its thread; `Variable._fill_from` and the
read engine ask `current()` for it and stage through its rings. Outside a
batch, each fill is a batch of one. A batch opened with `readers=True` runs
the fills of values of `PARALLEL_FILL_BYTES` or more in `READ_THREADS` reader
threads, each fill followed by its copy (one thread copies from the page cache
at ~5 GB/s, eight at ~25 GB/s on an H100 host: docs/benchmarks/gpu.py);
`settle()` waits for them and raises the first failure in the order the fills
were asked for. Gets cupy through `devices` (never imports it). Knows nothing
about files: callers hand it a fill function.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore.store import devices

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["STAGING_MIN_BYTES", "STAGING_MAX_BYTES", "SNAPSHOT_HEADROOM_BYTES", "Transfers", "batch", "current",
           "release_staging", "queued_work_done", "settle", "in_reader_thread", "READ_THREADS",
           "PARALLEL_FILL_BYTES",
           "fill_on_device", "is_staged", "guard", "to_host", "has_room",
           "STAGED_DOWNLOAD_BYTES"]

#: Smallest pinned staging ring (bytes); page-locking is slow, so a ring is kept per process and device.
STAGING_MIN_BYTES = 32 << 20
#: Largest pinned staging ring (bytes); restores of more bytes cycle through it.
STAGING_MAX_BYTES = 256 << 20
#: Device memory left free after a device-side snapshot (bytes); below it, snapshots go to the host.
SNAPSHOT_HEADROOM_BYTES = 1 << 30
_ALIGN = 512
#: Reader threads of a `batch(readers=True)` (at most the CPUs this process may run on).
READ_THREADS = 8
#: In such a batch, values of at least this many bytes are filled in a reader thread; smaller ones at once.
PARALLEL_FILL_BYTES = 1 << 20

_local = threading.local()
_reader = threading.local()  # .reading: True in a batch's reader threads
_idle_lock = threading.Lock()
_idle_rings: dict[int, Any] = {}  # device id -> the largest idle _Ring
_rings: weakref.WeakSet[_Ring] = weakref.WeakSet()  # every live ring, for is_staged


class _Ring:
    """Pinned host memory of `capacity` bytes for one device, as a NumPy uint8 array."""

    def __init__(self, cp: Any, device_id: int, capacity: int) -> None:
        self.device_id = device_id
        self.capacity = capacity
        with cp.cuda.Device(device_id):
            self.memory = cp.cuda.alloc_pinned_memory(capacity)
        self.array: npt.NDArray[np.uint8] = np.ndarray((capacity,), np.uint8, buffer=self.memory)
        self.start = int(self.array.ctypes.data)
        _rings.add(self)


def _checkout(cp: Any, device_id: int, wanted: int) -> _Ring:
    capacity = min(STAGING_MAX_BYTES, max(STAGING_MIN_BYTES, -(-wanted // (1 << 20)) << 20))
    with _idle_lock:
        ring = _idle_rings.get(device_id)
        if ring is not None and ring.capacity >= capacity:
            del _idle_rings[device_id]
            return ring
    return _Ring(cp, device_id, capacity)


def _give_back(ring: _Ring) -> None:
    with _idle_lock:
        kept = _idle_rings.get(ring.device_id)
        if kept is None or kept.capacity < ring.capacity:
            _idle_rings[ring.device_id] = ring


def release_staging() -> int:
    """Frees the idle pinned staging rings (page-locked host memory kept for the next restore); returns bytes freed.

    Rings in use by a running restore are kept. The next GPU restore pins a new ring.
    """
    with _idle_lock:
        rings = list(_idle_rings.values())
        _idle_rings.clear()
    freed = sum(ring.capacity for ring in rings)
    del rings
    cp = devices.cupy_if_loaded()
    if freed and cp is not None:
        cp.get_default_pinned_memory_pool().free_all_blocks()  # CuPy caches freed pinned blocks: hand them back
    return freed


class Transfers:
    """Copies between the host and one device through a pinned ring.

    `staging()` lends a host buffer; fill it, then `copy()` it to the device.

    Copies run in order on one CUDA stream that synchronizes with the legacy
    default stream and starts after the work queued on the caller's current
    stream (kernels still using a target buffer finish first). A ring
    region is reused only after the copy out of it finished. `finish()`
    waits for every copy; nothing may read the targets before it.
    """

    def __init__(self, label: str, size_hint: int) -> None:
        self.label = label
        self._cp = devices.array_module(label)
        self._device_id = int(label.split(":")[1])
        self._ring: _Ring | None = None
        self._size_hint = size_hint
        self._stream: Any = None
        self._head = 0
        self._inflight: collections.deque[tuple[int, int, Any, Any]] = collections.deque()
        self._guards: dict[int, Any] = {}  # staged address -> a Future still reading it (a deferred checksum)
        self._issuing = threading.Lock()  # copies are started from reader threads too

    def staging(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any] | None:
        """A pinned host array of `shape` and `dtype` to fill, or None when it is larger than the ring."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes > STAGING_MAX_BYTES:
            return None
        if nbytes == 0:
            return np.empty(shape, dt)
        ring = self._ring
        if ring is None or nbytes > ring.capacity:
            self._drain()
            if ring is not None:
                _give_back(ring)
            ring = self._ring = _checkout(self._cp, self._device_id, max(nbytes, self._size_hint))
            self._head = 0
        start = -(-self._head // _ALIGN) * _ALIGN
        if start + nbytes > ring.capacity:
            start = 0
        self._wait_for(start, start + nbytes)
        self._head = start + nbytes
        staged: npt.NDArray[Any] = ring.array[start:start + nbytes].view(dt).reshape(shape)
        return staged

    def copy(self, staged: npt.NDArray[Any], target: Any) -> None:
        """Starts the copy of `staged` (from `staging()`) into `target`.

        `target` is a C-contiguous CuPy array of the same shape and dtype.
        """
        if staged.nbytes == 0:
            return
        self._open_stream()
        event = self._issue(staged, target)
        guard = self._guards.pop(int(staged.ctypes.data), None)
        self._inflight.append((*self._region(staged), event, guard))

    def fill_then_copy(self, pool: ThreadPoolExecutor, fill: Callable[[npt.NDArray[Any]], None],
                       staged: npt.NDArray[Any], target: Any) -> Future[Any]:
        """Runs `fill(staged)` in a reader thread of `pool`, then starts the copy of `staged` into `target`.

        The region stays taken until both finished; when `fill` raises, nothing
        is copied and the returned Future holds the error.
        """
        self._open_stream()  # in the caller's thread: after the kernels queued on its current stream

        def fill_and_copy() -> Any:
            fill(staged)
            return self._issue(staged, target)

        future = pool.submit(fill_and_copy)
        self._inflight.append((*self._region(staged), future, None))
        return future

    def _open_stream(self) -> None:
        if self._stream is None:
            cp = self._cp
            with cp.cuda.Device(self._device_id):
                self._stream = cp.cuda.Stream(non_blocking=False)
                # after the caller's queued kernels, also on a non-blocking stream of its own
                self._stream.wait_event(cp.cuda.get_current_stream().record())

    def _issue(self, staged: npt.NDArray[Any], target: Any) -> Any:
        with self._issuing, self._cp.cuda.Device(self._device_id):
            target.set(staged, stream=self._stream)
            return self._stream.record()

    def _region(self, staged: npt.NDArray[Any]) -> tuple[int, int]:
        ring = self._ring
        assert ring is not None
        start = staged.ctypes.data - ring.start
        return start, start + staged.nbytes

    def guard(self, staged: npt.NDArray[Any], reader: Any) -> bool:
        """Keeps `staged`'s region from reuse until `reader` (a Future) is done too; False when not staged here."""
        ring = self._ring
        address = int(staged.ctypes.data)
        if ring is None or not ring.start <= address < ring.start + ring.capacity:
            return False
        self._guards[address] = reader
        return True

    def _wait_for(self, start: int, end: int) -> None:
        last = -1
        for i, (lo, hi, _, _) in enumerate(self._inflight):
            if lo < end and start < hi:
                last = i
        for _ in range(last + 1):  # the oldest first: copies from reader threads finish in any order
            _, _, done, guard = self._inflight.popleft()
            _copied(done)
            _wait_guard(guard)

    def _drain(self) -> None:
        while self._inflight:
            _, _, done, guard = self._inflight.popleft()
            _copied(done)
            _wait_guard(guard)
        if self._stream is not None:
            self._stream.synchronize()
        for reader in self._guards.values():
            _wait_guard(reader)
        self._guards.clear()

    def finish(self) -> None:
        """Waits for every fill and copy, then keeps the ring for the next restore."""
        self._drain()
        if self._ring is not None:
            _give_back(self._ring)
            self._ring = None


def _copied(done: Any) -> None:
    """Waits for one region's copy: a CUDA event, or a reader thread's Future of one (which may have failed)."""
    if hasattr(done, "exception"):
        if done.exception() is not None:
            return  # nothing was copied; the batch reports the error
        done = done.result()
    done.synchronize()


def _wait_guard(reader: Any) -> None:
    if reader is not None:
        reader.exception()  # waits; its outcome is its owner's to report


class _Batch:
    def __init__(self, size_hint: int, readers: bool) -> None:
        self.size_hint = size_hint
        self.readers = readers
        self.transfers: dict[str, Transfers] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._filling: list[Future[Any]] = []  # fills in reader threads, in the order they were asked for

    def transfers_for(self, label: str) -> Transfers:
        found = self.transfers.get(label)
        if found is None:
            found = self.transfers[label] = Transfers(label, self.size_hint)
        return found

    def fill_then_copy(self, transfers: Transfers, fill: Callable[[npt.NDArray[Any]], None],
                       staged: npt.NDArray[Any], target: Any) -> None:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            affinity = getattr(os, "sched_getaffinity", None)  # Linux; elsewhere every CPU counts
            cpus = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
            threads = max(1, min(READ_THREADS, cpus))
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="varstore-gpu-read",
                                            initializer=_mark_reader)
        self._filling.append(transfers.fill_then_copy(self._pool, fill, staged, target))

    def settle(self) -> None:
        """Waits for the fills in reader threads; raises the first one's error (in the order asked for)."""
        filling, self._filling = self._filling, []
        first = None
        for future in filling:
            error = future.exception()
            if first is None:
                first = error
        if first is not None:
            raise first

    def finish(self) -> None:
        try:
            self.settle()
        finally:
            for transfers in self.transfers.values():
                transfers.finish()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def _mark_reader() -> None:
    _reader.reading = True


def in_reader_thread() -> bool:
    """True in a reader thread of a `batch(readers=True)`: a check of the bytes it just staged runs there, at once
    (they are hot in its cache, and its region is reused once its fill and copy finished)."""
    return bool(getattr(_reader, "reading", False))


@contextmanager
def batch(size_hint: int, readers: bool = False) -> Iterator[None]:
    """Stages every GPU fill on this thread through shared rings until the block ends (copies finished then).

    Args:
      size_hint: bytes the block will restore (sizes the ring, within its bounds).
      readers: run fills of `PARALLEL_FILL_BYTES` or more in `READ_THREADS` reader threads; the
        block calls `settle()` before it uses what they filled (the block's end settles too).

    Raises:
      The first error of a fill in a reader thread, at the block's end (when the block itself raised
      nothing; the fills are waited for all the same).
    """
    outer = getattr(_local, "batch", None)
    if outer is not None:
        yield
        return
    _local.batch = made = _Batch(size_hint, readers)
    try:
        yield
    except BaseException:
        _local.batch = None
        with suppress(Exception):  # the block's own error is the one to report
            made.finish()
        raise
    _local.batch = None
    made.finish()


def settle() -> None:
    """Waits for the fills this thread's batch runs in reader threads (their copies may still run).

    Raises:
      Whatever the first of them raised, in the order the fills were asked for (a ChecksumError or
      CorruptCheckpointError of a restore); nothing was copied from a fill that failed.
    """
    open_batch = current()
    if open_batch is not None:
        open_batch.settle()


def current() -> _Batch | None:
    """This thread's open batch, or None."""
    found: _Batch | None = getattr(_local, "batch", None)
    return found


def fill_on_device(fill: Callable[[npt.NDArray[Any]], None], shape: tuple[int, ...], dtype: npt.DTypeLike,
                   label: str, target: Any = None) -> Any:
    """Runs `fill(host_array)` into pinned staging and copies the result to device `label`; returns the device array.

    Args:
      fill: writes the value into the host array it is given (shape `shape`, dtype `dtype`).
      shape, dtype: of the value.
      label: "gpu:N".
      target: a C-contiguous CuPy array of `shape` and `dtype` to fill in place
        (same data pointer), or None for a new one.

    Inside a `batch()` the copy may still run when this returns (the batch's
    end waits); outside, it has finished. Raises whatever `fill` raises,
    before the device memory changes; in a `batch(readers=True)`, a large
    value's fill may run later in a reader thread, and `settle()` raises its error.
    """
    open_batch = current()
    transfers = open_batch.transfers_for(label) if open_batch is not None else Transfers(label, 0)
    try:
        staged = transfers.staging(shape, dtype)
        if staged is None:  # larger than any ring: the pageable path
            host = np.empty(shape, dtype)
            fill(host)
            if target is None:
                return devices.to_device(host, label)
            devices.copy_into(target, host)
            return target
        if open_batch is not None and open_batch.readers and staged.nbytes >= PARALLEL_FILL_BYTES:
            if target is None:
                target = devices.empty(shape, dtype, label)
            open_batch.fill_then_copy(transfers, fill, staged, target)
            return target
        fill(staged)
        if target is None:
            target = devices.empty(shape, dtype, label)
        transfers.copy(staged, target)
        return target
    finally:
        if open_batch is None:
            transfers.finish()


def is_staged(array: npt.NDArray[Any]) -> bool:
    """True when `array` lies in pinned staging memory (reused once its copy, and any `guard`, finished)."""
    if not _rings:
        return False
    address = int(array.ctypes.data)
    return any(ring.start <= address < ring.start + ring.capacity for ring in list(_rings))


def guard(array: npt.NDArray[Any], reader: Any) -> bool:
    """Holds `array`'s staging region until the Future `reader` is done (a checksum still reading it).

    Returns:
      False when `array` is not staging memory of this thread's batch (nothing to hold).
    """
    open_batch = current()
    if open_batch is None or not _rings:
        return False
    return any(transfers.guard(array, reader) for transfers in open_batch.transfers.values())


#: Device arrays of at least this many bytes go to the host through pinned staging (`to_host`).
STAGED_DOWNLOAD_BYTES = 1 << 20


def to_host(array: Any) -> npt.NDArray[Any]:
    """A new host NumPy array with the value of the CuPy array `array` (same shape and dtype).

    Values of `STAGED_DOWNLOAD_BYTES` up to `STAGING_MAX_BYTES` are copied into
    pinned staging at the device-to-host bandwidth, then into the new array;
    `.get()` into fresh pageable memory measured 4x slower on an H100
    (docs/benchmarks/gpu.py). Others take `.get()`.
    """
    nbytes = int(array.nbytes)
    if nbytes < STAGED_DOWNLOAD_BYTES or nbytes > STAGING_MAX_BYTES or not array.flags.c_contiguous:
        return devices.to_host(array)
    transfers = Transfers(devices.device_of_array(array), nbytes)
    try:
        staged = transfers.staging(tuple(array.shape), array.dtype)
        assert staged is not None
        with transfers._cp.cuda.Device(array.device.id):
            array.get(out=staged)  # synchronous on the current stream: after the kernels that wrote it
        return staged.copy()
    finally:
        transfers.finish()


def queued_work_done(label: str) -> Callable[[], None]:
    """A function that waits (from any thread) for the work queued so far on this thread's current stream of `label`.

    An async save's device-side snapshot is queued on the caller's stream; the
    writer thread calls this before it reads the copy, whatever stream it uses.
    """
    cp = devices.array_module(label)
    with cp.cuda.Device(int(label.split(":")[1])):
        event = cp.cuda.get_current_stream().record()
    done: Callable[[], None] = event.synchronize
    return done


def has_room(label: str, nbytes: int) -> bool:
    """True when device `label` can hold `nbytes` more and keep `SNAPSHOT_HEADROOM_BYTES` free.

    Free means the device's free memory plus the blocks CuPy's pool holds unused.
    """
    cp = devices.array_module(label)
    with cp.cuda.Device(int(label.split(":")[1])):
        free, _ = cp.cuda.runtime.memGetInfo()
        pool = cp.get_default_memory_pool()
        spare = int(free) + int(pool.total_bytes()) - int(pool.used_bytes())
    return spare >= nbytes + SNAPSHOT_HEADROOM_BYTES

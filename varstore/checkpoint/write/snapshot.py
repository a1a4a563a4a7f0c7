"""Async saves: snapshot the values (host copies; device copies for GPU variables), then write them in a background thread.

`save_async` copies every value (bounded by `max_snapshot_bytes`, blocking
the caller while the background thread frees copies it has written) and
returns a SaveHandle; the background thread runs the ordinary save
(commit.publish) over the copies. Nothing of the caller's runs between the
first and the last copy, so the snapshot is consistent. Never writes bytes itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.store import device_transfers, devices
from varstore.store.variable_batches import device_snapshots
from varstore.backends import format_for_path
from varstore.checkpoint.publish.commit import publish
from varstore.checkpoint.format.entry import SnapshotEntry
from varstore.checkpoint.format.manifest import DEFAULT_PACK_THRESHOLD_BYTES
from varstore.checkpoint.write.overwrite import check_replaceable
from varstore.checkpoint.write.plan import header as _header, plan_records, planned_layout
from varstore.storage import Storage
from varstore.storage import url_from_path

__all__ = ["SaveHandle", "save_async"]


class SaveHandle:
    """A save running in a background thread (`blocking=False`).

    Every value was copied (snapshot) before the call returned, so the caller
    may change its variables at once.

    Attributes:
      path: the final checkpoint path.
    """

    def __init__(self, path: Path, future: Future[Path]) -> None:
        self.path: Path | str = url_from_path(path) or path  # an object-store URL stays a URL
        self._future = future

    def wait(self, timeout_s: float | None = None) -> Path | str:
        """Blocks until the checkpoint is durable under `path`; returns it or raises the save's error.

        Raises:
          TimeoutError: `timeout_s` (seconds) passed first.
          Any error of the save (as `save_entries`).
        """
        path = self._future.result(timeout=timeout_s)
        return url_from_path(path) or path

    def done(self) -> bool:
        """True once the save finished (successfully or not)."""
        return self._future.done()

    def exception(self, timeout_s: float | None = None) -> BaseException | None:
        """The save's error once it finished (None on success); waits up to `timeout_s` seconds."""
        return self._future.exception(timeout=timeout_s)

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<SaveHandle '{self.path}' {state}>"



class _SnapshotBudget:
    """Bytes of snapshot copies alive at once, at most `limit` (None: no limit).

    One value larger than the limit is still admitted when nothing else is
    held, so every save can finish. `fail()` wakes a blocked caller when the
    writer thread died.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.failed = False
        self._cond = threading.Condition()

    def acquire(self, nbytes: int) -> bool:
        """Blocks until `nbytes` fit; False when the writer failed meanwhile."""
        with self._cond:
            while (self.limit is not None and self.used and self.used + nbytes > self.limit
                   and not self.failed):
                self._cond.wait()
            if self.failed:
                return False
            self.used += nbytes
            self.peak = max(self.peak, self.used)
            return True

    def release(self, nbytes: int) -> None:
        with self._cond:
            self.used -= nbytes
            self._cond.notify_all()

    def fail(self) -> None:
        with self._cond:
            self.failed = True
            self._cond.notify_all()



def _gpu_variable(entry: Any) -> Any:
    variable = getattr(entry, "variable", None)
    return variable if variable is not None and devices.is_gpu(variable.device) else None


def _device_room(entries: list[Any]) -> dict[str, bool]:
    """For each GPU holding variables of `entries`: whether it has room for copies of them all (has_room)."""
    totals: dict[str, int] = {}
    for entry in entries:
        variable = _gpu_variable(entry)
        if variable is not None:
            totals[variable.device] = totals.get(variable.device, 0) + variable.nbytes
    return {label: device_transfers.has_room(label, nbytes) for label, nbytes in totals.items()}


def _take_snapshot(entry: Any, room: dict[str, bool], snapshot: SnapshotEntry) -> None:
    """Hands `snapshot` a copy of `entry`'s value that nobody else changes.

    A GPU variable's value is copied on its device when the device has room
    for the whole snapshot (`room`): the copy is queued on the caller's
    current stream (after the caller's kernels, before its next ones), and the
    background writer waits for it before moving it to the host. Otherwise a host copy.
    """
    variable = _gpu_variable(entry)
    if variable is not None:
        if room[variable.device]:
            copy = variable.read_value()  # a device-side copy, queued on the current stream
            snapshot.put(copy, device_transfers.queued_work_done(variable.device))
        else:
            snapshot.put(variable.numpy())  # a new host array already
        return
    value = entry.get()
    if devices.is_device_array(value):
        snapshot.put(device_transfers.to_host(value))  # a new C-contiguous host array
    else:
        snapshot.put(np.array(value, order="C", copy=True))


def _take_snapshots(entries: list[Any], room: dict[str, bool], snapshots: list[SnapshotEntry]) -> None:
    """`_take_snapshot` of every entry; the device-side copies of each device's GPU variables are taken
    together (variable_batches.device_snapshots: one allocation, one copy call each, one event)."""
    on_device: dict[str, list[tuple[Any, SnapshotEntry]]] = {}
    for entry, snapshot in zip(entries, snapshots):
        variable = _gpu_variable(entry)
        if variable is not None and room[variable.device]:
            on_device.setdefault(variable.device, []).append((variable, snapshot))
        else:
            _take_snapshot(entry, room, snapshot)
    for label, members in on_device.items():
        copies = device_snapshots([variable for variable, _ in members], label)
        done = device_transfers.queued_work_done(label)
        for (_, snapshot), copy in zip(members, copies):
            snapshot.put(copy, done)


def _start_writer(run: Callable[[], Path]) -> Future[Path]:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-save")
    future = pool.submit(run)
    pool.shutdown(wait=False)
    return future


def save_async(final: Path, entries: list[Any], *, step: int | None = None,
               metadata: Mapping[str, Any] | None = None, format: str | None = None,
               checksum: bool = True, pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES,
               max_snapshot_bytes: int | None = None,
               after: Callable[[Path], object] | None = None,
               overwrite: bool = False, layout: str | None = None, storage: Storage | None = None,
               durable: bool = True) -> SaveHandle:
    """Snapshots `entries` and writes them in a background thread.

    Host values are copied in host memory; a GPU variable's value is copied on
    its device when the device has room. Such copies are queued on the
    caller's current CUDA stream, so the call returns once they are queued and
    the caller's later kernels on that stream cannot change them; the writer
    waits for each copy before it moves it to the host. `max_snapshot_bytes`
    counts both kinds of copies.

    Returns once every value has been copied (so the caller may mutate its
    variables at once). Without `max_snapshot_bytes` the background thread
    starts after the last copy: started first, its HDF5 and Python work held
    the GIL while the caller copied (384 host copies of W1 at 0.05 scale: the
    call took 33 ms instead of 7-9; the call and the write together, the same).
    With `max_snapshot_bytes` (bytes), at most that many
    bytes of copies are alive: the call then blocks while the background
    thread writes the copies already taken and frees them, and returns when
    the last value has been copied. Nothing of the caller's runs between the
    first and the last copy, so the snapshot is consistent. `after(path)`
    runs in the background thread after a successful save (the manager's
    pointer and retention); its result is ignored.

    Raises:
      As `save_entries`, for names, dtypes and metadata (before anything is copied).
    """
    fmt = format_for_path(final, format)
    check_replaceable(final, fmt, overwrite, storage=storage)
    records = plan_records(entries)
    header = _header(fmt, step, metadata, final)
    packed_nbytes = planned_layout(header, records, layout, pack_threshold_bytes)
    budget = _SnapshotBudget(None if max_snapshot_bytes is None else max(0, int(max_snapshot_bytes)))
    snapshots = [SnapshotEntry(entry) for entry in entries]

    def run() -> Path:
        try:
            path = publish(final, fmt, list(snapshots), records, packed_nbytes, header, checksum,
                           budget.release, storage=storage, durable=durable)
            if after is not None:
                after(path)
            return path
        finally:
            budget.fail()  # unblocks a caller still copying when the writer stopped early

    room = _device_room(entries)
    if budget.limit is None:  # every copy at once, before the writer starts (it would compete for the GIL)
        budget.acquire(sum(record.nbytes for record in records))
        _take_snapshots(entries, room, snapshots)
        return SaveHandle(final, _start_writer(run))
    future = _start_writer(run)
    for entry, record, snapshot in zip(entries, records, snapshots):
        if not budget.acquire(record.nbytes):
            break  # the writer failed; wait() reports why
        try:
            _take_snapshot(entry, room, snapshot)
        except BaseException as err:
            snapshot.put(err)
            future.exception()  # let the writer stop before the caller sees the error
            raise
    return SaveHandle(final, future)


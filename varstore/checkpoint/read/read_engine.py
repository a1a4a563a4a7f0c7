"""The bulk read engine: fill many targets from one open checkpoint, fast; `read_into_targets` is its one call.

Owns the threads of a bulk read: a helper thread checksums large values
while the next one is read, and the storage's read-ahead fetches the planned
extents ahead of the reader. Small packed variables take the batch path: one
read of the packed blob, every checksum on it, then one validated copy into
every buffer (variables.restore_many); those without memory (CPU ones) get
their copies last, with the other Variables without memory, which are read
into new arrays (faulted in ahead of the reads by residency.populated),
checked, and adopted last. Values
for GPU variables are read into pinned staging and copied to the device
asynchronously (device_transfers); a deferred check holds its staging until
it has read it; copies and checks are waited for before the engine returns. What is
read, where it goes and which checks run is planned once (read_plan.py) before
any target changes; the engine executes the plan and reaches the reader only
through it: it lends the reader a ReadSession for the duration and takes it
back, threads stopped, whatever happens. Decides nothing about names or which targets
(restore.py does); never writes files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.store import device_transfers, devices
from varstore.checkpoint.format.checksum import crc32c_of
from varstore.checkpoint.format.manifest import Record
from varstore.checkpoint.read.read_plan import PACKED_CACHE_BYTES, ReadPlan, check_packed, plan_read
from varstore.checkpoint.read.reader import CheckpointValue, ReadSession, VarstoreReader
from varstore.checkpoint.read.residency import populated

__all__ = ["read_into_targets", "Validate", "check_packed", "PACKED_CACHE_BYTES"]  # the last two: read_plan.py's
#: Bulk restores announce values to the storage this many bytes ahead (read-ahead).
READ_AHEAD_BYTES = 64 << 20
#: In bulk restores, values of at least this many bytes are checksummed in a helper thread.
THREADED_CHECK_BYTES = 1 << 20

#: Checks one (target name, target, source) before anything is written; raises to refuse.
Validate = Callable[[str, Any, CheckpointValue], None]


def read_into_targets(reader: VarstoreReader, items: Sequence[tuple[str, str, Any]], *, verify: bool,
                      lazy: bool, validate: Validate) -> None:
    """Fills every target from `reader`: all validated first, then read (or, lazily, handed a source).

    Args:
      reader: the open checkpoint.
      items: (checkpoint name, target name, target) triples; a target is a
        Variable (anything with `restore_from`) or a writeable NumPy array.
      verify: check crc32c checksums.
      lazy: hand Variables a source to read at first use instead of reading now.
        Without it every value is read and checked before this returns;
        Variables without memory get new arrays, read and checked first and
        assigned last, so a failure leaves them as they were.
      validate: called for every item (with the variable's CheckpointValue)
        before any target changes; raises to refuse the whole restore.

    Raises:
      Whatever `validate` raises, before any target changed.
      ChecksumError / CorruptCheckpointError: damaged bytes, naming the variable and the file.
        Packed variables are all checked before any is written; large values
        are checked in a helper thread after they were read into place (in
        allocated targets), and the first failure (in read order) is raised
        once all were read.
    """
    from varstore.store.variables import Variable, restore_many

    plan = plan_read(reader, items, verify=verify, lazy=lazy)  # the one call into the reader
    session = ReadSession()
    session.packed = plan.packed
    batch, fresh_batch = plan.batch, plan.fresh_batch
    with device_transfers.batch(0 if lazy else _device_bytes(items)):  # GPU targets: see device_transfers
        checks = _Checks(plan, session)
        lent = plan.lend(session)
        lent.__enter__()
        try:
            sources = plan.reads
            for variable, source in plan.mismatched_packed():
                validate(variable.name, variable, source)
            for obj, name, source in sources:
                validate(name, obj, source)
            fresh: list[tuple[Any, CheckpointValue]] = []  # Variables without memory: read into new arrays
            if not lazy:
                fresh = [(obj, source) for obj, _, source in sources
                         if isinstance(obj, Variable) and not obj.is_allocated]
                fresh_ids = {id(obj) for obj, _ in fresh}
                sources = [item for item in sources if id(item[0]) not in fresh_ids]
            if plan.packed_checks is not None:
                plan.check_packed()
                session.packed_checked = True
            fresh_values: list[Any] = []
            if fresh:  # read and check into new memory before any variable changes: all-or-nothing for them
                checks.start(verify, [source.name for _, source in fresh])
                host = {id(obj): np.empty(obj.shape, dtype=obj.dtype) for obj, _ in fresh
                        if not devices.is_gpu(obj.device)}
                with populated(list(host.values())):  # page faults overlap the disk (residency.py)
                    for obj, source in fresh:
                        new = host.get(id(obj))
                        if new is None:  # new device memory, filled through pinned staging
                            fresh_values.append(device_transfers.fill_on_device(source.read_into, obj.shape,
                                                                                obj.dtype, obj.device))
                            continue
                        source.read_into(new)
                        fresh_values.append(new)
                del host
                checks.finish()
            if not lazy:
                checks.start(verify, [source.name for _, _, source in sources])
            restore_many(batch.variables, batch.values)
            batch.values = []
            for obj, name, source in sources:
                if hasattr(obj, "restore_from"):
                    obj.restore_from(source, lazy=lazy)
                else:
                    source.read_into(obj)
            checks.finish()
            # last: a failure of the in-place targets above leaves the variables without memory as they were.
            # The packed ones get copies of their views (restore_many copies what it cannot adopt).
            restore_many([obj for obj, _ in fresh] + fresh_batch.variables, fresh_values + fresh_batch.values,
                         adopt=True)
            del fresh_values
            fresh_batch.values = []
        finally:
            checks.close()
            lent.__exit__(None, None, None)


def _device_bytes(items: Sequence[tuple[str, str, Any]]) -> int:
    """Bytes of the targets that live on a GPU (sizes the pinned staging ring); 0 without a look when none can."""
    if not devices.gpu_in_use():
        return 0
    total = 0
    for _, _, obj in items:
        device = getattr(obj, "device", None)
        if isinstance(device, str) and devices.is_gpu(device):
            total += int(np.prod(obj.shape, dtype=np.int64)) * np.dtype(obj.dtype).itemsize
    return total


class _Checks:
    """The engine's helper threads for one phase of reads: deferred crc32c checks and the storage's read-ahead."""

    def __init__(self, plan: ReadPlan, session: ReadSession) -> None:
        self._plan = plan
        self._session = session
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Record, Future[int]]] = []

    def start(self, verify: bool, names: list[str]) -> None:
        """Begins a phase reading `names` in this order: large values checked off-thread, extents read ahead."""
        session = self._session
        if verify:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-crc")
            session.defer = self._defer
        session.read_ahead = self._plan.start_read_ahead(names, READ_AHEAD_BYTES)

    def _defer(self, record: Record, out: npt.NDArray[Any]) -> bool:
        if record.nbytes < THREADED_CHECK_BYTES or self._pool is None:
            return False
        future = self._pool.submit(crc32c_of, out)
        device_transfers.guard(out, future)  # pinned staging (a GPU target) is kept until the check read it
        self._pending.append((record, future))
        return True

    def finish(self) -> None:
        """Ends the phase: stops the read-ahead, waits for the deferred checks.

        Raises:
          ChecksumError: naming the first damaged variable (in read order) and the file.
        """
        self._stop()
        pending, self._pending = self._pending, []
        for record, future in pending:
            found = future.result()
            if found != record.checksum:
                self._plan.checksum_error(record, found)

    def _stop(self) -> None:
        session = self._session
        if session.read_ahead is not None:
            session.read_ahead.stop()
            session.read_ahead = None
        session.defer = None

    def close(self) -> None:
        """Stops everything and ends the helper thread (the reader may be closed afterwards)."""
        self._stop()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

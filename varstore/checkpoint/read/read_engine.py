"""The bulk read engine: fill many targets from one open checkpoint, fast; `read_into_targets` is its one call.

Asks the reader for one ReadPlan (read_plan.py) and executes it, never
calling the reader again: every value is read through the plan's bound reads
(planned_values.py) and checked through its ReadChecks (read_checks.py),
which run each phase of reads with the storage's read-ahead ahead of it and a
helper thread checksumming large values while the next one is read. Small
packed variables take the batch path: one read of the packed blob, every
checksum on it, then one validated copy into every buffer
(variables.restore_many); those without memory (CPU ones) get their copies
last, with the other Variables without memory, which are read first into new
arrays (faulted in ahead of the reads by residency.populated), checked, and
adopted last. Values for GPU variables are read into pinned staging, large
ones by device_transfers' reader threads (which check them there), and
copied to the device asynchronously; a deferred check holds its staging
until it has read it; each phase waits for its reader threads (their first
error raised there), copies and checks are waited for before the engine
returns, and its threads stop whatever happens. Decides
nothing about names or which targets (restoration.py does); never writes files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from varstore.store import device_transfers, devices
from varstore.store.host_arrays import host_empty
from varstore.checkpoint.read.read_checks import THREADED_CHECK_BYTES
from varstore.checkpoint.read.read_plan import PACKED_CACHE_BYTES, ReadPlan, check_packed, plan_read
from varstore.checkpoint.read.reader import VarstoreReader
from varstore.checkpoint.read.residency import populated
from varstore.store.value_sources import ValueSource

__all__ = ["read_into_targets", "Validate", "check_packed", "PACKED_CACHE_BYTES",  # the last three: read_plan.py's
           "THREADED_CHECK_BYTES"]                                               # and read_checks.py's
#: Bulk restores announce values to the storage this many bytes ahead (read-ahead).
READ_AHEAD_BYTES = 64 << 20

#: Checks one (target name, target, source) before anything is written; raises to refuse.
Validate = Callable[[str, Any, ValueSource], None]


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
      validate: called for every item (with the value's source)
        before any target changes; raises to refuse the whole restore.

    Raises:
      Whatever `validate` raises, before any target changed.
      ChecksumError / CorruptCheckpointError: damaged bytes, naming the variable and the file.
        Packed variables are all checked before any is written; large values
        are checked in a helper thread after they were read into place (in
        allocated targets), and the first failure (in read order) is raised
        once all were read.
    """
    from varstore.store.variables import restore_many

    plan = plan_read(reader, items, verify=verify, lazy=lazy)  # the one call into the reader
    with device_transfers.batch(0 if lazy else _device_bytes(items), readers=not lazy):  # GPU: device_transfers
        for obj, name, source in plan.validations:
            validate(name, obj, source)
        fresh_values = _read_fresh(plan) if plan.fresh else []
        batch, fresh_batch = plan.batch, plan.fresh_batch
        with plan.checks.phase(plan.ahead, READ_AHEAD_BYTES, None if plan.fresh else plan.packed_checks,
                               device_transfers.settle):
            if batch.variables:
                restore_many(batch.variables, batch.values)
            batch.values = []
            for variable, source in plan.restores:
                variable.restore_from(source, lazy=lazy)
            for array, source in plan.fills:
                source.read_into(array)
        # last: a failure of the in-place targets above leaves the variables without memory as they were.
        # The packed ones get copies of their views (restore_many copies what it cannot adopt).
        if plan.fresh or fresh_batch.variables:
            restore_many([obj for obj, _ in plan.fresh] + fresh_batch.variables, fresh_values + fresh_batch.values,
                         adopt=True)
        del fresh_values
        fresh_batch.values = []


def _read_fresh(plan: ReadPlan) -> list[Any]:
    """Reads and checks the values of Variables without memory into new memory, before any variable
    changes (all-or-nothing for them); the packed values are checked on the blob first."""
    values: list[Any] = []
    host = {id(obj): host_empty(obj.shape, obj.dtype) for obj, _ in plan.fresh if not devices.is_gpu(obj.device)}
    # page faults overlap the disk (residency.py); asked whether the bytes are memory before any read-ahead
    with populated(list(host.values()), plan.fresh_resident), \
            plan.checks.phase(plan.fresh_ahead, READ_AHEAD_BYTES, plan.packed_checks, device_transfers.settle):
        for obj, source in plan.fresh:
            new = host.get(id(obj))
            if new is None:  # new device memory, filled through pinned staging
                values.append(device_transfers.fill_on_device(source.read_into, obj.shape, obj.dtype, obj.device))
                continue
            source.read_into(new)
            values.append(new)
    return values


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

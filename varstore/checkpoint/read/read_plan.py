"""ReadPlan: one bulk read of an open checkpoint, planned once: what is read, where it goes, which checks.

`plan_read` consults the reader and nothing else does during the read: its
manifest's columns, the packed blob (its one read of value bytes), one
PlannedValue per value read one by one (planned_values.py: bound reads, no
way back to the reader), the extents the storage reads ahead, and one
ReadChecks (read_checks.py) for every check. read_engine.py executes the
plan: packed Variables restored from views of the blob, Variables without
memory read into new arrays first, the rest filled in place. Owns no threads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from varstore.store import devices
from varstore.store.variable_batches import mismatched
from varstore.checkpoint.format.packed import packed_views
from varstore.checkpoint.read.planned_values import PlannedValue
from varstore.checkpoint.read.read_checks import ReadChecks, check_packed_blob
from varstore.checkpoint.read.reader import VarstoreReader

if TYPE_CHECKING:
    from varstore.checkpoint.format.manifest import ManifestColumns
    from varstore.storage import ReadAhead
    from varstore.store.value_sources import ValueSource

__all__ = ["ReadPlan", "PackedBatch", "plan_read", "check_packed", "PACKED_CACHE_BYTES"]

#: The packed blob is read whole for bulk restores when at most this many bytes.
PACKED_CACHE_BYTES = 256 << 20

#: Starts the storage's read-ahead over one phase's bytes with a window of this many bytes.
StartReadAhead = Callable[[int], "ReadAhead | None"]


class PackedBatch:
    """Packed Variables restored from views of the blob, with their manifest indices (one list each, aligned)."""

    __slots__ = ("variables", "indices", "values")

    def __init__(self) -> None:
        self.variables: list[Any] = []
        self.indices: list[int] = []
        self.values: list[npt.NDArray[Any]] = []


class ReadPlan:
    """What one bulk read does, decided before any target changes (see plan_read); plain data and bound reads.

    Attributes:
      batch: packed Variables that hold memory: copied from the blob in one batch.
      fresh_batch: packed CPU Variables without memory: given copies of their views, last.
      validations: (target, target name, source) of every value whose shape and dtype the caller
        validates before anything changes: packed ones that differ from their Variable, then the rest.
      fresh: (Variable, source) of Variables without memory in an eager read: read into new arrays first.
      restores: (Variable, source) restored in place (or, lazily, handed their source); a target
        that is not a Variable but has `restore_from` is restored the same way.
      fills: (array, source) of the NumPy targets, filled in place.
      packed_checks: (manifest, indices) of every packed value to be read, checked on the blob before any
        is used; None unless verifying an eager read with a blob.
      fresh_ahead, ahead: the storage's read-ahead over the bytes of `fresh` and of `restores` + `fills`
        (in that order), started with a window; None for none.
      fresh_resident: asks the storage whether the bytes of `fresh` are memory already (residency.py's
        hint, asked before their read-ahead starts); None for a lazy read.
      checks: the read's ReadChecks (the blob, the crc32c checks, the running read-ahead).
    """

    def __init__(self, checks: ReadChecks, batch: PackedBatch, fresh_batch: PackedBatch) -> None:
        self.checks = checks
        self.batch = batch
        self.fresh_batch = fresh_batch
        self.validations: list[tuple[Any, str, ValueSource]] = []
        self.fresh: list[tuple[Any, ValueSource]] = []
        self.restores: list[tuple[Any, ValueSource]] = []
        self.fills: list[tuple[Any, ValueSource]] = []
        self.packed_checks: tuple[ManifestColumns, list[int]] | None = None
        self.fresh_ahead: StartReadAhead | None = None
        self.ahead: StartReadAhead | None = None
        self.fresh_resident: Callable[[], bool] | None = None


def plan_read(reader: VarstoreReader, items: Sequence[tuple[str, str, Any]], *, verify: bool,
              lazy: bool) -> ReadPlan:
    """Plans filling `items` ((checkpoint name, target name, target) triples) from `reader`.

    An eager read takes the packed blob (one read, at most PACKED_CACHE_BYTES)
    and restores packed Variables from views of it: those holding memory in one
    batch, CPU ones without memory last; a packed Variable on a GPU without
    memory, every non-Variable target and every value stored at its own path
    is read one by one through a PlannedValue (lazily, a Variable is handed
    the reader's own source instead, read at first use).

    Raises:
      UnknownVariableError / CorruptCheckpointError: as reader.record and reader.packed_blob raise them.
    """
    from varstore.store.variables import Variable

    manifest = reader.manifest
    batch, fresh_batch = PackedBatch(), PackedBatch()
    rest: list[tuple[str, str, Any]] = []
    if lazy:
        rest = list(items)
    else:
        index_of, paths = manifest.index.get, manifest.columns["path"]
        on_gpu: dict[str, bool] = {}  # per device label, asked once (12,000 variables share one or two)
        for item in items:
            obj = item[2]
            index = index_of(item[0]) if isinstance(obj, Variable) else None
            if index is None or paths[index] is not None:
                rest.append(item)
                continue
            if obj.is_initialized:
                group = batch
            else:
                device = obj.device
                gpu = on_gpu.get(device)
                if gpu is None:
                    gpu = on_gpu[device] = devices.is_gpu(device)
                if gpu:
                    rest.append(item)
                    continue
                group = fresh_batch
            group.variables.append(obj)
            group.indices.append(index)
    kinds = [_kind(obj, lazy) for _, _, obj in rest]
    # what the reader holds, asked in one go: the blob, the bound reads, records, sources, extents
    blob = None if lazy else reader.packed_blob(PACKED_CACHE_BYTES)
    if blob is None and (batch.variables or fresh_batch.variables):  # none, or over PACKED_CACHE_BYTES
        rest, batch, fresh_batch = list(items), PackedBatch(), PackedBatch()  # every value read one by one
        kinds = [_kind(obj, lazy) for _, _, obj in rest]
    reads = reader.bound_reads()
    sources: list[Any] = [reader.source(ckpt, verify=verify) if kind == "lazy" else reader.record(ckpt)
                          for (ckpt, _, _), kind in zip(rest, kinds)]
    fresh_ahead = ahead = fresh_resident = None
    if not lazy:
        reader.locate([item[0] for item, kind in zip(rest, kinds) if kind != "lazy"])  # Zarr: metadata in parallel
        fresh_names = [item[0] for item, kind in zip(rest, kinds) if kind == "fresh"]
        fresh_ahead = _read_ahead(reader, fresh_names)
        fresh_resident = functools.partial(reader.resident, fresh_names)
        ahead = _read_ahead(reader, [item[0] for item, kind in zip(rest, kinds) if kind == "restore"]
                            + [item[0] for item, kind in zip(rest, kinds) if kind == "fill"])
    plan = ReadPlan(ReadChecks(reader.path, verify, blob), batch, fresh_batch)
    plan.fresh_ahead, plan.ahead, plan.fresh_resident = fresh_ahead, ahead, fresh_resident
    for group in (batch, fresh_batch):
        if group.indices and blob is not None:
            group.values = packed_views(blob, manifest.columns, manifest.names, group.indices, str(reader.path))
            for i in mismatched(group.variables, group.values):  # validated: a cast
                variable = group.variables[i]
                plan.validations.append((variable, variable.name,
                                         PlannedValue(manifest.record(group.indices[i]), reads, plan.checks, verify)))
    lists = {"fresh": plan.fresh, "restore": plan.restores, "fill": plan.fills, "lazy": plan.restores}
    for (_, name, obj), kind, source in zip(rest, kinds, sources):
        if kind != "lazy":
            source = PlannedValue(source, reads, plan.checks, verify)
        plan.validations.append((obj, name, source))
        lists[kind].append((obj, source))
    if not lazy and verify and blob is not None:
        plan.packed_checks = (manifest, batch.indices + fresh_batch.indices
                              + _packed_indices(manifest, [ckpt for ckpt, _, _ in rest]))
    return plan


def _kind(obj: Any, lazy: bool) -> str:
    """How a target not restored from the blob is read: "fresh" (an eager Variable without memory: into
    new memory first), "restore" (restore_from now), "lazy" (restore_from a reader source), "fill" (an array)."""
    from varstore.store.variables import Variable

    if not hasattr(obj, "restore_from"):  # anything else with restore_from restores as a Variable
        return "fill"
    if lazy:
        return "lazy"
    return "fresh" if isinstance(obj, Variable) and not obj.is_allocated else "restore"


def _read_ahead(reader: VarstoreReader, names: list[str]) -> StartReadAhead | None:
    """The storage's read-ahead over the bytes of `names` (read in this order), to be started with a window:
    inside a single file with trusted offsets, else over a Zarr directory's files; None for none."""
    if not names:
        return None
    planned = reader.direct_extents(names)
    if planned is not None:
        return functools.partial(reader.storage.read_ahead, planned[0], planned[1])
    files = reader.hint_files(names)
    start = getattr(reader.storage, "read_ahead_files", None)
    return functools.partial(start, files) if files and start is not None else None


def _packed_indices(manifest: ManifestColumns, names: list[str]) -> list[int]:
    index_of, paths = manifest.index, manifest.columns["path"]
    found = []
    for name in names:
        index = index_of.get(name)
        if index is not None and paths[index] is None:
            found.append(index)
    return found


def check_packed(reader: VarstoreReader, blob: bytearray, indices: list[int]) -> None:
    """Checks the crc32c of packed variables (manifest indices) on the blob, before any is used.

    Raises:
      ChecksumError: naming the first damaged variable and the file.
      CorruptCheckpointError: a variable lies outside the blob.
    """
    check_packed_blob(reader.path, blob, reader.manifest, indices)

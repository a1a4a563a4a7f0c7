"""Collective restore: every rank reads only the regions of the variables it holds, from any checkpoint.

Executes a plan_restore plan (plan.py): the checkpoint's global arrays
(after an assignment_map, TF init_from_checkpoint rules as
varstore.restore) are matched with the job's variables; each rank reads the
regions of its owned and replicated variables (regions.py) from a
checkpoint written by any number of ranks, with any partitioning or none,
or one that stores the parts under their own names (phase-1 files).
Validation runs on every rank and its outcome is allgathered (agree.py), so
every rank raises the same error or all proceed; a failed restore changes
nothing. Never writes checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from varstore.checkpoint._batch import paused_gc
from varstore.checkpoint.read.reader import VarstoreReader, open_varstore
from varstore.checkpoint.read.regions import RegionSource, RegionTarget, read_regions
from varstore.checkpoint.read.restoration import PendingResolver, covered_targets, map_names
from varstore.checkpoint.read.restore_result import Consumption, RestoreResult, strict_restore_error
from varstore.distributed.agree import agree
from varstore.distributed.checks import check_structure
from varstore.distributed.communicator import as_communicator
from varstore.distributed.plan import VariableLayout, layouts_of, plan_restore
from varstore.distributed.shards import ShardPart
from varstore.store.value_sources import check_restorable

__all__ = ["restore_collective"]


def _planned(reader: VarstoreReader, store: Any, rank: int, assignment_map: Mapping[str, str] | None,
             strict: bool, verify: bool) -> tuple[list[tuple[Any, Any]], RestoreResult, dict[str, str]]:
    names = reader.keys()
    mapped = map_names(names, assignment_map)
    saved: dict[str, tuple[tuple[int, ...], str]] = {}
    source_of: dict[str, str] = {}
    for ckpt in names:
        if ckpt in mapped:
            record = reader.record(ckpt)
            saved[mapped[ckpt]] = (record.shape, record.dtype)
            source_of[mapped[ckpt]] = ckpt
    layouts: list[VariableLayout] = []
    for layout in layouts_of(store):
        if layout.array not in saved and layout.name in saved:  # a part saved under its own name
            layout = dataclasses.replace(layout, array=layout.name, array_shape=layout.shape,
                                         offset=(0,) * len(layout.shape))
        layouts.append(layout)
    covered = set(covered_targets(sorted({layout.array for layout in layouts}), assignment_map))
    plan = plan_restore(saved, [layout for layout in layouts if layout.array in covered], rank)
    unexpected_targets = sorted(plan.unexpected)
    unexpected = [source_of[t] for t in unexpected_targets]
    missing = list(plan.missing)
    if strict and missing:  # unexpected values only fail assert_consumed (as the one-process restore)
        raise strict_restore_error(reader.path, missing, unexpected, sorted(saved))
    variables = {v.name: v for v in store.variables()}
    pairs = []
    for item in plan.reads:
        variable = variables[item.variable]
        ckpt = source_of[item.array]
        source: Any = RegionSource(reader, ckpt, item.offset, item.shape, verify)
        check_restorable(variable, source)
        pairs.append((variable, source))
    restored = [layout.name for layout in layouts if layout.array in covered and layout.array in saved]
    result = RestoreResult(restored, missing, unexpected, [])
    waiting = {t: source_of[t] for t in unexpected_targets}
    return pairs, result, waiting


def _apply(reader: VarstoreReader, pairs: list[tuple[Any, Any]], lazy: bool, verify: bool) -> None:
    """Reads every pair's region; the regions of one array in one pass (regions.read_regions: each stored byte
    read and checked once), into new memory for unallocated variables and in place for shards."""
    from varstore.store.variables import restore_many

    if lazy:
        for variable, source in pairs:
            variable.restore_from(source, lazy=True)
        return
    fresh = [(v, s) for v, s in pairs if not v.is_allocated]
    values = [np.empty(source.shape, dtype=source.dtype) for _, source in fresh]
    batches: dict[str, list[RegionTarget]] = {}
    for (_, source), value in zip(fresh, values):  # read and check into new memory before any variable changes
        batches.setdefault(source.name, []).append(RegionTarget(source.offset, source.shape, value))
    in_place = []
    for variable, source in pairs:
        if isinstance(variable, ShardPart) and variable.is_owned:
            batches.setdefault(source.name, []).append(
                RegionTarget(source.offset, source.shape, variable.restore_buffer()))
        elif variable.is_allocated:
            in_place.append((variable, source))
    for array, targets in batches.items():
        read_regions(reader, array, targets, verify)
    for variable, source in in_place:
        variable.restore_from(source)
    restore_many([v for v, _ in fresh], values, adopt=True)


def restore_collective(path: os.PathLike[str] | str, store: Any, comm: Any = None, *,
                       assignment_map: Mapping[str, str] | None = None, strict: bool = True,
                       lazy: bool = False, verify: bool = True, format: str | None = None) -> RestoreResult:
    """Restores a store collectively: every rank of `comm` calls it and reads only what it holds.

    See varstore.restore(..., comm=) for the arguments.

    Returns:
      The RestoreResult (the same names on every rank; `restored` lists every
      variable of the job that got a value, on whichever rank holds it).

    Raises:
      On EVERY rank the same error (prefixed "rank R of N: " when one rank found it):
      DistributedMismatchError (the stores differ), RestoreError (strict),
      ShapeMismatchError / DtypeMismatchError (naming the variable and the file),
      ChecksumError, CheckpointNotFoundError, NotACheckpointError, CorruptCheckpointError.
    """
    communicator = as_communicator(comm)
    if not getattr(store, "structure_agreed", False):  # a ShardedState is the same everywhere by construction
        check_structure(store, communicator)
    opened: list[VarstoreReader] = []

    def prepare() -> tuple[list[tuple[Any, Any]], RestoreResult, dict[str, str]]:
        opened.append(open_varstore(path, format))
        return _planned(opened[0], store, communicator.rank, assignment_map, strict, verify)

    with paused_gc():
        try:  # open and plan in one step: one exchange of outcomes, then one for the reads
            pairs, result, waiting = agree(communicator, prepare)
            reader = opened[0]
            agree(communicator, lambda: _apply(reader, pairs, lazy, verify))
        except BaseException:
            for opened_reader in opened:
                opened_reader.close()
            raise
    deferred: list[str] = []
    resolver = None
    if waiting and hasattr(store, "add_pending_restore"):
        deferred = sorted(waiting)
        resolver = PendingResolver(reader, waiting, verify)
        store.add_pending_restore(resolver)
    elif not lazy:
        reader.close()
    return dataclasses.replace(result, deferred=deferred,
                               consumption=_consumption(str(reader.path), result, resolver))


def _consumption(location: str, result: RestoreResult, resolver: PendingResolver | None) -> Consumption:
    """assert_consumed of a collective restore: the names as planned; values still waiting count as unconsumed."""
    return Consumption(location, lambda: list(result.missing),
                       lambda: resolver.unconsumed() if resolver is not None else list(result.unexpected))

"""Consistency checks across ranks: the store's structure, and the values of replicated variables.

Both checks are collective and never hang: every rank sends one compact
digest (allgather); only when digests differ are the full descriptions
exchanged, and every rank then computes the SAME first difference from the
SAME gathered data and raises the same error. Knows the store through its
public inventory (variables(), name, shape, dtype, task, save_slice_info).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from varstore import dtypes
from varstore.checkpoint.format.checksum import crc32c_of
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.errors import DistributedMismatchError, ReplicaDivergenceError
from varstore.store.placement import task_index

__all__ = ["describe_structure", "check_structure", "replica_checksums", "check_replicas"]

_FIELDS = ("shape", "dtype", "task", "slice", "holders")
_MAX_NAMED = 10


def describe_structure(store: Any) -> dict[str, dict[str, Any]]:
    """Name -> {shape, dtype, task, slice} for every variable of `store` (JSON-compatible).

    `task` is the "/job:*/task:K" placement (None: replicated); `slice` is
    [full name, full shape, offset] for a part of a partitioned variable, else
    None; `holders`, only for a shard some ranks hold (distributed/shards.py),
    lists them. The device label (cpu:0 / gpu:0) is left out: ranks may differ there.
    """
    described: dict[str, dict[str, Any]] = {}
    for variable in store.variables():
        info = variable.save_slice_info
        described[variable.name] = {
            "shape": list(variable.shape),
            "dtype": dtypes.dtype_name(variable.dtype),
            "task": variable.task,
            "slice": None if info is None else [info.full_name, list(info.full_shape), list(info.var_offset)],
        }
        holders = getattr(variable, "holders", ())
        if holders:
            described[variable.name]["holders"] = list(holders)
    return described


def _digest(message: Any) -> str:
    return hashlib.sha256(json.dumps(message, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"


def _first_difference(descriptions: list[dict[str, dict[str, Any]]]) -> str:
    """The first difference (sorted by variable name) among the ranks' descriptions, as one sentence."""
    names = sorted(set().union(*descriptions))
    for name in names:
        having = [rank for rank, d in enumerate(descriptions) if name in d]
        if len(having) != len(descriptions):
            lacking = [rank for rank, d in enumerate(descriptions) if name not in d]
            return (f"variable '{name}' exists on {_ranks(having)} but not on {_ranks(lacking)}; every rank must "
                    f"create the same variables in the same scopes")
        for field in _FIELDS:
            values = [json.dumps(d[name].get(field)) for d in descriptions]
            if len(set(values)) > 1:
                groups: dict[str, list[int]] = {}
                for rank, value in enumerate(values):
                    groups.setdefault(value, []).append(rank)
                seen = "; ".join(f"{_ranks(r)}: {v}" for v, r in groups.items())
                what = {"slice": "partitioning (full name, full shape, offset)", "task": "placement task"}.get(field, field)
                return (f"variable '{name}' has a different {what} on different ranks ({seen}); every rank "
                        f"must build the same model with the same device functions and partitioners")
    return "the ranks' descriptions differ in a way no field shows"  # unreachable when digests differ


def check_structure(store: Any, comm: Any) -> None:
    """Checks that every rank's store has the same variables (names, shapes, dtypes, tasks, partitioning).

    Collective: every rank of `comm` must call it. Also checks that no task
    K >= comm.size is named (there would be no owner).

    Args:
      store: this rank's VariableStore.
      comm: an mpi4py communicator or a varstore.distributed.Communicator.

    Raises:
      DistributedMismatchError: on EVERY rank, with the same message naming
        the first differing variable (by name) and what differs on which ranks.
    """
    communicator: Communicator = as_communicator(comm)
    described = describe_structure(store)
    digests = communicator.allgather(_digest(described))
    if len(set(digests)) > 1:
        descriptions = communicator.allgather(described)
        raise DistributedMismatchError(
            f"the {communicator.size} ranks disagree about the variable store: "
            f"{_first_difference(descriptions)}")  # type: ignore[arg-type]
    size = communicator.size
    for name in sorted(described):
        task = described[name]["task"]
        owner = task_index(task)
        if owner is not None and owner >= size:
            raise DistributedMismatchError(
                f"variable '{name}' is placed on '{task}', but the communicator has {size} rank(s) "
                f"(0..{size - 1}); task K is owned by rank K: launch more processes or use fewer tasks")


def replica_checksums(store: Any, comm: Any = None) -> dict[str, list[int | None]]:
    """crc32c of the C-order bytes of every replicated variable (no task), on every rank.

    Collective when `comm` is given (every rank must call it).

    Args:
      store: this rank's VariableStore.
      comm: an mpi4py communicator or a Communicator; None: this process only.

    Returns:
      Variable name -> [checksum on rank 0, on rank 1, ...] (one entry without
      `comm`); None where the variable is not initialized on that rank (this
      call initializes nothing), and for a name a rank does not have.
    """
    communicator = as_communicator(comm)
    gathered: list[dict[str, Any]] = communicator.allgather(_local_checksums(store))  # type: ignore[assignment]
    names = sorted(set().union(*gathered))
    return {name: [g.get(name) for g in gathered] for name in names}


def _local_checksums(store: Any) -> dict[str, int | None]:
    sums: dict[str, int | None] = {}
    for variable in store.variables():
        if variable.task is not None:
            continue
        if not variable.is_initialized:
            sums[variable.name] = None
            continue
        sums[variable.name] = crc32c_of(np.ascontiguousarray(variable.host_view()))
    return sums


def check_replicas(store: Any, comm: Any) -> None:
    """Checks that replicated variables hold the same bytes on every rank (crc32c), as a data-parallel job must.

    Collective: every rank must call it, after `check_structure` (same names).

    Raises:
      ReplicaDivergenceError: on EVERY rank, naming the diverged variables
        (sorted, the first ten and a count) and which ranks differ from rank 0.
    """
    communicator = as_communicator(comm)
    sums = _local_checksums(store)
    digests = communicator.allgather(_digest(sums))
    if len(set(digests)) == 1:
        return
    gathered: list[dict[str, Any]] = communicator.allgather(sums)  # type: ignore[assignment]
    diverged = []
    for name in sorted(set().union(*gathered)):
        values = [g.get(name, "missing") for g in gathered]
        if len(set(values)) > 1:
            ranks = [rank for rank, v in enumerate(values) if v != values[0]]
            diverged.append(f"'{name}' (ranks {ranks} differ from rank 0)")
    shown = ", ".join(diverged[:_MAX_NAMED]) + (f" and {len(diverged) - _MAX_NAMED} more" if len(diverged) > _MAX_NAMED else "")
    raise ReplicaDivergenceError(
        f"{len(diverged)} replicated variable(s) differ across the {communicator.size} ranks: {shown}; replicas "
        f"must be updated identically on every rank (broadcast from rank 0, or all-reduce the gradients), or "
        f"place the variable on one task")

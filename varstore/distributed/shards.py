"""Sharded arrays as a store for the collective engine: every rank's local shards, parts of ONE global array each.

A framework (varstore.torch for DTensors, varstore.jax for sharded
jax.Arrays) describes what this rank holds as LocalShards: the global
array's name and shape, where the shard starts in it, and a host view of
the shard's memory. `sharded_state` allgathers every rank's boxes through
the communicator and builds the SAME ShardedState on every rank: one
ShardPart per distinct box (replicas of a box are one part), written once
by one rank (the lowest-loaded holder; a box every rank holds is
"replicated" and left to plan_save's balancing) and read by every rank that
holds it. The parts' values are the caller's views, never copies, so
save_collective writes straight from shard memory and restore_collective
fills the shards in place. Imports no framework and does no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.distributed.agree import agree_all
from varstore.distributed.communicator import Communicator
from varstore.errors import DistributedMismatchError, InvalidNameError, NotOwnedError, ShapeMismatchError
from varstore.store.partitioning import SaveSliceInfo
from varstore.store.value_sources import ValueSource, check_restorable

__all__ = ["LocalShard", "ShardPart", "ShardedState", "describe_shards", "sharded_state"]

#: The job name of the placement a written-by-one-rank part carries ("/job:shard/task:K"), for check_structure.
_JOB = "shard"


@dataclasses.dataclass(frozen=True)
class LocalShard:
    """One box of a global array that this rank holds.

    Attributes:
      array: the global array's name in the checkpoint ("model/0.weight").
      global_shape: the whole array's shape.
      offset: where the shard starts in the array, per axis.
      value: a host NumPy view of the shard's memory (shape = the shard's
        shape, dtype = the array's logical dtype); writeable for a restore,
        which fills it in place.
    """

    array: str
    global_shape: tuple[int, ...]
    offset: tuple[int, ...]
    value: npt.NDArray[Any]


class ShardPart:
    """One distinct box of a global array, seen by the collective engine as a (part of a partitioned) variable.

    `owner_rank` writes it (None: every rank holds it, plan_save balances the
    writes); `holders` are every rank that holds a copy and reads it on
    restore. On a rank that does not hold it, it has a name, shape and dtype
    but no value (`is_owned` False), as another rank's variable.
    """

    trainable = True
    collections: tuple[str, ...] = ()
    device = "cpu:0"

    def __init__(self, name: str, array: str, global_shape: tuple[int, ...], offset: tuple[int, ...],
                 shape: tuple[int, ...], dtype: np.dtype, owner: int | None, holders: tuple[int, ...],
                 value: npt.NDArray[Any] | None) -> None:
        self.name = name
        self.array = array
        self.shape = shape
        self.dtype = dtype
        self.owner_rank = owner
        self.task = None if owner is None else f"/job:{_JOB}/task:{owner}"
        self.holders = holders
        whole = shape == global_shape and name == array
        self.save_slice_info = None if whole else SaveSliceInfo(array, global_shape, offset, shape)
        self._value = value

    @property
    def is_owned(self) -> bool:
        """Whether this rank holds the box (a view of its shard memory)."""
        return self._value is not None

    is_allocated = is_owned
    is_initialized = is_owned

    def host_view(self) -> npt.NDArray[Any]:
        """A read-only view of this rank's shard memory (no copy).

        Raises:
          NotOwnedError: this rank does not hold the box.
        """
        if self._value is None:
            raise NotOwnedError(f"shard '{self.name}' of '{self.array}' is held by ranks {list(self.holders)}, "
                                f"not by this one")
        view = self._value.view()
        view.setflags(write=False)
        return view

    def restore_buffer(self) -> npt.NDArray[Any]:
        """This rank's shard memory, writeable: a batched restore (distributed/restore.py) fills it in place.

        Raises:
          NotOwnedError: this rank does not hold the box.
        """
        if self._value is None:
            raise NotOwnedError(f"shard '{self.name}' of '{self.array}' is not held by this rank")
        return self._value

    def restore_from(self, source: ValueSource, lazy: bool = False) -> None:
        """Fills this rank's shard memory from `source` in place (the checkpoint layer's hook; `lazy` is ignored).

        Raises:
          ShapeMismatchError, DtypeMismatchError: as value_sources.check_restorable (nothing changes).
          NotOwnedError: this rank does not hold the box.
        """
        check_restorable(self, source)
        if self._value is None:
            raise NotOwnedError(f"shard '{self.name}' of '{self.array}' is not held by this rank")
        source.read_into(self._value)

    def __repr__(self) -> str:
        return (f"<ShardPart '{self.name}' of '{self.array}' shape={self.shape} dtype={dtypes.dtype_name(self.dtype)} "
                f"writer={self.owner_rank} holders={list(self.holders)}>")


class ShardedState:
    """Every rank's shards of a set of global arrays, the same structure on every rank (a store for save/restore_collective).

    Attributes:
      rank, size: this rank and the number of ranks that described their shards.
      arrays: global array name -> (shape, logical dtype name), sorted by name.
      structure_agreed: True: built from every rank's description, so the
        structure is the same on every rank by construction (the collective
        save and restore skip check_structure's exchange).
    """

    structure_agreed = True

    def __init__(self, rank: int, size: int, parts: list[ShardPart], arrays: dict[str, tuple[tuple[int, ...], str]]) -> None:
        self.rank = rank
        self.size = size
        self.arrays = arrays
        self._parts = parts
        self._array_of = {p.name: p.array for p in parts}

    def variables(self) -> list[ShardPart]:
        """Every part of every array (on every rank; only held ones have values)."""
        return list(self._parts)

    def array_names(self, part_names: Sequence[str]) -> list[str]:
        """The global arrays of `part_names` (RestoreResult's names), each once, in order."""
        return list(dict.fromkeys(self._array_of.get(n, n) for n in part_names))

    def __repr__(self) -> str:
        return f"<ShardedState rank={self.rank} size={self.size} arrays={len(self.arrays)} parts={len(self._parts)}>"


def describe_shards(shards: Sequence[LocalShard]) -> list[list[Any]]:
    """This rank's boxes as JSON: [array, global shape, dtype name, offset, shape] per shard (what sharded_state gathers).

    Raises:
      ShapeMismatchError: a shard lies outside its global shape.
    """
    described = []
    for shard in shards:
        shape = tuple(int(d) for d in shard.value.shape)
        offset = tuple(int(o) for o in shard.offset)
        full = tuple(int(d) for d in shard.global_shape)
        if len(offset) != len(full) or len(shape) != len(full) or any(
                o < 0 or o + n > f for o, n, f in zip(offset, shape, full)):
            raise ShapeMismatchError(
                f"the shard of '{shard.array}' at offset {list(offset)} with shape {list(shape)} does not lie "
                f"inside its global shape {list(full)}")
        described.append([shard.array, list(full), dtypes.dtype_name(shard.value.dtype), list(offset), list(shape)])
    return described


def sharded_state(shards: Sequence[LocalShard], comm: Communicator, *,
                  described: Sequence[Any] | None = None) -> ShardedState:
    """Builds the ShardedState of a job: collective, every rank of `comm` calls it with the shards it holds.

    Args:
      shards: this rank's LocalShards (any number, any arrays; a box held by
        several ranks, a replica, is passed by each of them).
      comm: the job's communicator.
      described: every rank's describe_shards (index = rank) when the caller
        already gathered them (with its own step, agree.agree_all); then no
        collective runs here.

    Returns:
      The same structure on every rank; this rank's parts view its own shard memory.

    Raises:
      DistributedMismatchError: ranks disagree about an array's global shape or dtype (on every rank).
      ShapeMismatchError: a shard lies outside its global shape (on every rank, naming the rank).
      InvalidNameError: a part name "A/part_K" would equal another array's name.
    """
    if described is None:
        described = agree_all(comm, lambda: describe_shards(shards))
    gathered = cast("list[list[list[Any]]]", list(described))
    arrays: dict[str, tuple[tuple[int, ...], str]] = {}
    seen: dict[str, dict[str, list[int]]] = {}
    boxes: dict[str, dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]]] = {}
    for rank, described in enumerate(gathered):
        for array, full, dtype, offset, shape in described:
            key = f"{tuple(full)} {dtype}"
            seen.setdefault(array, {}).setdefault(key, []).append(rank)
            arrays.setdefault(array, (tuple(full), dtype))
            holders = boxes.setdefault(array, {}).setdefault((tuple(offset), tuple(shape)), [])
            if rank not in holders:
                holders.append(rank)
    for array in sorted(seen):
        if len(seen[array]) > 1:
            groups = "; ".join(f"ranks {ranks}: shape and dtype {key}" for key, ranks in seen[array].items())
            raise DistributedMismatchError(
                f"the {comm.size} ranks disagree about the global array '{array}' ({groups}); every rank must "
                f"build the same model")
    views = {(s.array, tuple(int(o) for o in s.offset), tuple(int(d) for d in s.value.shape)): s.value for s in shards}
    parts = _parts(arrays, boxes, views, comm.rank, comm.size)
    return ShardedState(comm.rank, comm.size, parts, dict(sorted(arrays.items())))


def _parts(arrays: dict[str, tuple[tuple[int, ...], str]],
           boxes: dict[str, dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]]],
           views: dict[tuple[str, tuple[int, ...], tuple[int, ...]], npt.NDArray[Any]], rank: int,
           size: int) -> list[ShardPart]:
    everyone = list(range(size))
    chosen: list[tuple[str, tuple[int, ...], tuple[int, ...], list[int]]] = []
    for array in sorted(boxes):
        full, _ = arrays[array]
        found = sorted(boxes[array].items())
        non_empty = [(box, holders) for box, holders in found if math.prod(box[1])]
        if not non_empty:  # an empty array: one whole part, held by whoever has it
            holders = sorted({r for _, hs in found for r in hs})
            non_empty = [(((0,) * len(full), full), holders)]
        for (offset, shape), holders in non_empty:
            chosen.append((array, offset, shape, sorted(holders)))
    loads = [0] * size
    owners: dict[int, int | None] = {}
    order = sorted(range(len(chosen)), key=lambda i: (-math.prod(chosen[i][2]), i))
    for index in order:  # boxes of some ranks only: the least-loaded holder writes (ties: lowest rank)
        array, _, shape, holders = chosen[index]
        if holders == everyone:
            owners[index] = None
            continue
        nbytes = math.prod(shape) * dtypes.as_dtype(arrays[array][1]).itemsize
        owner = min(holders, key=lambda r: (loads[r], r))
        loads[owner] += nbytes
        owners[index] = owner
    parts = []
    counts: dict[str, int] = {}
    for array, *_ in chosen:
        counts[array] = counts.get(array, 0) + 1
    numbered: dict[str, int] = {}
    for index, (array, offset, shape, holders) in enumerate(chosen):
        full, dtype = arrays[array]
        if counts[array] == 1 and shape == full:
            name = array
        else:
            name = f"{array}/part_{numbered.setdefault(array, 0)}"
            numbered[array] += 1
            if name in arrays:
                raise InvalidNameError(f"the shards of '{array}' would be named '{name}', which is another array's "
                                       f"name; rename one of them")
        value = views.get((array, offset, shape))
        if value is None and not math.prod(full) and rank in holders:  # an empty array: nothing to view
            value = np.empty(full, dtype=dtypes.as_dtype(dtype))
        parts.append(ShardPart(name, array, full, offset, shape, dtypes.as_dtype(dtype), owners[index],
                               tuple(holders), value))
    return parts

"""Collective save and restore plans: which rank writes / reads which region of which global array.

Pure functions of the job's layout (every rank computes the same plan from
the same inputs, so no plan is ever sent). Rules:
- A partitioned variable is ONE global array under its full name, as TF's
  save_slice_info: each part is the region [offset, offset + shape) of it.
- Every element of every array is written exactly once: an owned variable
  (or part) by its owner; a replicated one by one rank, small ones whole to
  the least-loaded rank, large ones (>= split_bytes, rows >= ranks) split in
  equal row blocks over all ranks.
- Zarr chunks: along the split axis, the gcd of all write boundaries (each
  chunk then has exactly one writer); other axes whole.
- Restore: each rank reads exactly the regions of the variables it holds
  (its owned ones and the replicated ones), from whatever partitioning the
  checkpoint was written with, or none.
No I/O, no communication, no store access beyond `layouts_of`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from varstore import dtypes
from varstore.checkpoint.read.regions import byte_runs
from varstore.errors import DtypeMismatchError, PartitionError, ShapeMismatchError

__all__ = ["VariableLayout", "layouts_of", "ArraySpec", "WriteItem", "SavePlan", "plan_save",
           "ReadItem", "RestorePlan", "plan_restore", "byte_runs"]

#: Replicated variables of at least this many bytes are split over all ranks by rows.
DEFAULT_SPLIT_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class VariableLayout:
    """One variable as the plans see it.

    Attributes:
      name: the variable's name ("model/embedding/part_1").
      shape: its shape.
      dtype: dtype name as varstore.dtypes.dtype_name ("float32", "bfloat16").
      owner: the rank that holds it, None when every rank does (replicated).
      array: the global array it belongs to (the full name for a part, else `name`).
      array_shape: the global array's shape.
      offset: where the variable starts in the array (zeros when unpartitioned).
      holders: the ranks that hold a copy besides `owner` (a shard replicated
        over some ranks, distributed/shards.py): each reads it on restore,
        only `owner` writes it. Empty for store variables.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    owner: int | None
    array: str
    array_shape: tuple[int, ...]
    offset: tuple[int, ...]
    holders: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtypes.as_dtype(self.dtype).itemsize


def layouts_of(store: Any) -> list[VariableLayout]:
    """The layout of every variable of `store` (the same on every rank once check_structure passed)."""
    out = []
    for v in store.variables():
        info = v.save_slice_info
        dtype = dtypes.dtype_name(v.dtype)
        holders = tuple(getattr(v, "holders", ()))
        if info is None:
            out.append(VariableLayout(v.name, v.shape, dtype, v.owner_rank, v.name, v.shape, (0,) * len(v.shape),
                                      holders))
        else:
            out.append(VariableLayout(v.name, v.shape, dtype, v.owner_rank, info.full_name, info.full_shape,
                                      info.var_offset, holders))
    return out


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """A global array of the checkpoint: name, shape, dtype string, Zarr chunk shape (one writer per chunk)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class WriteItem:
    """Rank `rank` writes `variable[variable_offset : variable_offset + shape]` to `array[offset : offset + shape]`."""

    rank: int
    array: str
    offset: tuple[int, ...]
    shape: tuple[int, ...]
    variable: str
    variable_offset: tuple[int, ...]

    @property
    def array_index(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.offset, self.shape))

    @property
    def variable_index(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.variable_offset, self.shape))


@dataclasses.dataclass(frozen=True)
class SavePlan:
    """What every rank writes: the arrays to create and the writes, in a deterministic order."""

    world_size: int
    arrays: dict[str, ArraySpec]
    writes: tuple[WriteItem, ...]

    def for_rank(self, rank: int) -> list[WriteItem]:
        """The writes of `rank`, in plan order."""
        return [w for w in self.writes if w.rank == rank]

    def bytes_per_rank(self) -> list[int]:
        """Bytes each rank writes."""
        totals = [0] * self.world_size
        for w in self.writes:
            totals[w.rank] += math.prod(w.shape) * dtypes.as_dtype(self.arrays[w.array].dtype).itemsize
        return totals


def _check_tiling(array: str, shape: tuple[int, ...], parts: list[VariableLayout]) -> None:
    covered = sum(math.prod(p.shape) for p in parts)
    if covered != math.prod(shape):
        names = ", ".join(p.name for p in parts)
        raise PartitionError(f"the parts of partitioned variable '{array}' ({names}) cover {covered} of its "
                             f"{math.prod(shape)} elements (shape {shape}); every part must exist on every rank")
    outside = [p for p in parts if any(o < 0 or o + n > f for o, n, f in zip(p.offset, p.shape, shape))]
    if outside:
        raise PartitionError(f"part '{outside[0].name}' of partitioned variable '{array}' at {outside[0].offset} "
                             f"with shape {outside[0].shape} lies outside its shape {shape}")
    if len(parts) <= 64:  # inside, as many elements as the array and no two parts overlap: they tile it
        boxes = [(p.offset, p.shape) for p in parts if math.prod(p.shape)]
        for index, (offset, size) in enumerate(boxes):
            for other, other_size in boxes[index + 1:]:
                if all(max(a, b) < min(a + n, b + m) for a, n, b, m in zip(offset, size, other, other_size)):
                    raise PartitionError(f"the parts of partitioned variable '{array}' overlap (shape {shape}): "
                                         + ", ".join(f"{p.name} at {p.offset}" for p in parts))
        return
    marks = np.zeros(shape, dtype=np.int8) if math.prod(shape) <= (1 << 24) else None
    if marks is not None:
        for p in parts:
            marks[tuple(slice(o, o + n) for o, n in zip(p.offset, p.shape))] += 1
        if not (marks == 1).all():
            raise PartitionError(f"the parts of partitioned variable '{array}' overlap (shape {shape}): "
                                 + ", ".join(f"{p.name} at {p.offset}" for p in parts))


def plan_save(layouts: Sequence[VariableLayout], world_size: int, *,
              split_bytes: int = DEFAULT_SPLIT_BYTES) -> SavePlan:
    """Plans a collective save of the job's variables by `world_size` ranks.

    Args:
      layouts: every variable of the job (`layouts_of(store)` on any rank).
      world_size: number of ranks (>= 1).
      split_bytes: replicated variables of at least this many bytes (and at
        least `world_size` rows) are split in row blocks over all ranks.

    Returns:
      The SavePlan: one ArraySpec per global array, every element in exactly one write.

    Raises:
      PartitionError: the parts of a partitioned variable do not tile it.
      ShapeMismatchError / DtypeMismatchError: parts of one array disagree about its shape / dtype.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    groups: dict[str, list[VariableLayout]] = {}
    for layout in layouts:
        groups.setdefault(layout.array, []).append(layout)
    writes: list[WriteItem] = []
    loads = [0] * world_size
    replicated: list[VariableLayout] = []
    arrays: dict[str, ArraySpec] = {}
    for name in sorted(groups):
        parts = groups[name]
        shapes = {p.array_shape for p in parts}
        dtypes_ = {p.dtype for p in parts}
        if len(shapes) > 1:
            raise ShapeMismatchError(f"the parts of '{name}' disagree about its shape: {sorted(shapes)}")
        if len(dtypes_) > 1:
            raise DtypeMismatchError(f"the parts of '{name}' disagree about its dtype: {sorted(dtypes_)}")
        if len(parts) > 1 or parts[0].shape != parts[0].array_shape:
            _check_tiling(name, parts[0].array_shape, parts)
        for part in sorted(parts, key=lambda p: p.offset):
            if part.owner is None:
                replicated.append(part)
                continue
            if part.owner >= world_size:
                raise PartitionError(f"variable '{part.name}' is owned by rank {part.owner}, but only "
                                     f"{world_size} rank(s) save")
            writes.append(WriteItem(part.owner, name, part.offset, part.shape, part.name, (0,) * len(part.shape)))
            loads[part.owner] += part.nbytes
    # replicated: largest first; big ones split by rows over every rank, the rest whole to the least loaded
    for part in sorted(replicated, key=lambda p: (-p.nbytes, p.name)):
        rows = part.shape[0] if part.shape else 0
        if part.nbytes >= split_bytes and rows >= world_size and world_size > 1:
            block = -(-rows // world_size)
            for rank in range(world_size):
                start = rank * block
                count = min(block, rows - start)
                if count <= 0:
                    continue
                offset = (part.offset[0] + start,) + part.offset[1:]
                shape = (count,) + part.shape[1:]
                writes.append(WriteItem(rank, part.array, offset, shape, part.name, (start,) + (0,) * (len(shape) - 1)))
                loads[rank] += math.prod(shape) * dtypes.as_dtype(part.dtype).itemsize
        else:
            rank = min(range(world_size), key=lambda r: (loads[r], r))
            writes.append(WriteItem(rank, part.array, part.offset, part.shape, part.name, (0,) * len(part.shape)))
            loads[rank] += part.nbytes
    by_array: dict[str, list[WriteItem]] = {}
    for w in writes:
        by_array.setdefault(w.array, []).append(w)
    for name in sorted(groups):
        first = groups[name][0]
        arrays[name] = ArraySpec(name, first.array_shape, first.dtype, _chunks(first.array_shape, by_array[name]))
    ordered = tuple(sorted(writes, key=lambda w: (w.array, w.offset)))
    return SavePlan(world_size, arrays, ordered)


def _chunks(shape: tuple[int, ...], writes: list[WriteItem]) -> tuple[int, ...]:
    """A chunk shape giving every chunk one writer: gcd of the write boundaries along each axis."""
    chunks = []
    for axis, size in enumerate(shape):
        step = size
        for w in writes:
            step = math.gcd(step, w.offset[axis], w.offset[axis] + w.shape[axis])
        chunks.append(max(1, step))
    return tuple(chunks)


@dataclasses.dataclass(frozen=True)
class ReadItem:
    """Read `array[offset : offset + shape]` into the whole of variable `variable`."""

    variable: str
    array: str
    offset: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def array_index(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.offset, self.shape))


@dataclasses.dataclass(frozen=True)
class RestorePlan:
    """What one rank reads, and the names a strict restore reports.

    Attributes:
      reads: one ReadItem per variable this rank holds and the checkpoint has.
      missing: variables of the job (any rank) whose array is not in the checkpoint.
      unexpected: arrays of the checkpoint no variable of the job maps to.
    """

    rank: int
    reads: tuple[ReadItem, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def plan_restore(saved: Mapping[str, tuple[Sequence[int], str]], layouts: Sequence[VariableLayout],
                 rank: int) -> RestorePlan:
    """Plans what `rank` reads to restore the job's variables from a checkpoint saved by any number of ranks.

    Args:
      saved: the checkpoint's global arrays: name -> (shape, dtype name).
      layouts: every variable of the restoring job (`layouts_of(store)`).
      rank: the restoring rank.

    Returns:
      The RestorePlan: reads of exactly the regions `rank` holds (owned, replicated, and those it is a holder of).

    Raises:
      ShapeMismatchError: a variable's global shape differs from the stored array's (names both).
      DtypeMismatchError: the stored dtype does not cast ("same_kind") to the variable's.
    """
    reads = []
    missing = []
    used = set()
    for layout in layouts:
        if layout.array not in saved:
            missing.append(layout.name)
            continue
        used.add(layout.array)
        shape, dtype = saved[layout.array]
        if tuple(int(d) for d in shape) != layout.array_shape:
            whose = f"variable '{layout.name}'" if layout.array == layout.name else \
                f"partitioned variable '{layout.array}' (part '{layout.name}')"
            raise ShapeMismatchError(f"cannot restore {whose}: the checkpoint's array '{layout.array}' has shape "
                                     f"{tuple(shape)}, the variable was created with {layout.array_shape}")
        stored, wanted = dtypes.as_dtype(dtype), dtypes.as_dtype(layout.dtype)
        if stored != wanted and not np.can_cast(stored, wanted, "same_kind"):
            raise DtypeMismatchError(f"cannot restore variable '{layout.name}': the checkpoint's array "
                                     f"'{layout.array}' has dtype {dtypes.dtype_name(stored)}, the variable has "
                                     f"{dtypes.dtype_name(wanted)}")
        if layout.owner is None or layout.owner == rank or rank in layout.holders:
            reads.append(ReadItem(layout.name, layout.array, layout.offset, layout.shape))
    unexpected = tuple(sorted(set(saved) - used))
    return RestorePlan(rank, tuple(reads), tuple(missing), unexpected)

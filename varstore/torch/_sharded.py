"""Sharded PyTorch state (DTensors, FSDP2) saved and restored by every rank: local shards as parts of ONE global array.

A DTensor (any DeviceMesh, Shard(d) / Replicate() placements; FSDP2's
fully_shard parameters and optimizer state are DTensors) is one global
array; each rank's local tensor is the box `compute_local_shape_and_global_offset`
gives. distributed/shards.py turns every rank's boxes into one structure and
the collective engine (save_collective / restore_collective) writes each box
once from the tensor's own memory and fills each rank's local tensor in place,
reading only its byte ranges, whatever world size, mesh or placements wrote
the checkpoint. Plain tensors in the state are held whole by every rank.
Partial and _StridedShard placements are refused (no single box per rank).
Imports torch; the checkpoint format and the plans are not this module's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from varstore import _framework_tree as _tree
from varstore.torch import _convert
from varstore.checkpoint.read.restore_result import RestoreResult
from varstore.checkpoint.read.name_hints import missing_with_hints
from varstore.checkpoint.read.reader import open_varstore
from varstore.distributed.agree import agree, agree_all
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.distributed.restore import restore_collective
from varstore.distributed.save import save_collective
from varstore.distributed.shards import LocalShard, ShardedState, describe_shards, sharded_state
from varstore.errors import PartitionError, RestoreError

DTensor: Any
compute_local_shape_and_global_offset: Any
try:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
except ImportError:  # pragma: no cover - a torch build without torch.distributed
    DTensor = None
    compute_local_shape_and_global_offset = None

__all__ = ["has_dtensors", "communicator_for", "local_shards", "save_sharded", "restore_sharded"]


def has_dtensors(arrays: Mapping[str, Any]) -> bool:
    """Whether any leaf is a DTensor (an FSDP2 parameter or optimizer state, a distribute_tensor result)."""
    return DTensor is not None and any(isinstance(v, DTensor) for v in arrays.values())


def communicator_for(comm: Any) -> Communicator:
    """`comm` as a Communicator; None is torch.distributed's default group (which must be initialized)."""
    if comm is None:
        from varstore.torch._communicator import TorchCommunicator

        return TorchCommunicator(None)
    return as_communicator(comm)


def _box(name: str, value: Any) -> tuple[tuple[int, ...], tuple[int, ...], torch.Tensor] | None:
    """(global shape, offset, local tensor) of a leaf on this rank; None when this rank is outside its mesh."""
    if DTensor is None or not isinstance(value, DTensor):
        return tuple(int(d) for d in value.shape), (0,) * value.dim(), value
    for placement in value.placements:
        kind = type(placement).__name__
        if placement.is_partial() or kind == "_StridedShard":
            raise PartitionError(
                f"cannot checkpoint DTensor '{name}': its placement {placement} does not give each rank one box "
                f"of the global tensor; redistribute it to Shard(d) / Replicate() placements first "
                f"(dtensor.redistribute(mesh, [Shard(0)]))")
    if value.device_mesh.get_coordinate() is None:
        return None
    local_shape, offset = compute_local_shape_and_global_offset(value.shape, value.device_mesh, value.placements)
    local = value.to_local()
    if tuple(local.shape) != tuple(local_shape):
        raise PartitionError(f"DTensor '{name}': the local tensor has shape {tuple(local.shape)}, its placements "
                             f"{value.placements} give {tuple(local_shape)}")
    return tuple(int(d) for d in value.shape), tuple(int(o) for o in offset), local


def local_shards(arrays: Mapping[str, Any], sources: Mapping[str, str] | None = None, *, writeable: bool = False,
                 ) -> tuple[list[LocalShard], list[tuple[torch.Tensor, np.ndarray]]]:
    """This rank's LocalShards of `arrays` (name -> tensor, DTensor or ndarray) and host staging of device tensors.

    Args:
      arrays: the leaves to save or restore.
      sources: checkpoint array per name (restore: aliases resolved); default the name itself.
      writeable: a restore: CPU shards are views of the tensors' memory, other
        devices get a host staging array (returned with its tensor, to copy back).

    Returns:
      (shards, staged): `staged` lists (device tensor, host array) pairs to copy after a restore.
    """
    shards: list[LocalShard] = []
    staged: list[tuple[torch.Tensor, np.ndarray]] = []
    for name, value in arrays.items():
        array = sources[name] if sources is not None else name
        if isinstance(value, np.ndarray):
            shards.append(LocalShard(array, tuple(value.shape), (0,) * value.ndim, value))
            continue
        box = _box(name, value)
        if box is None:
            continue
        full, offset, local = box
        if writeable and local.device.type != "cpu":
            _, host = _convert.empty_host(tuple(local.shape), _convert.dtype_name_of(local, name), name, "")
            staged.append((local, host))
            view = host
        else:
            view = _convert.host_view(local, name)
        shards.append(LocalShard(array, full, offset, view))
    return shards, staged


def _aliases(arrays: Mapping[str, Any]) -> dict[str, str]:
    """{alias name: first name} for leaves that are the same memory (rank 0's are every rank's: save_sharded)."""
    aliases: dict[str, str] = {}
    first: dict[Any, str] = {}
    for name, value in arrays.items():
        box = _box(name, value) if isinstance(value, torch.Tensor) else None
        key = None if box is None else (_convert.alias_key(box[2]), box[0], box[1])
        if key is not None and key[0] is not None and key in first:
            aliases[name] = first[key]
        elif key is not None:
            first[key] = name
    return aliases


def save_sharded(path: os.PathLike[str] | str, flat: _tree.Flat, metadata: dict[str, Any], comm: Any, *,
                 step: int | None, format: str | None, overwrite: bool) -> Path:
    """Saves a flattened state collectively (every rank calls it): each box once, each leaf ONE global array.

    Two exchanges before the engine's: the structure check with rank 0's
    aliases, then every rank's boxes (agree_all: each a single collective).

    Raises:
      DistributedMismatchError: the ranks' states differ (names, structure, global shapes or dtypes).
      PartitionError: a DTensor with a Partial or _StridedShard placement; boxes that do not tile their array.
      As varstore.save(..., comm=): the same error on every rank; nothing committed then.
    """
    communicator = communicator_for(comm)
    arrays = dict(flat.arrays)
    first = communicator.rank == 0
    aliases = cast("dict[str, str]", agree_all(
        communicator, lambda: _aliases(arrays) if first else None,
        same=("the state's names and structure", [list(arrays), flat.skeleton]))[0])
    for name in aliases:
        arrays.pop(name)
    if not flat.is_plain:
        metadata[_tree.TREE_KEY] = flat.skeleton
    if aliases:
        metadata[_tree.ALIASES_KEY] = aliases
    shards: list[LocalShard] = []

    def describe() -> list[list[Any]]:
        shards.extend(local_shards(arrays)[0])
        return describe_shards(shards)

    state = sharded_state(shards, communicator, described=agree_all(communicator, describe))
    return save_collective(path, state, communicator, step=step, metadata=metadata, format=format,
                           overwrite=overwrite)


def _sources(path: os.PathLike[str] | str, format: str | None, names: list[str], strict: bool
             ) -> tuple[dict[str, str], list[str], list[str]]:
    reader = open_varstore(path, format)
    try:
        found = {name: _tree.source_of(reader, name) for name in names}
        missing = [name for name, source in found.items() if source is None]
        used = {s for s in found.values() if s is not None}
        unexpected = [name for name in reader.keys() if name not in used]
        if strict and (missing or unexpected):
            raise RestoreError(
                f"restoring '{reader.path}' strictly failed: tensors the checkpoint has no value for: "
                f"{missing_with_hints(missing, unexpected or reader.keys())}; checkpoint values no tensor takes: "
                f"{unexpected}; pass strict=False to restore the intersection", missing=missing, unexpected=unexpected)
    finally:
        reader.close()
    return {name: source for name, source in found.items() if source is not None}, missing, unexpected


def restore_sharded(path: os.PathLike[str] | str, tensors: Mapping[str, Any], comm: Any, *, strict: bool,
                    verify: bool, format: str | None) -> RestoreResult:
    """Restores every rank's local shards in place (every rank calls it), from a checkpoint any layout wrote.

    Raises:
      RestoreError: strict and names differ. ShapeMismatchError / DtypeMismatchError: naming the array.
      As varstore.restore(..., comm=): the same error on every rank, raised before any shard changes.
    """
    communicator = communicator_for(comm)
    names = list(tensors)
    prepared: dict[str, Any] = {}

    def prepare() -> list[list[Any]]:  # names, sources and boxes in one exchange
        sources, missing, unexpected = _sources(path, format, names, strict)
        chosen: dict[str, Any] = {}
        copies: list[tuple[str, str]] = []  # a second target of one saved array: copied from the first after reading
        first_of: dict[str, str] = {}
        for name, source in sources.items():
            if source in first_of:
                copies.append((name, first_of[source]))
            else:
                first_of[source] = name
                chosen[name] = tensors[name]
        shards, staged = local_shards(chosen, sources, writeable=True)
        prepared.update(sources=sources, missing=missing, unexpected=unexpected, copies=copies, shards=shards,
                        staged=staged)
        return describe_shards(shards)

    described = agree_all(communicator, prepare, same=("the state's names", names))
    state = sharded_state(prepared["shards"], communicator, described=described)
    sources, staged, copies = prepared["sources"], prepared["staged"], prepared["copies"]
    restore_collective(path, state, communicator, strict=False, verify=verify, format=format)
    with torch.no_grad():
        for tensor, host in staged:
            tensor.copy_(_convert.from_host(host))
        for name, original in copies:
            _copy_local(tensors[name], tensors[original])
    return RestoreResult(list(sources), prepared["missing"], prepared["unexpected"])


def _copy_local(target: Any, source: Any) -> None:
    if DTensor is not None and isinstance(target, DTensor):
        target, source = target.to_local(), source.to_local()
    if target.data_ptr() != source.data_ptr():
        target.copy_(source)


def state_for_manager(arrays: Mapping[str, Any], comm: Any) -> ShardedState:
    """The ShardedState of a flattened state, for vs.CheckpointManager(comm=...).save / restore_latest."""
    communicator = communicator_for(comm)
    shards: list[LocalShard] = []

    def describe() -> list[list[Any]]:
        shards.extend(local_shards(arrays, writeable=True)[0])
        return describe_shards(shards)

    return sharded_state(shards, communicator, described=agree_all(communicator, describe))

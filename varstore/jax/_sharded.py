"""Sharded jax.Arrays saved and restored shard by shard: each addressable shard a part of ONE global array.

Save: every array leaf's addressable shards with replica_id 0 (each distinct
box of the global array once across all processes) are LocalShards viewed
from host memory; distributed/shards.py and save_collective write each once
into one global array. Restore into a template (`like=`): the target
sharding's addressable boxes (`addressable_devices_indices_map`), each read
once into host memory from whatever sharding wrote the checkpoint (only the
byte ranges of that box), then placed on its devices with
jax.make_array_from_callback. One process (SingleProcess) or one per host
(`comm=`, e.g. JaxCommunicator under jax.distributed). Imports jax; the
checkpoint format and plans are not this module's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from varstore import _framework_tree as _tree
from varstore import dtypes as _dtypes
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.distributed.restore import restore_collective
from varstore.distributed.save import save_collective
from varstore.distributed.shards import LocalShard, sharded_state

__all__ = ["is_sharded", "save_sharded", "restore_sharded"]

Box = tuple[tuple[int, ...], tuple[int, ...]]


def is_sharded(value: Any) -> bool:
    """Whether `value` is a jax.Array (or ShapeDtypeStruct) whose sharding spans more than one device or process."""
    sharding = getattr(value, "sharding", None)
    if not isinstance(value, (jax.Array, jax.ShapeDtypeStruct)) or sharding is None:
        return False
    return len(sharding.device_set) > 1 or not sharding.is_fully_addressable


def _box(index: tuple[Any, ...], shape: tuple[int, ...]) -> Box:
    offset = tuple(int(s.start or 0) for s in index)
    size = tuple(int((s.stop if s.stop is not None else n) - (s.start or 0)) for s, n in zip(index, shape))
    return offset, size


def _save_shards(arrays: Mapping[str, Any]) -> list[LocalShard]:
    shards = []
    for name, value in arrays.items():
        shape = tuple(int(d) for d in np.shape(value))
        if not isinstance(value, jax.Array):
            array = np.asarray(value)
            shards.append(LocalShard(name, shape, (0,) * len(shape), array))
            continue
        for shard in value.addressable_shards:
            if shard.replica_id != 0:
                continue  # another device holds the same box: written once, from replica 0
            offset, _ = _box(shard.index, shape)
            data = np.asarray(shard.data)
            shards.append(LocalShard(name, shape, offset, data.view(_dtypes.as_dtype(value.dtype))))
    return shards


def save_sharded(path: os.PathLike[str] | str, flat: _tree.Flat, metadata: dict[str, Any], comm: Any, *,
                 step: int | None, format: str | None, overwrite: bool) -> Path:
    """Saves a flattened pytree collectively: each box of each array once, each leaf ONE global array.

    Raises:
      As varstore.save(..., comm=): the same error on every process; nothing committed then.
    """
    communicator: Communicator = as_communicator(comm)
    if not flat.is_plain:
        metadata[_tree.TREE_KEY] = flat.skeleton
    state = sharded_state(_save_shards(flat.arrays), communicator)
    return save_collective(path, state, communicator, step=step, metadata=metadata, format=format,
                           overwrite=overwrite)


def restore_sharded(path: os.PathLike[str] | str, templates: Mapping[str, Any], sources: Mapping[str, str],
                    comm: Any, *, verify: bool, format: str | None) -> dict[str, Any]:
    """New arrays for `templates` (name -> jax.Array / ShapeDtypeStruct / ndarray), each addressable box read once.

    Args:
      sources: checkpoint array per template name (aliases resolved; names
        without a source are not read).

    Returns:
      name -> a jax.Array with the template's sharding (a NumPy array for NumPy templates and ones without one).

    Raises:
      ShapeMismatchError / DtypeMismatchError: naming the array and the file (before anything is read).
      As varstore.restore(..., comm=): the same error on every process.
    """
    communicator: Communicator = as_communicator(comm)
    buffers: dict[str, dict[Box, np.ndarray]] = {}
    shards: list[LocalShard] = []
    for name, template in templates.items():
        if name not in sources:
            continue
        shape = tuple(int(d) for d in np.shape(template))
        dtype = _dtypes.as_dtype(template.dtype)
        boxes: dict[Box, np.ndarray] = {}
        if is_sharded(template):
            for index in template.sharding.addressable_devices_indices_map(shape).values():
                box = _box(index, shape)
                if box not in boxes:
                    boxes[box] = np.empty(box[1], dtype=dtype)
        else:
            boxes[((0,) * len(shape), shape)] = np.empty(shape, dtype=dtype)
        buffers[name] = boxes
        shards += [LocalShard(sources[name], shape, offset, buffer) for (offset, _), buffer in boxes.items()]
    restore_collective(path, sharded_state(_unique(shards), communicator), communicator, strict=False,
                       verify=verify, format=format)
    _copy_repeats(shards)
    out: dict[str, Any] = {}
    for name, boxes in buffers.items():
        template = templates[name]
        shape = tuple(int(d) for d in np.shape(template))
        if is_sharded(template):
            out[name] = jax.make_array_from_callback(shape, template.sharding, _reader_of(boxes, shape))
        else:
            value = boxes[((0,) * len(shape), shape)]
            sharding = getattr(template, "sharding", None)
            out[name] = value if isinstance(template, np.ndarray) or sharding is None else jax.device_put(value, sharding)
    return out


def _reader_of(boxes: dict[Box, np.ndarray], shape: tuple[int, ...]) -> Any:
    """make_array_from_callback's callback: the host buffer read for a device's index."""
    return lambda index: boxes[_box(index, shape)]


def _unique(shards: list[LocalShard]) -> list[LocalShard]:
    """One shard per (array, box): two templates naming one stored array read it once (see _copy_repeats)."""
    seen: dict[tuple[str, tuple[int, ...], tuple[int, ...]], LocalShard] = {}
    for shard in shards:
        seen.setdefault((shard.array, shard.offset, shard.value.shape), shard)
    return list(seen.values())


def _copy_repeats(shards: list[LocalShard]) -> None:
    first: dict[tuple[str, tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
    for shard in shards:
        key = (shard.array, shard.offset, shard.value.shape)
        if key in first and first[key] is not shard.value:
            np.copyto(shard.value, first[key], casting="unsafe")
        first.setdefault(key, shard.value)

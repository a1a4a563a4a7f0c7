"""varstore.torch: save PyTorch state dicts (nested ones too) and restore them into their own tensors.

    import varstore.torch as vst
    vst.save("ckpt/model.h5", model.state_dict(), step=100)
    vst.restore("ckpt/model.h5", model)                 # in place, same data_ptr()
    sd = vst.load("ckpt/model.h5", device="cuda:0")     # dict of tensors
    vst.save("ckpt/all.h5", {"model": model.state_dict(), "optimizer": opt.state_dict()})
    opt.load_state_dict(vst.load("ckpt/all.h5")["optimizer"])
    vst.save("ckpt/fsdp.h5", {"model": model.state_dict(), "optimizer": opt.state_dict()})  # every rank: DTensors
    vst.restore("ckpt/fsdp.h5", {"model": model.state_dict(), ...})   # any world size, mesh, placements

Names: a flat state dict keeps torch's own keys ("encoder.layer.0.weight");
each level of nesting becomes a scope ("model/encoder.layer.0.weight",
"optimizer/state/0/exp_avg"; int keys and list/tuple indices become "0",
"1"). Non-tensor leaves (param_groups, epoch, Python scalars) and the
containers' shape go into the checkpoint metadata (docs/checkpoint-format.md
section 12), so `load` gives back the same structure. Tensors that are the
same memory (tied weights) are stored once and recorded as aliases.

Sharded state (DTensors: FSDP2, tensor parallel) is saved and restored by
every rank of a torch.distributed job (varstore/torch/_sharded.py): each
leaf ONE global array, each rank writing and reading only its shards.
Importing this module lets `comm=` take torch.distributed process groups
everywhere (varstore/torch/_communicator.py).

The only module (with its helpers varstore/torch/_*.py) that imports
torch; `import varstore` never imports this module. The checkpoint format,
atomic writes and checksums are varstore.checkpoint's; this module only maps
tensors to NumPy views and back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    from varstore.errors import MissingDependencyError

    raise MissingDependencyError(
        "varstore.torch needs PyTorch: pip install 'varstore[torch]' (torch==2.13.0)") from err

from varstore import _framework_tree as _tree
from varstore.torch import _convert
from varstore.torch import _sharded
from varstore import dtypes as _dtypes
from varstore.torch._communicator import TorchCommunicator, is_process_group
from varstore.checkpoint import VarstoreReader
from varstore.checkpoint.read.restore_result import RestoreResult
from varstore.checkpoint.read.restoration import restore as _restore
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.name_hints import missing_with_hints
from varstore.distributed.communicator import register_communicator
from varstore.distributed.shards import ShardedState
from varstore.errors import DtypeMismatchError, RestoreError, ShapeMismatchError
from varstore.store.values import check_fits

__all__ = ["save", "restore", "load", "sharded_state", "TorchCommunicator", "RestoreResult"]

register_communicator(is_process_group, TorchCommunicator)

PathLike = Union[str, "os.PathLike[str]"]
#: A state: a (nested) mapping, list or tuple of tensors, NumPy arrays and JSON scalars.
State = Union[Mapping[str, Any], list[Any], tuple[Any, ...]]


def _classify(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        return ("array",)
    if isinstance(value, Mapping):
        return ("node", "dict", list(value.items()))
    if isinstance(value, list):
        return ("node", "list", list(enumerate(value)))
    if isinstance(value, tuple):
        return ("node", "tuple", list(enumerate(value)))
    return ("value",)


def _state_of(state: Any) -> Any:
    return state.state_dict() if isinstance(state, torch.nn.Module) else state


def _entry(name: str, value: Any) -> SaveEntry:
    if isinstance(value, torch.Tensor):
        logical = _convert.dtype_name_of(value, name)
        tensor = value
        return SaveEntry(name, tuple(int(d) for d in value.shape), _dtypes.as_dtype(logical),
                         lambda: _convert.host_view(tensor, name))
    array = np.asarray(value)
    return SaveEntry(name, tuple(array.shape), array.dtype, lambda: array)


def save(path: PathLike, state: Any, *, step: int | None = None,
         metadata: Mapping[str, Any] | None = None, format: str | None = None, checksum: bool = True,
         pack_threshold_bytes: int | None = None,
         overwrite: bool = False, layout: str | None = None, durable: bool = True,
         storage_options: Mapping[str, object] | None = None, comm: Any = None) -> Path | str:
    """Saves a state dict (or a nested state: model + optimizer + epoch) as a varstore checkpoint.

    A state holding DTensors (FSDP2 fully_shard parameters and optimizer
    state, distribute_tensor results on any DeviceMesh with Shard(d) /
    Replicate() placements), or any state with `comm`, is saved collectively:
    EVERY rank calls save with its own state; each rank writes only its local
    shards, a shard replicated on several ranks is written once, and every
    leaf is stored as ONE global array (plain h5py reads whole tensors);
    plain tensors are taken as held whole by every rank.

    CPU tensors are written straight from their memory (NumPy views, no copy);
    CUDA tensors are copied to the host one at a time as they are written.
    Every dtype with a NumPy or ml_dtypes counterpart is stored bit-exactly:
    bool, int8..64, uint8..64, float16/32/64, bfloat16, float8_e4m3fn,
    float8_e5m2, complex64/128; 0-d, empty and non-contiguous tensors too.

    Args:
      path: "x.h5" (HDF5 file) or "x.zarr" (Zarr v3 directory); replaced atomically.
      state: an nn.Module (its state_dict()), a state dict, or nested dicts,
        lists and tuples of tensors, NumPy arrays and JSON scalars
        ({"model": sd, "optimizer": opt.state_dict(), "epoch": 3}).
      step: global step to record.
      metadata: JSON-compatible dict to record; keys starting "varstore." are reserved.
      format: "h5" or "zarr"; None picks by suffix.
      checksum: record crc32c of every tensor.
      pack_threshold_bytes: as varstore.checkpoint.save_entries.
      overwrite: replace whatever is at `path` even when it is not a varstore
        checkpoint of this format (as varstore.save; default: refuse with CheckpointExistsError).
      layout: "per-variable", "packed" or None (by count), as varstore.save.
      durable: False skips fsync and early write-back (a crash keeps the old or
        the new checkpoint; a power loss may keep neither), as varstore.save.
      storage_options: object-store settings for an s3://, gs:// or az:// `path`
        (endpoint, region, credentials), as varstore.save.
      comm: the job's ranks: a torch.distributed ProcessGroup (dist.group.WORLD),
        any varstore communicator, or None (the default process group when the
        state holds DTensors; one process otherwise). A collective save takes
        local paths and the default pack, layout, checksum and durability options only.

    Returns:
      The final path (the same on every rank).

    Raises:
      UnsupportedDtypeError: a tensor dtype varstore cannot store (complex32,
        float8_e4m3fnuz, quantized, sparse), naming the tensor.
      InvalidNameError: a key that is not str/int, or two keys giving one name.
      InvalidMetadataError: a leaf that is not a tensor, array or JSON scalar,
        or a reserved metadata key.
      PartitionError: a DTensor with a Partial or _StridedShard placement.
      DistributedMismatchError: the ranks' states differ (names, global shapes, dtypes).
      CollectiveError: a peer rank died or the process group timed out; nothing is committed.
    """
    flat = _tree.flatten(_state_of(state), _classify)
    meta = _tree.check_user_metadata(metadata, str(path))
    if comm is not None or _sharded.has_dtensors(flat.arrays):
        _collective_only(checksum=checksum, pack_threshold_bytes=pack_threshold_bytes, layout=layout,
                         durable=durable, storage_options=storage_options)
        return _sharded.save_sharded(path, flat, meta, comm, step=step, format=format, overwrite=overwrite)
    return _tree.save_flat(
        path, flat, meta, entry=_entry, step=step, format=format, checksum=checksum,
        pack_threshold_bytes=pack_threshold_bytes, overwrite=overwrite, layout=layout, durable=durable,
        storage_options=storage_options,
        alias_key=lambda value: _convert.alias_key(value) if isinstance(value, torch.Tensor) else None)


def _collective_only(**options: Any) -> None:
    defaults = {"checksum": True, "pack_threshold_bytes": None, "layout": None, "durable": True,
                "storage_options": None, "lazy": False}
    refused = sorted(k for k, v in options.items() if v != defaults[k])
    if refused:
        raise TypeError(f"a sharded save or restore (DTensors, or comm=) does not take {refused}")


def _check(reader: VarstoreReader, name: str, source: str, tensor: torch.Tensor) -> None:
    info = reader.info(source)
    where = f"'{source}' in '{reader.path}'" if source == name else \
        f"'{source}' (saved once for its alias '{name}') in '{reader.path}'"
    if tuple(info.shape) != tuple(tensor.shape):
        raise ShapeMismatchError(
            f"cannot restore tensor '{name}' from {where}: the checkpoint has shape {tuple(info.shape)}, "
            f"the tensor has {tuple(tensor.shape)}")
    logical = _convert.dtype_name_of(tensor, name)
    if info.dtype != logical and not np.can_cast(_dtypes.as_dtype(info.dtype), _dtypes.as_dtype(logical),
                                                 "same_kind"):
        raise DtypeMismatchError(
            f"cannot restore tensor '{name}' from {where}: the checkpoint has dtype {info.dtype}, the "
            f"tensor has {tensor.dtype}, and a 'same_kind' cast is not possible; load it with "
            f"varstore.torch.load and convert with .to(...)")


def restore(path: PathLike | VarstoreReader, target: Any, *, strict: bool = True, verify: bool = True,
            format: str | None = None,
            storage_options: Mapping[str, object] | None = None, comm: Any = None) -> RestoreResult:
    """Restores a checkpoint into existing tensors, in place, as nn.Module.load_state_dict.

    A target holding DTensors (or any target with `comm`) is restored
    collectively: EVERY rank calls restore; each fills its local shards in
    place, reading only their byte ranges of the stored global arrays, from a
    checkpoint written by any number of ranks with any mesh and placements,
    or by one process (Shard(0) on 2 ranks -> Shard(1) on 4, 4 -> 1, 1 -> 2).

    Every tensor keeps its memory (same `data_ptr()`) and device: CPU tensors
    are filled through NumPy views of their own memory; CUDA tensors (and a
    second, untied target of a name saved once) are read into host memory and
    copied with `copy_`. Names, shapes and dtypes are all checked, and the
    staged values read, before any tensor changes. Non-tensor leaves of a
    nested target are left alone; use `load` for those.

    Args:
      path: the checkpoint (or an open VarstoreReader).
      target: an nn.Module (its state_dict(): parameters and buffers) or a
        (nested) state dict of tensors, named as by `save`.
      strict: raise RestoreError listing every missing and unexpected name
        (as load_state_dict(strict=True)); False restores the intersection.
      verify: check every value's crc32c.
      format: "h5"/"zarr", or None to detect.
      storage_options: object-store settings for a URL `path`, as varstore.restore.
      comm: as `save` (None with DTensors: the default process group).

    Returns:
      RestoreResult: restored, missing and unexpected names (the same on every rank).

    Raises:
      RestoreError: strict and the names differ (lists them all).
      ShapeMismatchError / DtypeMismatchError: naming the tensor, the file and both
        shapes or dtypes (the dtype must be equal or 'same_kind' castable).
      ChecksumError: damaged bytes (see varstore.restore for what was written then).
      CollectiveError: a peer rank died or the process group timed out.
    """
    flat = _tree.flatten(_state_of(target), _classify)
    tensors = {name: value for name, value in flat.arrays.items() if isinstance(value, torch.Tensor)}
    if comm is not None or _sharded.has_dtensors(tensors):
        if isinstance(path, VarstoreReader):
            path = path.path
        _collective_only(storage_options=storage_options)
        return _sharded.restore_sharded(path, tensors, comm, strict=strict, verify=verify, format=format)
    reader, owned = _tree.open_reader(path, format, storage_options)
    try:
        return _restore_into(reader, tensors, strict, verify)
    finally:
        if owned:
            reader.close()


def _restore_into(reader: VarstoreReader, tensors: dict[str, torch.Tensor], strict: bool,
                  verify: bool) -> RestoreResult:
    sources = {name: _tree.source_of(reader, name) for name in tensors}
    missing = [name for name, source in sources.items() if source is None]
    used = set(sources.values())
    unexpected = [name for name in reader.keys() if name not in used]
    if strict and (missing or unexpected):
        raise RestoreError(
            f"restoring '{reader.path}' strictly failed: tensors the checkpoint has no value for: "
            f"{missing_with_hints(missing, unexpected or reader.keys())}; "
            f"checkpoint values no tensor takes: {unexpected}; pass strict=False to restore the "
            f"intersection", missing=missing, unexpected=unexpected)
    direct: dict[str, Any] = {}        # checkpoint name -> NumPy view of a CPU tensor (vs.restore fills it)
    staged: list[tuple[str, str, torch.Tensor]] = []
    filled: set[Any] = set()
    for name, tensor in tensors.items():
        source = sources[name]
        if source is None:
            continue
        _check(reader, name, source, tensor)
        key = _convert.alias_key(tensor)
        if key is not None and (key, source) in filled:
            continue  # the same memory as a tensor already restored from this value (tied weights)
        filled.add((key, source))
        if tensor.device.type == "cpu" and source not in direct:
            direct[source] = _convert.host_view(tensor, name)
        else:
            staged.append((name, source, tensor))
    # Staged values are read (and checked) before any tensor changes.
    host = [(tensor, reader.read(source, verify=verify)) for _, source, tensor in staged]
    for (name, source, tensor), (_, value) in zip(staged, host):  # torch's copy_ would wrap or overflow silently
        check_fits(value, _dtypes.as_dtype(_convert.dtype_name_of(tensor, name)),
                   f"restore tensor '{name}' from '{source}' in '{reader.path}'")
    if direct:
        _restore(reader, direct, verify=verify)
    with torch.no_grad():
        for tensor, value in host:
            tensor.copy_(_convert.from_host(value))
    restored = [name for name, source in sources.items() if source is not None]
    return RestoreResult(restored, missing, unexpected)


def sharded_state(state: Any, comm: Any = None) -> ShardedState:
    """Every rank's shards of a (DTensor) state as one structure, for vs.CheckpointManager(comm=...).

        manager = vs.CheckpointManager("ckpts", comm=dist.group.WORLD)
        shards = vst.sharded_state({"model": model.state_dict()})
        manager.save(shards, step)           # every rank; restore_latest(shards) fills them in place

    Collective (every rank calls it). The structure's values are views of the
    CPU tensors' memory (CUDA tensors: use save / restore); the checkpoint's
    names are the state's flattened names, as `save` writes them (without the
    skeleton of non-tensor leaves and without alias detection).

    Raises:
      DistributedMismatchError: the ranks disagree about a global shape or dtype.
      PartitionError: a DTensor with a Partial or _StridedShard placement.
    """
    flat = _tree.flatten(_state_of(state), _classify)
    return _sharded.state_for_manager(flat.arrays, comm)


def load(path: PathLike | VarstoreReader, *, device: str | torch.device | None = None, verify: bool = True,
         format: str | None = None,
         storage_options: Mapping[str, object] | None = None) -> Any:
    """Loads a checkpoint as torch tensors, in the structure it was saved with.

    A checkpoint saved by `save` comes back as the same structure (dicts with
    their int or str keys, lists, tuples, scalars); tied names are the same
    tensor again. Without a recorded structure (state dicts and nested dicts
    of tensors, checkpoints written by vs.save) names are split on "/" into
    nested dicts: a state dict comes back flat ({"encoder.layer.0.weight": t}),
    {"model": sd} as {"model": {...}}, "conv1/weights" as d["conv1"]["weights"].

    Args:
      path: the checkpoint (or an open VarstoreReader).
      device: where the tensors go ("cpu", "cuda:0", a torch.device); None is the CPU.
      verify: check every value's crc32c.
      format: "h5"/"zarr", or None to detect.
      storage_options: object-store settings for a URL `path`, as varstore.restore.

    Returns:
      The state: `opt.load_state_dict(load(p)["optimizer"])` works as after torch.load.

    Raises:
      UnsupportedDtypeError: a string variable (torch has no string dtype), naming it.
      InvalidNameError: a name is both a variable and a scope ("a" next to "a/b").
      ChecksumError, CorruptCheckpointError, CheckpointNotFoundError: as varstore.restore.
    """
    reader, owned = _tree.open_reader(path, format, storage_options)
    try:
        return _load(reader, device, verify)
    finally:
        if owned:
            reader.close()


def _load(reader: VarstoreReader, device: str | torch.device | None, verify: bool) -> Any:
    where = str(reader.path)
    skeleton = reader.metadata.get(_tree.TREE_KEY)
    wanted = _tree.array_names(skeleton) if skeleton is not None else \
            reader.keys() + list(reader.metadata.get(_tree.ALIASES_KEY) or {})
    sources = {}
    for name in wanted:
        source = _tree.source_of(reader, name)
        if source is None:
            from varstore.errors import CorruptCheckpointError

            raise CorruptCheckpointError(
                f"'{where}': its {_tree.TREE_KEY} names '{name}', which the checkpoint does not hold")
        sources[name] = source
    target = torch.device(device) if device is not None else torch.device("cpu")
    pin = target.type == "cuda"
    tensors: dict[str, torch.Tensor] = {}
    views: dict[str, Any] = {}
    for source in dict.fromkeys(sources.values()):
        info = reader.info(source)
        tensor, view = _convert.empty_host(tuple(info.shape), info.dtype, source, where, pin_memory=pin)
        tensors[source] = tensor
        views[source] = view
    if views:
        _restore(reader, views, verify=verify)
    if target.type != "cpu":
        tensors = {name: tensor.to(target) for name, tensor in tensors.items()}
    by_name = {name: tensors[source] for name, source in sources.items()}
    if skeleton is None:
        return _tree.nest(list(by_name), by_name.__getitem__, where)
    return _tree.unflatten(skeleton, by_name.__getitem__, where)

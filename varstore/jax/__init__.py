"""varstore.jax: save any JAX pytree as a varstore checkpoint and get pytrees back.

    import varstore.jax as vsj
    vsj.save("params.zarr", params)                  # dicts, lists, tuples, NamedTuples, dataclasses
    params = vsj.restore("params.zarr", like=params) # a new pytree: the template's structure, dtypes, shardings
    params = vsj.load("params.zarr")                 # nested dicts rebuilt from the scopes

Names come from the key path, joined by "/": dict keys as they are,
attribute names of NamedTuples, dataclasses and flax structs as they are,
list/tuple indices as "0", "1" ("params/encoder/kernel",
"opt_state/0/mu/dense/kernel"). Python scalar leaves and the containers'
shape are recorded in the checkpoint metadata (docs/checkpoint-format.md
section 12). The same array object at two paths is stored once (an alias).

Sharded arrays (a NamedSharding / PositionalSharding over several devices,
or `comm=` for one process per host under jax.distributed) are saved shard
by shard, each box once, into ONE global array per leaf, and restored into
the template's sharding reading only each addressable box's byte ranges
(varstore/jax/_sharded.py).

The only module (with its helpers varstore/jax/_*.py) that imports jax; `import varstore` never imports this
module. Files, checksums and atomicity are varstore.checkpoint's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError as err:  # pragma: no cover - exercised only without jax
    from varstore.errors import MissingDependencyError

    raise MissingDependencyError("varstore.jax needs JAX: pip install 'varstore[jax]'") from err

from varstore import _framework_tree as _tree
from varstore.jax import _sharded
from varstore.jax._communicator import JaxCommunicator
from varstore import dtypes as _dtypes
from varstore.checkpoint import VarstoreReader
from varstore.checkpoint.read.restoration import restore as _restore
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.name_hints import missing_with_hints
from varstore.errors import (
    CorruptCheckpointError,
    DtypeMismatchError,
    RestoreError,
    ShapeMismatchError,
    UnsupportedDtypeError,
)

__all__ = ["save", "restore", "load", "JaxCommunicator"]

PathLike = Union[str, "os.PathLike[str]"]


def _is_array(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def _key(entry: Any) -> Any:
    for attribute in ("key", "idx", "name"):
        if hasattr(entry, attribute):
            return getattr(entry, attribute)
    return str(entry)


def _registered_children(value: Any) -> list[tuple[Any, Any]] | None:
    """[(key, child)] of a pytree node jax knows (one level), or None for a jax leaf."""
    keyed, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda y: y is not value)
    if len(keyed) == 1 and keyed[0][0] == () and keyed[0][1] is value:
        return None
    return [(_key(path[0]), child) for path, child in keyed]


def _classify(value: Any) -> tuple[Any, ...]:
    if _is_array(value):
        return ("array",)
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value",)
    if type(value) is list:
        return ("node", "list", list(enumerate(value)))
    if type(value) is tuple:
        return ("node", "tuple", list(enumerate(value)))
    if isinstance(value, Mapping):
        return ("node", "dict", list(value.items()))
    children = _registered_children(value)
    if children is not None:  # NamedTuple, registered dataclass, flax struct, custom node
        return ("node", "dict", children)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ("node", "dict", [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)])
    return ("value",)


def _host(value: Any) -> Any:
    return np.asarray(value)


def _entry(name: str, value: Any) -> SaveEntry:
    if isinstance(value, jax.ShapeDtypeStruct):
        from varstore.errors import InvalidMetadataError

        raise InvalidMetadataError(f"cannot save '{name}': it is a jax.ShapeDtypeStruct, which has no value")
    dtype = _dtypes.as_dtype(value.dtype)
    return SaveEntry(name, tuple(int(d) for d in np.shape(value)), dtype, lambda: _host(value))


def save(path: PathLike, tree: Any, *, step: int | None = None, metadata: Mapping[str, Any] | None = None,
         format: str | None = None, checksum: bool = True, pack_threshold_bytes: int | None = None,
         overwrite: bool = False, layout: str | None = None, durable: bool = True,
         storage_options: Mapping[str, object] | None = None, comm: Any = None) -> Path | str:
    """Saves a pytree of jax arrays (and NumPy arrays, Python scalars) as a varstore checkpoint.

    bfloat16 and float8 arrays are stored bit-exactly (as all dtypes of
    varstore.dtypes.SUPPORTED_NAMES). A tree holding sharded arrays (a
    sharding over more than one device), or any tree with `comm`, is saved
    shard by shard: each addressable shard with replica_id 0 is written once
    from its host memory into ONE global array per leaf (plain h5py reads
    whole arrays); with `comm` every process calls save with its own tree.

    Args:
      path: "x.h5" (HDF5 file) or "x.zarr" (Zarr v3 directory); replaced atomically.
      tree: the pytree: dicts, lists, tuples, NamedTuples, dataclasses (registered
        with jax or not), flax structs; its root must be a container.
      step: global step to record.
      metadata: JSON-compatible dict; keys starting "varstore." are reserved.
      format: "h5" or "zarr"; None picks by suffix.
      checksum: record crc32c of every array.
      pack_threshold_bytes: as varstore.checkpoint.save_entries.
      overwrite: replace whatever is at `path` even when it is not a varstore
        checkpoint of this format (as varstore.save; default: refuse with CheckpointExistsError).
      layout: "per-variable", "packed" or None (by count), as varstore.save.
      durable: False skips fsync and early write-back (a crash keeps the old or
        the new checkpoint; a power loss may keep neither), as varstore.save.
      storage_options: object-store settings for an s3://, gs:// or az:// `path`
        (endpoint, region, credentials), as varstore.save.
      comm: None (this process), or the job's communicator when several
        processes share the arrays (jax.distributed): every process calls save.
        A sharded save takes local paths and the default pack, layout, checksum
        and durability options only.

    Returns:
      The final path.

    Raises:
      UnsupportedDtypeError: a dtype varstore cannot store (int4, float8_e4m3fnuz ...).
      InvalidNameError: a key that is not str/int, or two paths giving one name.
      InvalidMetadataError: a leaf that is neither an array nor a JSON scalar.
      DistributedMismatchError: with `comm`, the processes' trees differ.
    """
    flat = _tree.flatten(tree, _classify)
    meta = _tree.check_user_metadata(metadata, str(path))
    if comm is not None or any(_sharded.is_sharded(v) for v in flat.arrays.values()):
        changed = {"checksum": checksum is not True, "pack_threshold_bytes": pack_threshold_bytes is not None,
                   "layout": layout is not None, "durable": durable is not True,
                   "storage_options": storage_options is not None}
        if any(changed.values()):
            raise TypeError(f"a sharded save does not take {sorted(k for k, v in changed.items() if v)}")
        return _sharded.save_sharded(path, flat, meta, comm, step=step, format=format, overwrite=overwrite)
    return _tree.save_flat(
        path, flat, meta, entry=_entry, step=step, format=format, checksum=checksum,
        pack_threshold_bytes=pack_threshold_bytes, overwrite=overwrite, layout=layout, durable=durable,
        storage_options=storage_options,
        alias_key=lambda value: id(value) if isinstance(value, jax.Array) else None)


def _recorded_values(reader: VarstoreReader) -> dict[str, Any]:
    """path -> scalar leaf recorded in the checkpoint's skeleton."""
    skeleton = reader.metadata.get(_tree.TREE_KEY)
    if skeleton is None:
        return {}
    values: dict[str, Any] = {}

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict) or len(node) != 1:
            return
        (kind, body), = node.items()
        if kind == "value":
            values[path] = body
        elif kind == "float":
            values[path] = float.fromhex(body)
        elif kind in ("dict", "list", "tuple"):
            for index, child in enumerate(body):
                key, sub = (child[0], child[1]) if kind == "dict" else (index, child)
                walk(sub, f"{path}/{key}" if path else str(key))

    walk(skeleton, "")
    return values


def _rebuild(template: Any, path: str, leaf: Any) -> Any:
    """A copy of `template` with each array or scalar leaf replaced by leaf(path, old)."""
    kind = _classify(template)
    if kind[0] in ("array", "value"):
        return leaf(path, template)
    join = (lambda key: f"{path}/{key}" if path else str(key))
    if dataclasses.is_dataclass(template) and not isinstance(template, type) \
            and _registered_children(template) is None:
        return dataclasses.replace(template, **{key: _rebuild(child, join(key), leaf) for key, child in kind[2]})
    keyed, treedef = jax.tree_util.tree_flatten_with_path(template, is_leaf=lambda y: y is not template)
    children = [_rebuild(child, join(_key(keys[0])), leaf) for keys, child in keyed]
    return jax.tree_util.tree_unflatten(treedef, children)


def restore(path: PathLike | VarstoreReader, like: Any, *, strict: bool = True, verify: bool = True,
            format: str | None = None,
         storage_options: Mapping[str, object] | None = None, comm: Any = None) -> Any:
    """Reads a checkpoint into a new pytree shaped like `like` (jax arrays are immutable).

    Template leaves with a sharding over several devices (NamedSharding,
    PositionalSharding; jax.ShapeDtypeStruct(shape, dtype, sharding=...)) are
    read box by box: each distinct addressable box once, only its byte
    ranges, whatever sharding (or number of processes) wrote the checkpoint,
    then placed on its devices. With `comm`, every process calls restore.

    Each array leaf of the template (jax.Array, jax.ShapeDtypeStruct or NumPy
    array) names a checkpoint value by its key path; the result has the
    template's structure, dtypes ('same_kind' casts, as varstore.restore) and,
    for jax arrays and ShapeDtypeStructs with a sharding, its sharding and
    devices. Python scalar leaves take the recorded value when the checkpoint
    has one. Every name, shape and dtype is checked before anything is read.

    Args:
      path: the checkpoint (or an open VarstoreReader).
      like: the template pytree (the current params, or jax.eval_shape's output).
      strict: also raise RestoreError when the checkpoint holds values the
        template has no leaf for (missing ones always raise).
      verify: check every value's crc32c.
      format: "h5"/"zarr", or None to detect.
      storage_options: object-store settings for a URL `path`, as varstore.restore.
      comm: as `save`.

    Returns:
      The new pytree.

    Raises:
      RestoreError: template leaves without a value (always) or, with strict,
        checkpoint values without a leaf; lists them all.
      ShapeMismatchError / DtypeMismatchError: naming the leaf, the file and both.
      ChecksumError: damaged bytes, naming the variable.
    """
    flat = _tree.flatten(like, _classify)
    reader, owned = _tree.open_reader(path, format, storage_options)
    try:
        where = str(reader.path)
        values = _recorded_values(reader)
        sources = {name: _tree.source_of(reader, name) for name in flat.arrays}
        missing = [name for name, source in sources.items() if source is None and name not in values]
        used = set(sources.values())
        unexpected = [name for name in reader.keys() if name not in used] if strict else []
        if missing or unexpected:
            raise RestoreError(
                f"restoring '{where}' into the template failed: leaves the checkpoint has no value for: "
                f"{missing_with_hints(missing, reader.keys())}; checkpoint values no leaf takes: {unexpected}"
                + ("; pass strict=False to ignore the latter" if unexpected else ""),
                missing=missing, unexpected=unexpected)
        buffers: dict[str, np.ndarray] = {}
        reads: dict[str, np.ndarray] = {}
        placed: dict[str, Any] = {}
        if comm is not None or any(_sharded.is_sharded(v) for v in flat.arrays.values()):
            found = {name: source for name, source in sources.items() if source is not None}
            placed = _sharded.restore_sharded(reader.path, flat.arrays, found, comm, verify=verify, format=format)
        for name, template in flat.arrays.items():
            if placed:
                break
            source = sources[name]
            if source is None:
                continue  # a scalar recorded in the skeleton, placed as an array below
            info = reader.info(source)
            shape = tuple(int(d) for d in np.shape(template))
            dtype = _dtypes.as_dtype(template.dtype)
            if tuple(info.shape) != shape:
                raise ShapeMismatchError(
                    f"cannot restore '{name}' from '{source}' in '{where}': the checkpoint has shape "
                    f"{tuple(info.shape)}, the template has {shape}")
            stored = _dtypes.as_dtype(info.dtype)
            if stored != dtype and not np.can_cast(stored, dtype, "same_kind"):
                raise DtypeMismatchError(
                    f"cannot restore '{name}' from '{source}' in '{where}': the checkpoint has dtype "
                    f"{info.dtype}, the template has {_dtypes.dtype_name(dtype)}, and a 'same_kind' cast "
                    f"is not possible")
            buffer = np.empty(shape, dtype)
            buffers[name] = buffer
            if source not in reads:
                reads[source] = buffer
        if reads:
            _restore(reader, reads, verify=verify)
        for name, buffer in buffers.items():
            first = reads[sources[name]]  # type: ignore[index]
            if buffer is not first:
                np.copyto(buffer, first, casting="unsafe")
    finally:
        if owned:
            reader.close()

    def leaf(path_: str, old: Any) -> Any:
        if path_ in placed:
            return placed[path_]
        if path_ in buffers:
            value = buffers[path_]
        elif path_ in values and _is_array(old):
            value = np.asarray(values[path_], dtype=_dtypes.as_dtype(old.dtype))
        else:
            return values.get(path_, old)
        if isinstance(old, np.ndarray):
            return value
        if isinstance(old, np.generic):
            return value[()]
        sharding = getattr(old, "sharding", None)
        return jax.device_put(value, sharding) if sharding is not None else jnp.asarray(value)

    return _rebuild(like, "", leaf)


def load(path: PathLike | VarstoreReader, *, device: Any = None, verify: bool = True,
         format: str | None = None,
         storage_options: Mapping[str, object] | None = None) -> Any:
    """Loads a checkpoint as jax arrays in nested dicts.

    A checkpoint whose metadata records a structure (saved by this module or
    varstore.torch from lists, tuples or scalars) comes back with dicts for
    mappings, NamedTuples and dataclasses, lists and tuples as saved, and its
    scalars; otherwise names are split on "/" into nested dicts
    ("params/encoder/kernel" -> tree["params"]["encoder"]["kernel"]). Aliased
    names give the same array.

    Args:
      path: the checkpoint (or an open VarstoreReader).
      device: a jax.Device or Sharding for every array; None is jax's default device.
      verify: check every value's crc32c.
      format: "h5"/"zarr", or None to detect.
      storage_options: object-store settings for a URL `path`, as varstore.restore.

    Raises:
      InvalidNameError: a name is both a variable and a scope ("a" next to "a/b").
      UnsupportedDtypeError: a string variable (jax has no string dtype), naming it.
      ChecksumError, CorruptCheckpointError, CheckpointNotFoundError: as varstore.restore.
    """
    reader, owned = _tree.open_reader(path, format, storage_options)
    try:
        where = str(reader.path)
        skeleton = reader.metadata.get(_tree.TREE_KEY)
        wanted = _tree.array_names(skeleton) if skeleton is not None else \
            reader.keys() + list(reader.metadata.get(_tree.ALIASES_KEY) or {})
        sources: dict[str, str] = {}
        for name in wanted:
            source = _tree.source_of(reader, name)
            if source is None:
                raise CorruptCheckpointError(
                    f"'{where}': its {_tree.TREE_KEY} names '{name}', which the checkpoint does not hold")
            sources[name] = source
        reads = {}
        for source in dict.fromkeys(sources.values()):
            info = reader.info(source)
            if info.dtype[0] in "SU":
                raise UnsupportedDtypeError(
                    f"cannot load '{source}' from '{where}' as a jax array: jax has no string dtype "
                    f"{info.dtype}; read it with vs.open_checkpoint(...)[{source!r}] (a NumPy array)")
            reads[source] = np.empty(tuple(info.shape), _dtypes.as_dtype(info.dtype))
        if reads:
            _restore(reader, reads, verify=verify)
    finally:
        if owned:
            reader.close()
    arrays = {source: (jax.device_put(value, device) if device is not None else jnp.asarray(value))
              for source, value in reads.items()}
    by_name = {name: arrays[source] for name, source in sources.items()}
    if skeleton is None:
        return _tree.nest(list(by_name), by_name.__getitem__, where)
    return _tree.unflatten(skeleton, by_name.__getitem__, where)

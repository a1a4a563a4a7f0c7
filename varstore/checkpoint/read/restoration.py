"""restore: put a checkpoint's values into a store, Variables or arrays, checking everything first.

Strict by default, as tf.compat.v1.train.Saver.restore: a target variable
the checkpoint has no value for raises RestoreError (with did-you-mean
hints); checkpoint values no target takes are reported as `unexpected`
(a store keeps them for variables created later) and fail only
`RestoreResult.assert_consumed()` (restore_result.py). strict=False
restores what both have.
Name mapping follows tf.compat.v1.train.init_from_checkpoint's
assignment_map: {"old_scope/": "new_scope/"} maps every checkpoint name
under "old_scope/" to the same suffix under "new_scope/" ("" or "/" is the
root), {"old/w": "new/w"} maps one name; exact names win over prefixes and
longer prefixes over shorter ones; with a map, names it does not cover are
left alone. Every shape and dtype is validated before any value is written,
so a failing restore changes nothing. With lazy=False (the default) every
value is read and its checksum checked before restore returns: variables
without memory get new buffers, filled and checked before any of them is
assigned (all-or-nothing); allocated variables and arrays are filled in
place, and a ChecksumError of a large value (checked in a helper thread
after it was read into place) leaves those read so far with their new
values (docs/errors.md; run reader.verify() first for all-or-nothing).
lazy=True, and variables created later in the store (deferred restore),
keep a ValueSource so their initializers never run and reading waits for
first use (a part of a partitioned variable created later gets the region of
its whole variable's stored array: `PendingResolver`). A reader of another
format (an open CheckpointReader: TF bundle, safetensors, PyTorch, ...) is
matched by the same rules and read through foreign_read.py. The reading itself
is read_engine's one call; this module decides names, targets and what is
valid, never reads bytes and never opens a foreign format (the public
varstore.restore does, through the registry).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from varstore.checkpoint._batch import paused_gc
from varstore.checkpoint.read.read_engine import read_into_targets
from varstore.checkpoint.read.foreign_read import ReaderResolver, ReaderSource, fill_from_reader
from varstore.checkpoint.read.reader import CheckpointValue, VarstoreReader, open_varstore
from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.checkpoint.read.regions import RegionSource
from varstore.checkpoint.read.restore_result import Consumption, RestoreResult, strict_restore_error
from varstore.errors import DtypeMismatchError, RestoreError, RestoreTargetError, ShapeMismatchError
from varstore.store.ownership import bound_rank
from varstore.store.value_sources import Resolver, SliceInfo, ValueSource

__all__ = ["restore", "restore_and_release", "RestoreResult", "PendingResolver", "map_names", "covered_targets",
           "targets_of", "strict_restore_error", "reader_still_needed"]


def _root(prefix: str) -> str:
    return "" if prefix in ("", "/") else prefix


def map_names(names: list[str], assignment_map: Mapping[str, str] | None) -> dict[str, str]:
    """Maps checkpoint names to target names with TF init_from_checkpoint rules; uncovered names are dropped."""
    if assignment_map is None:
        return {name: name for name in names}
    exact: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for key, value in assignment_map.items():
        value = getattr(value, "name", value)
        if key in ("", "/") or key.endswith("/"):
            prefixes.append((_root(key), _root(value) if value in ("", "/") or value.endswith("/")
                             else value + "/"))
        else:
            exact[key] = value
    prefixes.sort(key=lambda kv: len(kv[0]), reverse=True)
    mapped = {}
    for name in names:
        if name in exact:
            mapped[name] = exact[name]
            continue
        for key, value in prefixes:
            if name.startswith(key):
                mapped[name] = value + name[len(key):]
                break
    return mapped


def covered_targets(targets: list[str], assignment_map: Mapping[str, str] | None) -> list[str]:
    """The target names an assignment_map covers (all of them without one), in order."""
    if assignment_map is None:
        return list(targets)
    exact = set()
    prefixes = []
    for key, value in assignment_map.items():
        value = getattr(value, "name", value)
        if key in ("", "/") or key.endswith("/"):
            prefixes.append(_root(value) if value in ("", "/") or value.endswith("/") else value + "/")
        else:
            exact.add(value)
    return [t for t in targets if t in exact or any(t.startswith(p) for p in prefixes)]


def _unbound(store: Any) -> bool:
    """True when `store` is bound to no communicator (varstore.ownership), so this process holds all it has."""
    try:
        return bound_rank(store) is None
    except TypeError:  # not weakly referenceable: not a store ownership knows
        return False


def targets_of(target: Any) -> tuple[dict[str, Any], Any]:
    """What a restore fills: (name -> Variable or ndarray, the store for deferred restores or None).

    Args:
      target: a VariableStore, a mapping of names to Variables or arrays, one Variable, or a list of Variables.
    """
    if hasattr(target, "variables") and callable(target.variables) and not isinstance(target, Mapping):
        if _unbound(target):  # one process holds every variable: no per-variable ownership look-up
            return {v.name: v for v in target.variables()}, target
        # a store bound to a communicator: only the variables this rank holds (varstore.ownership)
        return {v.name: v for v in target.variables() if getattr(v, "is_owned", True)}, target
    if isinstance(target, Mapping):
        return dict(target), None
    if hasattr(target, "restore_from"):
        return {target.name: target}, None
    return {v.name: v for v in target}, None


class PendingResolver:
    """A deferred restore (varstore.value_sources.Resolver): checkpoint values for variables created later.

    `waiting` maps target names (after the assignment_map) to stored names.
    A variable takes the value of its name once. A part of a partitioned
    variable whose full name waits gets a RegionSource of its slice of the
    stored global array (read on first use, checked against the crc32c of the
    recorded writes it overlaps); each region once. A part whose own name was
    stored (phase-1 checkpoints) takes that entry directly.
    """

    def __init__(self, reader: VarstoreReader, waiting: dict[str, str], verify: bool = True) -> None:
        self.reader = reader
        self.waiting = waiting
        self.verify = verify
        self._taken: dict[str, set[tuple[tuple[int, ...], tuple[int, ...]]]] = {}

    def __call__(self, name: str, slice_info: SliceInfo | None) -> ValueSource | None:
        """The source of new variable `name` (a part when `slice_info` is given), or None.

        Raises:
          ShapeMismatchError: a part's whole variable has another shape than the
            stored array (names the part, the variable, the file and both shapes).
        """
        if slice_info is not None and slice_info.full_name in self.waiting:
            return self._region(name, slice_info)
        ckpt = self.waiting.pop(name, None)
        return None if ckpt is None else self.reader.source(ckpt, verify=self.verify)

    def _region(self, name: str, info: SliceInfo) -> ValueSource | None:
        ckpt = self.waiting[info.full_name]
        key = (tuple(info.var_offset), tuple(info.var_shape))
        taken = self._taken.setdefault(info.full_name, set())
        if key in taken:
            return None
        stored = tuple(self.reader.record(ckpt).shape)
        if stored != tuple(info.full_shape):
            raise ShapeMismatchError(
                f"cannot restore partitioned variable '{info.full_name}' (part '{name}') from "
                f"'{self.reader.path}': the checkpoint's array '{ckpt}' has shape {stored}, the variable was "
                f"created with {tuple(info.full_shape)}; create it with the stored shape")
        taken.add(key)
        return RegionSource(self.reader, ckpt, key[0], key[1], self.verify)

    def unconsumed(self) -> list[str]:
        """The stored names no variable (nor any part of one) has taken yet."""
        return [ckpt for target, ckpt in self.waiting.items() if not self._taken.get(target)]


def _check_array(name: str, array: Any, source: ValueSource) -> None:
    if not isinstance(array, np.ndarray) or not array.flags.writeable:
        module = type(array).__module__.split(".")[0]
        hint = {"torch": "; for torch tensors use varstore.torch.restore",
                "jax": "; jax arrays are immutable: use varstore.jax.restore(path, like=...)",
                "jaxlib": "; jax arrays are immutable: use varstore.jax.restore(path, like=...)"}.get(module, "")
        raise RestoreTargetError(
            f"cannot restore '{name}' from {source.origin}: the target must be a Variable or a "
            f"writeable NumPy array, got {'a read-only ndarray' if isinstance(array, np.ndarray) else type(array).__name__}"
            f"{hint}")
    if tuple(array.shape) != tuple(source.shape):
        raise ShapeMismatchError(
            f"cannot restore '{name}' from {source.origin}: the checkpoint has shape "
            f"{tuple(source.shape)}, the target has {tuple(array.shape)}")
    if array.dtype != source.dtype and not np.can_cast(source.dtype, array.dtype, "same_kind"):
        raise DtypeMismatchError(
            f"cannot restore '{name}' from {source.origin}: the checkpoint has dtype {source.dtype}, "
            f"the target has {array.dtype}, and a 'same_kind' cast is not possible")


def restore(path: os.PathLike[str] | str | CheckpointReader, target: Any, *,
            assignment_map: Mapping[str, str] | None = None, strict: bool = True, lazy: bool = False,
            verify: bool = True, format: str | None = None,
            storage_options: Mapping[str, object] | None = None) -> RestoreResult:
    """Restores variables from a checkpoint, never running their initializers; strict by default.

    Args:
      path: a varstore checkpoint, an object-store URL ("s3://bucket/runs/a7/model.zarr"), or an
        open CheckpointReader of any format (varstore.open_checkpoint; the caller closes it).
        Paths in other formats are opened by the public varstore.restore, which calls this.
      target: a VariableStore (its variables now, and, for names left over,
        variables created in it later: deferred restore, the parts of a
        partitioned variable included, each taking its region of the stored
        array), a list of Variables,
        or a mapping of names to Variables or writeable NumPy arrays (filled in place).
      assignment_map: {checkpoint scope or name: target scope or name}, TF
        init_from_checkpoint rules; only the names it covers are restored.
      strict: True (default, as tf.compat.v1.train.Saver.restore): a target
        the checkpoint has no value for raises RestoreError. Checkpoint values
        without a target never raise here (`unexpected`; see
        RestoreResult.assert_consumed). False: restore what both have; the rest keep
        their values or, when first read, their initializers.
      lazy: leave values on disk until each variable's first use (as before
        issue 9). False (default): every value is read and checked now, and every
        restored Variable is initialized when restore returns.
      verify: check each variable's crc32c as it is read (other formats check
        what they record, always).
      format: "h5"/"zarr", or None to detect.
      storage_options: for URLs: endpoint, region, credentials (see open_varstore).

    Returns:
      RestoreResult with restored, missing, unexpected and deferred names, and
      assert_consumed() / expect_partial().

    Raises:
      RestoreError: strict and some target has no value (lists them all, with
        did-you-mean hints; nothing is restored or deferred then).
      ShapeMismatchError, DtypeMismatchError: naming the variable, the file and
        both shapes or dtypes; raised before anything is written.
      ChecksumError: a variable's bytes are damaged (names it and the file);
        raised by restore itself with lazy=False. Variables that had no memory
        are then left as they were; see docs/errors.md for allocated ones.
      CheckpointNotFoundError, NotACheckpointError, CorruptCheckpointError: see open_varstore.
    """
    if isinstance(path, CheckpointReader):  # the caller's reader: the caller closes it
        with paused_gc():
            targets, store = targets_of(target)
            return _restore_from(path, targets, store, assignment_map, strict, lazy, verify)
    return restore_and_release(open_varstore(path, format, storage_options=storage_options), target,
                               assignment_map=assignment_map, strict=strict, lazy=lazy, verify=verify)


def restore_and_release(reader: CheckpointReader, target: Any, *, assignment_map: Mapping[str, str] | None = None,
                        strict: bool = True, lazy: bool = False, verify: bool = True) -> RestoreResult:
    """`restore` from a reader this call owns: closed on failure, and after success unless lazy or
    deferred variables still read from it (they hold it; the last one gone, the garbage collector closes it).

    Left to the collector, a reader's h5py file could be closed in whichever thread collects it, at
    any time, holding h5py's lock there; so an eager restore closes it here.
    """
    with paused_gc(), reader.held() as hold:  # the reader's names once; closed at the end unless held on
        targets, store = targets_of(target)
        result = _restore_from(reader, targets, store, assignment_map, strict, lazy, verify, hold.names)
        hold.keep = reader_still_needed(result, targets, lazy)
    return result


def reader_still_needed(result: RestoreResult, targets: Mapping[str, Any], lazy: bool = True) -> bool:
    """True when a restore's reader must stay open after it returns: deferred restores (variables
    created later) and lazy variables, whose values are read on first use, still read from it.

    An eager restore (`lazy=False`) has read every value, so only deferred restores count: the
    targets are not scanned (a pending restore among them reads from another checkpoint; 50,000
    targets took ~10 ms to scan).
    """
    if result.deferred or not lazy:
        return bool(result.deferred)
    return any(getattr(obj, "is_restore_pending", False) for obj in targets.values())


def _match(names: list[str], targets: dict[str, Any], assignment_map: Mapping[str, str] | None
           ) -> tuple[list[tuple[str, str, Any]], list[str], list[str], dict[str, str] | None]:
    """(checkpoint name, target name, target) items, missing target names, unexpected checkpoint names,
    and the name map (None without an assignment_map: names as stored)."""
    if assignment_map is None:  # names as stored: set passes instead of a mapping (50,000 names: ~25 ms less)
        found = targets.keys() & set(names)
        if len(found) == len(names):
            items = [(name, name, targets[name]) for name in names]
            unexpected = []
        else:
            items = [(name, name, targets[name]) for name in names if name in found]
            unexpected = [name for name in names if name not in found]
        missing = [] if len(found) == len(targets) else [name for name in targets if name not in found]
        return items, missing, unexpected, None
    mapped = map_names(names, assignment_map)
    pairs = [(ckpt, mapped[ckpt]) for ckpt in names if ckpt in mapped and mapped[ckpt] in targets]
    unexpected = [ckpt for ckpt in names if ckpt in mapped and mapped[ckpt] not in targets]
    covered = set(mapped[ckpt] for ckpt, _ in pairs)
    missing = [name for name in covered_targets(list(targets), assignment_map) if name not in covered]
    return [(ckpt, name, targets[name]) for ckpt, name in pairs], missing, unexpected, mapped


def _restore_from(reader: CheckpointReader, targets: dict[str, Any], store: Any,
                  assignment_map: Mapping[str, str] | None, strict: bool, lazy: bool, verify: bool,
                  names: list[str] | None = None) -> RestoreResult:
    names = reader.keys() if names is None else names
    items, missing, unexpected, mapped = _match(names, targets, assignment_map)
    location = getattr(reader, "location", None) or str(reader.path)

    def stored() -> list[str]:
        return list(names) if mapped is None else [mapped[n] for n in names if n in mapped]

    if strict and missing and isinstance(reader, VarstoreReader):  # other formats: parts are matched first
        raise strict_restore_error(location, missing, unexpected, stored())
    from varstore.store.variables import check_restorable

    def validate(name: str, obj: Any, source: ValueSource) -> None:
        if hasattr(obj, "restore_from"):
            if obj.shape != source.shape or obj.dtype != source.dtype:
                check_restorable(obj, source)
        else:
            _check_array(name, obj, source)

    if isinstance(reader, VarstoreReader):
        read_into_targets(reader, items, verify=verify, lazy=lazy, validate=validate)
    else:
        regions = _parts_of_stored(items, missing, unexpected, targets, mapped, strict, location, stored)
        fill_from_reader(reader, items, lazy=lazy, validate=validate, regions=regions)
    deferred: list[str] = []
    resolver: PendingResolver | ReaderResolver | None = None
    if store is not None and unexpected and hasattr(store, "add_pending_restore"):
        waiting = {ckpt if mapped is None else mapped[ckpt]: ckpt for ckpt in unexpected}
        deferred = list(waiting)
        resolver = PendingResolver(reader, waiting, verify) if isinstance(reader, VarstoreReader) else \
            ReaderResolver(reader, waiting)
        store.add_pending_restore(resolver)  # mypy checks the core's protocol here
    consumption = _consumption(location, store, stored, assignment_map, resolver, missing, unexpected)
    return RestoreResult([name for _, name, _ in items], missing, unexpected, deferred, consumption)


def _parts_of_stored(items: list[tuple[str, str, Any]], missing: list[str], unexpected: list[str],
                     targets: dict[str, Any], mapped: dict[str, str] | None, strict: bool, location: str,
                     stored: Callable[[], list[str]]) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """For another format's reader: parts of partitioned variables (missing under their own names) take
    their region of the stored whole array, as TF's Saver restores a partitioned variable; updates
    items, missing and unexpected in place and returns {part name: (offset, shape)}. Then applies strict."""
    regions: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    if missing:
        source_of = {(name if mapped is None else mapped[name]): name for name in unexpected
                     if mapped is None or name in mapped}
        taken: set[str] = set()
        for name in list(missing):
            info = getattr(targets[name], "save_slice_info", None)
            if info is None or info.full_name not in source_of:
                continue
            items.append((source_of[info.full_name], name, targets[name]))
            regions[name] = (tuple(info.var_offset), tuple(info.var_shape))
            taken.add(source_of[info.full_name])
            missing.remove(name)
        unexpected[:] = [name for name in unexpected if name not in taken]
    if strict and missing:
        raise strict_restore_error(location, missing, unexpected, stored())
    return regions


def _consumption(location: str, store: Any, stored: Callable[[], list[str]],
                 assignment_map: Mapping[str, str] | None, resolver: PendingResolver | ReaderResolver | None,
                 missing: list[str], unexpected: list[str]) -> Consumption:
    """How a restore stands when assert_consumed asks: for a store, its variables then and the resolver's
    leftovers; for other targets, what restore found."""

    def unmatched() -> list[str]:
        if store is None:
            return list(missing)
        stored_set = set(stored())  # computed when asked: a restore of 50,000 names pays nothing for it
        current = targets_of(store)[0]
        covered = covered_targets(list(current), assignment_map)
        return [name for name in covered if name not in stored_set
                and getattr(getattr(current[name], "save_slice_info", None), "full_name", None) not in stored_set]

    def unconsumed() -> list[str]:
        return resolver.unconsumed() if resolver is not None else list(unexpected)

    return Consumption(location, unmatched, unconsumed, stored)

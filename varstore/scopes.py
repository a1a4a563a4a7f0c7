"""VariableStore, variable_scope and get_variable: TF1 naming, reuse rules, collections and pending restores.

The store knows every variable created in it (get_variable ones strongly,
others weakly), names them (unique default names, nested scopes), shares
them under the reuse rules of tf.compat.v1.variable_scope, keeps the
collections, and hands new variables to pending-restore resolvers. The
scope stack is thread-local. Never does file I/O; never imports the
checkpoint layer.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union, overload

import numpy as np
import numpy.typing as npt

from varstore import _naming, devices, dtypes, ownership, partitioning, variables
from varstore.collections import GLOBAL_VARIABLES, LOCAL_VARIABLES, TRAINABLE_VARIABLES, CollectionRegistry
from varstore.errors import (
    DtypeMismatchError,
    InitializerError,
    PartitionError,
    ScopeError,
    ShapeMismatchError,
    VariableExistsError,
    VariableNotFoundError,
)
from varstore.initializers import GlorotUniform, Initializer, InitializerFunction, Zeros
from varstore.placement import DeviceSpec
from varstore.variables import InitialValue, ValueSource, Variable, convert_value, lazy_variable

__all__ = [
    "AUTO_REUSE",
    "VariableScope",
    "VariableStore",
    "get_default_store",
    "reset_default_store",
    "variable_scope",
    "get_variable_scope",
    "get_variable",
    "get_collection",
    "add_to_collection",
    "global_variables",
    "trainable_variables",
    "local_variables",
    "initialize",
    "report_uninitialized",
]


class _ReuseMode(enum.Enum):
    AUTO_REUSE = 1

    def __repr__(self) -> str:
        return "AUTO_REUSE"


#: reuse mode: get_variable returns the existing variable or creates it (tf.compat.v1.AUTO_REUSE).
AUTO_REUSE = _ReuseMode.AUTO_REUSE

#: A reuse mode: False/None (create only), True (reuse only) or AUTO_REUSE.
Reuse = Union[bool, _ReuseMode, None]
#: A pending-restore hook: full variable name -> where to restore it from, or None.
Resolver = Callable[[str], Union[ValueSource, None]]
#: A requested shape: ints, None for "any" on reuse, or None when the initializer gives it.
PartialShape = Union[int, Sequence[Union[int, None]], None]
#: What get_variable accepts as initializer: an Initializer (or its class), any
#: callable (shape, dtype) -> array, or the value itself (array, Variable, Python value).
InitializerSpec = Union[Variable, Initializer, "type[Initializer]", InitializerFunction, npt.ArrayLike, None]


class VariableScope:
    """The defaults of one variable scope, as tf.compat.v1.VariableScope.

    Attributes:
      name: full scope name ("" for the root, "image_filters/conv1").
      reuse: False, True or AUTO_REUSE.
      initializer: default initializer for get_variable, or None.
      dtype: default dtype for get_variable, or None (float32).
      original_name_scope: `name + "/"` ("" for the root).
    """

    def __init__(self, store: VariableStore, name: str, reuse: Reuse = False,
                 initializer: InitializerSpec = None, dtype: npt.DTypeLike | None = None) -> None:
        self._store = store
        self._name = name
        self._reuse: Reuse = reuse if reuse else False
        self.initializer = initializer
        self.dtype = None if dtype is None else dtypes.as_dtype(dtype)

    @property
    def name(self) -> str:
        return self._name

    @property
    def original_name_scope(self) -> str:
        return f"{self._name}/" if self._name else ""

    @property
    def reuse(self) -> Reuse:
        return self._reuse

    def reuse_variables(self) -> None:
        """Makes get_variable in this scope (and scopes opened inside it from now on) reuse, as TF1."""
        self._reuse = True

    def set_initializer(self, initializer: InitializerSpec) -> None:
        """Sets the default initializer."""
        self.initializer = initializer

    def set_dtype(self, dtype: npt.DTypeLike) -> None:
        """Sets the default dtype."""
        self.dtype = dtypes.as_dtype(dtype)

    def __repr__(self) -> str:
        return f"<VariableScope {self._name!r} reuse={self._reuse!r}>"


class _Frames(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple[VariableStore, VariableScope]] = []


_frames = _Frames()


def _shape_tuple(shape: PartialShape, what: str) -> tuple[int | None, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError as err:
        raise ShapeMismatchError(f"{what}: shape must be a sequence of ints, got {shape!r}") from err


def _is_value(initializer: InitializerSpec) -> bool:
    """True for initializers that ARE the value (arrays, Variables, Python values), as TF1's initializing_from_value."""
    if initializer is None:
        return False
    if isinstance(initializer, Variable) or isinstance(initializer, np.ndarray) or devices.is_device_array(initializer):
        return True
    return not callable(initializer)


class VariableStore:
    """A set of variables with scopes, TF1 reuse rules and collections (tf.compat.v1's _VariableStore plus graph collections).

    Variables from get_variable are held strongly (they are shared by name);
    others (Variable(...)) weakly: a variable nobody references is freed and
    leaves every collection. Thread-safe; scopes are per thread.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._shared: dict[str, Variable] = {}
        self._partitioned: dict[str, partitioning.PartitionedVariable] = {}
        self._weak: weakref.WeakValueDictionary[str, Variable] = weakref.WeakValueDictionary()
        self._order: list[weakref.ref[Variable]] = []
        self._namer = _naming.UniqueNamer()
        self._registry = CollectionRegistry()
        self._resolvers: list[Resolver] = []
        self._scope_counts: dict[str, int] = {}
        self._root = VariableScope(self, "")

    # ------------------------------------------------------------------ scopes
    def current_scope(self) -> VariableScope:
        """The innermost active scope of this store in this thread (the root scope when none)."""
        for store, scope in reversed(_frames.stack):
            if store is self:
                return scope
        return self._root

    get_variable_scope = current_scope

    @contextlib.contextmanager
    def variable_scope(self, name_or_scope: str | VariableScope | None, default_name: str | None = None,
                       reuse: Reuse = None, initializer: InitializerSpec = None,
                       dtype: npt.DTypeLike | None = None) -> Iterator[VariableScope]:
        """Opens a variable scope, as tf.compat.v1.variable_scope.

        Args:
          name_or_scope: a name (nested under the current scope; "a/b" opens
            two levels), or a VariableScope captured earlier (re-entered by its
            absolute name, with its reuse/initializer/dtype), or None to use
            `default_name`.
          default_name: used when `name_or_scope` is None, made unique among
            the scopes opened in the current parent: "conv", "conv_1", ...
          reuse: None/False inherits the parent's reuse (reuse=True cannot be
            turned off inside), True reuses (get_variable fails for missing
            names), AUTO_REUSE gets or creates. For a scope object: its own
            reuse unless `reuse` is truthy (TF's rule).
          initializer: default initializer inside (inherited by sub-scopes).
          dtype: default get_variable dtype inside (inherited).

        Yields:
          The VariableScope; `scope.reuse_variables()` turns reuse on for the rest of the block.

        Raises:
          ScopeError: neither a name nor a default name; reuse with default_name;
            a scope object of another store.
          InvalidNameError: a malformed name.
        """
        with self._lock:
            parent = self.current_scope()
            if isinstance(name_or_scope, VariableScope):
                if name_or_scope._store is not self:
                    raise ScopeError(f"scope {name_or_scope.name!r} belongs to another VariableStore")
                scope = VariableScope(self, name_or_scope.name, reuse if reuse else name_or_scope.reuse,
                                      initializer if initializer is not None else name_or_scope.initializer,
                                      dtype if dtype is not None else name_or_scope.dtype)
                saved_counts: dict[str, int] | None = dict(self._scope_counts)
            else:
                if name_or_scope is None:
                    if default_name is None:
                        raise ScopeError("variable_scope needs name_or_scope or default_name")
                    if reuse:
                        raise ScopeError(f"reuse={reuse!r} cannot be used with default_name "
                                         f"{default_name!r}; pass name_or_scope to reuse a scope")
                    _naming.validate_name(default_name, "scope name")
                    name_or_scope = self._unique_scope_name(parent.name, default_name)
                _naming.validate_name(name_or_scope, "scope name")
                scope = VariableScope(self, _naming.join(parent.name, name_or_scope),
                                      reuse or parent.reuse,  # reuse is inherited, as TF1
                                      initializer if initializer is not None else parent.initializer,
                                      dtype if dtype is not None else parent.dtype)
                saved_counts = None
            self._scope_counts[scope.name] = self._scope_counts.get(scope.name, 0) + 1
        frame = (self, scope)
        _frames.stack.append(frame)
        try:
            yield scope
        finally:
            for index in range(len(_frames.stack) - 1, -1, -1):
                if _frames.stack[index] is frame:
                    del _frames.stack[index]
                    break
            with self._lock:
                if saved_counts is not None:
                    self._scope_counts = saved_counts
                else:  # TF: closing a scope resets the default-name counters of its sub-scopes
                    prefix = scope.name + "/"
                    for key in self._scope_counts:
                        if key.startswith(prefix):
                            self._scope_counts[key] = 0

    def _unique_scope_name(self, parent: str, prefix: str) -> str:
        if self._scope_counts.get(_naming.join(parent, prefix), 0) == 0:
            return prefix
        index = 1
        while self._scope_counts.get(_naming.join(parent, f"{prefix}_{index}"), 0) > 0:
            index += 1
        return f"{prefix}_{index}"

    # -------------------------------------------------------- variable hooks
    def claim_name(self, name: str | None) -> str:
        """A unique full name for a Variable(...) in the current scope ("Variable", "Variable_1", ...).

        Part of the `VariableRegistry` protocol (`Variable.__init__` calls it).

        Raises:
          InvalidNameError: `name` is malformed.
        """
        base = "Variable" if name is None else _naming.validate_name(name)
        with self._lock:
            return self._namer.unique(_naming.join(self.current_scope().name, base))

    def track_variable(self, var: Variable, collections: Sequence[str] | str | None, trainable: bool, *,
                       weak: bool) -> None:
        """Registers a new variable (collections as TF1: default [GLOBAL_VARIABLES], plus TRAINABLE when trainable).

        Part of the `VariableRegistry` protocol. A weakly held variable (made by
        `Variable(...)`) is freed when nobody references it; a pending restore
        that knows its name fills it now.
        """
        names = [GLOBAL_VARIABLES] if collections is None else list(collections)
        if isinstance(collections, str):
            names = [collections]
        if trainable and TRAINABLE_VARIABLES not in names:
            names.append(TRAINABLE_VARIABLES)
        ownership.attach(self, var)  # bound to a rank: a variable of another rank keeps no value here
        with self._lock:
            for name in names:
                self._registry.add(name, var, weak=weak)
            if weak:
                self._weak[var.name] = var
            else:
                self._shared[var.name] = var
            self._order.append(weakref.ref(var))
            if len(self._order) > 64 and len(self._order) > 2 * (len(self._shared) + len(self._weak)):
                self._order = [r for r in self._order if r() is not None]
        if weak:
            source = self._pending_source(var.name)
            if source is not None:
                var.restore_from(source)

    def _pending_source(self, full_name: str) -> ValueSource | None:
        with self._lock:
            resolvers = list(reversed(self._resolvers))
        for resolver in resolvers:
            source = resolver(full_name)
            if source is not None:
                return source
        return None

    # ----------------------------------------------------------- get_variable
    @overload
    def get_variable(self, name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                     initializer: InitializerSpec = None, trainable: bool = True,
                     collections: Sequence[str] | None = None, device: DeviceSpec = None,
                     partitioner: None = None) -> Variable: ...

    @overload
    def get_variable(self, name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                     initializer: InitializerSpec = None, trainable: bool = True,
                     collections: Sequence[str] | None = None, device: DeviceSpec = None, *,
                     partitioner: partitioning.Partitioner) -> partitioning.PartitionedVariable: ...

    def get_variable(self, name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                     initializer: InitializerSpec = None, trainable: bool = True,
                     collections: Sequence[str] | None = None, device: DeviceSpec = None,
                     partitioner: partitioning.Partitioner | None = None
                     ) -> Variable | partitioning.PartitionedVariable:
        """Gets an existing variable or creates a new one, as tf.compat.v1.get_variable.

        The new variable is lazy: nothing is allocated until it is read,
        assigned or initialized.

        Args:
          name: name inside the current scope (full name "scope/name"); never
            made unique: sharing follows the scope's reuse mode.
          shape: tuple of ints; may be left out when `initializer` is an array
            or Variable (which gives the shape), or a pending restore knows it.
            On reuse, None dims match anything.
          dtype: default the scope's dtype, else float32 (else the initializer
            array's dtype). On reuse, checked only when given here or by the scope.
          initializer: an Initializer, any callable (shape, dtype) -> array, an
            Initializer class (instantiated), or an array/Variable/Python value
            that is the value. Default: the scope's initializer, else
            glorot_uniform for floating dtypes and zeros for ints/bools.
          trainable: also add to TRAINABLE_VARIABLES.
          collections: default [GLOBAL_VARIABLES] (TF1's rule).
          device: device name or device function for a new variable (each
            part of a partitioned variable is placed on its own).
          partitioner: e.g. vs.fixed_size_partitioner(4): returns a
            `partitioning.PartitionedVariable` of parts "NAME/part_K" instead
            (see varstore/partitioning.py; ignored for shape (), as TF).

        Returns:
          The Variable, or the PartitionedVariable when `partitioner` is given.

        Raises:
          PartitionError: partitioned and unpartitioned uses of one name, or a bad partitioning.
          VariableExistsError: the name exists and the scope does not reuse.
          VariableNotFoundError: reuse=True and the name does not exist.
          ShapeMismatchError / DtypeMismatchError: reuse with another shape or
            dtype (both named), or `shape` differs from an array initializer's.
          InitializerError: no shape can be found, or no default initializer
            exists for the dtype (complex, strings).
        """
        _naming.validate_name(name)
        scope = self.current_scope()
        full = _naming.join(scope.name, name)
        reuse = scope.reuse
        want_shape = _shape_tuple(shape, f"get_variable('{full}')")
        explicit_dtype = dtype if dtype is not None else scope.dtype
        if partitioner is not None and want_shape != ():
            with self._lock:
                return partitioning.get_partitioned_variable(
                    self, full, want_shape, explicit_dtype,
                    initializer if initializer is not None else scope.initializer,
                    partitioner, reuse, trainable, collections, device)
        with self._lock:
            if full in self._partitioned or f"{full}/part_0" in self._shared:
                raise PartitionError(
                    f"get_variable('{full}'): no partitioner was given, but a partitioned variable '{full}' "
                    f"exists (parts '{full}/part_0', ...); pass the same partitioner to share it")
            found = self._shared.get(full)
            if found is not None:
                if not reuse:
                    raise VariableExistsError(
                        f"variable '{full}' already exists; to share it, open the scope with reuse=True "
                        f"or reuse=vs.AUTO_REUSE (as tf.compat.v1.variable_scope), or choose another name")
                self._check_reuse(found, want_shape, explicit_dtype)
                return found
            if reuse is True:
                raise VariableNotFoundError(
                    f"variable '{full}' does not exist, or was not created with get_variable(); "
                    f"create it first, or open the scope with reuse=vs.AUTO_REUSE to create it when missing")
            if self._weak.get(full) is not None:
                raise VariableExistsError(
                    f"variable '{full}' already exists, created with Variable(...); get_variable can "
                    f"neither share nor rename it: choose another name")
            var = self._create(full, want_shape, explicit_dtype,
                               initializer if initializer is not None else scope.initializer,
                               trainable, collections, device)
        return var

    def _check_reuse(self, found: Variable, shape: tuple[int | None, ...] | None, dtype: npt.DTypeLike | None) -> None:
        if shape is not None and (len(shape) != len(found.shape) or
                                  any(d is not None and d != f for d, f in zip(shape, found.shape))):
            raise ShapeMismatchError(
                f"cannot reuse variable '{found.name}': get_variable asked for shape {shape}, "
                f"the existing variable has shape {found.shape}")
        if dtype is not None and dtypes.as_dtype(dtype) != found.dtype:
            raise DtypeMismatchError(
                f"cannot reuse variable '{found.name}': get_variable asked for dtype "
                f"{dtypes.dtype_name(dtype)}, the existing variable has dtype {dtypes.dtype_name(found.dtype)}")

    def _create(self, full: str, shape: tuple[int | None, ...] | None, dtype: npt.DTypeLike | None,
                init_spec: InitializerSpec, trainable: bool, collections: Sequence[str] | None,
                device: DeviceSpec) -> Variable:
        what = f"get_variable('{full}')"
        initializer: InitialValue = init_spec() if inspect.isclass(init_spec) else init_spec
        dt = None if dtype is None else dtypes.as_dtype(dtype)
        if _is_value(initializer):
            if isinstance(initializer, Variable):
                value_shape, value_dtype = initializer.shape, initializer.dtype
                if dt is not None and dt != value_dtype and not np.can_cast(value_dtype, dt, "same_kind"):
                    raise DtypeMismatchError(f"{what}: initializer variable '{initializer.name}' has dtype "
                                             f"{value_dtype.name}, which does not cast to {dt.name}")
            else:
                value = convert_value(initializer, dt, what=f"variable '{full}'")
                value_shape, value_dtype = tuple(value.shape), np.dtype(value.dtype)
                initializer = value
            if shape is not None and tuple(shape) != value_shape:
                raise ShapeMismatchError(
                    f"{what}: shape {tuple(shape)} differs from the shape {value_shape} of the value given "
                    f"as initializer; leave shape out")
            shape = tuple(value_shape)
            dt = dt if dt is not None else value_dtype
        dt = dt if dt is not None else np.dtype(np.float32)
        source = self._pending_source(full)
        if shape is None and source is not None:
            shape = tuple(int(d) for d in source.shape)
        if shape is None or any(d is None for d in shape):
            raise InitializerError(
                f"{what} needs a fully defined shape to create the variable, got {shape}; pass shape=... "
                f"or an array as initializer")
        full_shape = tuple(int(d) for d in shape if d is not None)
        if initializer is None:
            if dtypes.is_floating(dt):
                initializer = GlorotUniform()
            elif dt.kind in "biu":
                initializer = Zeros()
            elif source is None:
                raise InitializerError(f"{what}: dtype {dtypes.dtype_name(dt)} has no default initializer; "
                                       f"pass initializer=...")
        elif not (_is_value(initializer) or isinstance(initializer, Initializer) or callable(initializer)):
            raise InitializerError(f"{what}: initializer {initializer!r} is not callable")
        var = lazy_variable(full, full_shape, dt, initializer, trainable, device)
        if source is not None:
            var.restore_from(source)
        self._namer.claim(full)
        self.track_variable(var, collections, trainable, weak=False)
        return var

    # ------------------------------------------------------------ inventory
    def variables(self) -> list[Variable]:
        """Every live variable of this store (global, local, custom), in creation order."""
        with self._lock:
            refs = list(self._order)
        return [v for v in (r() for r in refs) if v is not None]

    def global_variables(self) -> list[Variable]:
        """The GLOBAL_VARIABLES collection."""
        return self.get_collection(GLOBAL_VARIABLES)

    def trainable_variables(self) -> list[Variable]:
        """The TRAINABLE_VARIABLES collection."""
        return self.get_collection(TRAINABLE_VARIABLES)

    def local_variables(self) -> list[Variable]:
        """The LOCAL_VARIABLES collection."""
        return self.get_collection(LOCAL_VARIABLES)

    def get_variable_by_name(self, full_name: str) -> Variable | None:
        """The live variable with this full name, or None."""
        with self._lock:
            found = self._shared.get(full_name)
            return found if found is not None else self._weak.get(full_name)

    # ----------------------------------------------------------- collections
    def add_to_collection(self, name: str, value: object) -> None:
        """Adds `value` to collection `name`, as tf.compat.v1.add_to_collection (once; identity).

        Variables not made by get_variable are held weakly; other values strongly.
        """
        weak = isinstance(value, Variable) and self._shared.get(value.name) is not value
        self._registry.add(name, value, weak=weak)

    def add_to_collections(self, names: Sequence[str] | str, value: object) -> None:
        """add_to_collection for each name."""
        for name in [names] if isinstance(names, str) else names:
            self.add_to_collection(name, value)

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        """A new list of collection `name`, filtered by `re.match(scope, item.name)` when `scope` is given (as TF1)."""
        return self._registry.get(name, scope)

    collection = get_collection

    def get_all_collection_keys(self) -> list[str]:
        """Names of the non-empty collections."""
        return self._registry.names()

    def clear_collection(self, name: str) -> None:
        """Empties collection `name` (variables stay alive when referenced elsewhere)."""
        self._registry.clear(name)

    # ------------------------------------------------------------ initialize
    def initialize(self, var_list: Sequence[Variable] | None = None, comm: ownership.RankInfo | None = None) -> None:
        """Materializes every variable of the store (or `var_list`) in creation order, as global_variables_initializer.

        Initialized variables are left as they are; initializers that read
        other variables run those first.

        Args:
          var_list: the variables to initialize; default every variable.
          comm: a communicator (mpi4py or varstore.distributed): binds the
            store to this rank (`ownership.bind`) and initializes only what
            the rank holds: variables on "/job:*/task:<rank>" and replicated ones.

        Raises:
          InitializationCycleError: initializers read each other in a cycle.
          DeviceError: with `comm`, a variable names a task K >= comm.size.
        """
        if comm is not None:
            ownership.bind(self, comm)
        for var in self.variables() if var_list is None else var_list:
            if var.is_owned:
                var.initialize()

    def report_uninitialized(self, var_list: Sequence[Variable] | None = None) -> list[str]:
        """Names of the variables not yet materialized, in creation order (tf.compat.v1.report_uninitialized_variables).

        Once the store is bound to a communicator (`initialize(comm=)`), only
        variables this rank holds count (others never materialize here).
        """
        return [v.name for v in (self.variables() if var_list is None else var_list)
                if not v.is_initialized and v.is_owned]

    # -------------------------------------------------------- pending restore
    def add_pending_restore(self, resolver: Resolver) -> None:
        """For each variable created in this store from now on, `resolver(full_name)` may return a ValueSource to restore it from.

        Resolvers are asked newest first; the first source wins and the
        initializer never runs for that variable.
        """
        with self._lock:
            self._resolvers.append(resolver)

    def remove_pending_restore(self, resolver: Resolver) -> None:
        """Stops consulting `resolver` (no error when it was not added)."""
        with self._lock:
            for index in range(len(self._resolvers) - 1, -1, -1):
                if self._resolvers[index] is resolver:
                    del self._resolvers[index]
                    break

    def __repr__(self) -> str:
        return f"<VariableStore with {len(self.variables())} variables>"


# ----------------------------------------------------------- default store
_default_store = VariableStore()
_default_lock = threading.Lock()


def get_default_store() -> VariableStore:
    """The store of the innermost active variable_scope in this thread, else the process-wide default store."""
    if _frames.stack:
        return _frames.stack[-1][0]
    return _default_store


def reset_default_store() -> VariableStore:
    """Replaces the process-wide default store with an empty one (tf.compat.v1.reset_default_graph) and returns it."""
    global _default_store
    with _default_lock:
        _default_store = VariableStore()
        return _default_store


variables.set_default_registry(get_default_store)


def variable_scope(name_or_scope: str | VariableScope | None, default_name: str | None = None,
                   reuse: Reuse = None, initializer: InitializerSpec = None,
                   dtype: npt.DTypeLike | None = None) -> contextlib.AbstractContextManager[VariableScope]:
    """`VariableStore.variable_scope` on the default store (a scope object re-enters its own store)."""
    store = name_or_scope._store if isinstance(name_or_scope, VariableScope) else get_default_store()
    return store.variable_scope(name_or_scope, default_name, reuse, initializer, dtype)


def get_variable_scope() -> VariableScope:
    """The current scope of the default store."""
    return get_default_store().current_scope()


@overload
def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool = True,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 partitioner: None = None) -> Variable: ...


@overload
def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool = True,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None, *,
                 partitioner: partitioning.Partitioner) -> partitioning.PartitionedVariable: ...


def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool = True,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 partitioner: partitioning.Partitioner | None = None) -> Variable | partitioning.PartitionedVariable:
    """`VariableStore.get_variable` on the default store."""
    store = get_default_store()
    if partitioner is None:
        return store.get_variable(name, shape, dtype, initializer, trainable, collections, device)
    return store.get_variable(name, shape, dtype, initializer, trainable, collections, device,
                              partitioner=partitioner)


def get_collection(name: str, scope: str | None = None) -> list[Any]:
    """`VariableStore.get_collection` on the default store."""
    return get_default_store().get_collection(name, scope)


def add_to_collection(name: str, value: object) -> None:
    """`VariableStore.add_to_collection` on the default store."""
    get_default_store().add_to_collection(name, value)


def global_variables() -> list[Variable]:
    """GLOBAL_VARIABLES of the default store."""
    return get_default_store().global_variables()


def trainable_variables() -> list[Variable]:
    """TRAINABLE_VARIABLES of the default store."""
    return get_default_store().trainable_variables()


def local_variables() -> list[Variable]:
    """LOCAL_VARIABLES of the default store."""
    return get_default_store().local_variables()


def initialize(var_list: Sequence[Variable] | None = None, comm: ownership.RankInfo | None = None) -> None:
    """`VariableStore.initialize` on the default store."""
    get_default_store().initialize(var_list, comm)


def report_uninitialized(var_list: Sequence[Variable] | None = None) -> list[str]:
    """`VariableStore.report_uninitialized` on the default store."""
    return get_default_store().report_uninitialized(var_list)

"""Variable: a named, mutable array with a fixed shape and dtype, a device and a lazy value.

Holds the value (NumPy on the host, CuPy on a GPU, through `devices`), runs
the initializer on first use, checks every assign, and restores from a
`ValueSource` (the hook the checkpoint layer implements). Naming rules,
scopes and collections belong to the store: a Variable asks the
`VariableRegistry` it is given (or the default one, which `scopes.py`
installs with `set_default_registry`) for a name and registers there.
Never does file I/O, never imports the checkpoint layer or `scopes.py`.
"""

from __future__ import annotations

import reprlib
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, Union, runtime_checkable

import numpy as np
import numpy.typing as npt

from varstore import devices, dtypes, ownership, placement
from varstore._array_interop import ArrayInterop
from varstore.errors import (
    DtypeMismatchError,
    InitializationCycleError,
    InitializerError,
    ScopeError,
    ShapeMismatchError,
    UnsupportedDtypeError,
)
from varstore.initializers import Initializer, InitializerFunction
from varstore.placement import DeviceSpec

__all__ = [
    "Variable",
    "ValueSource",
    "VariableRegistry",
    "InitialValue",
    "check_restorable",
    "convert_value",
    "default_registry",
    "host_views",
    "lazy_variable",
    "restore_many",
    "set_default_registry",
]


@runtime_checkable
class ValueSource(Protocol):
    """Where a variable's value comes from instead of its initializer (e.g. one checkpoint entry).

    Attributes:
      origin: for error messages, e.g. "'conv1/w' in 'ckpt/model.h5'".
      shape: the stored shape.
      dtype: the stored (logical) NumPy dtype.
    """

    @property
    def origin(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (host, C-contiguous, the variable's shape and dtype), casting from `dtype`."""


class VariableRegistry(Protocol):
    """The store a Variable joins: it names the variable, then registers it (implemented by `VariableStore`).

    Passed as `Variable(..., store=...)`, or found through
    `default_registry()`; `VariableStore.get_variable` makes its lazy
    variables with `lazy_variable` and registers them itself. The protocol is the whole contract between
    a variable and its store; the variable never sees scopes or collections.
    """

    def claim_name(self, name: str | None) -> str:
        """A unique full name for a new variable called `name` ("Variable" when None) in the current scope.

        Raises:
          InvalidNameError: `name` is malformed.
        """

    def track_variable(self, variable: Variable, collections: Sequence[str] | str | None, trainable: bool,
                       *, weak: bool) -> None:
        """Registers a new variable in `collections` (TF1 defaults), held weakly when `weak`.

        May hand the variable a pending restore (`variable.restore_from`).
        """


#: What a variable's value may be made from: an initializer (an `Initializer`,
#: or any callable `(shape, dtype) -> array`), another Variable, or the value
#: itself (array, Python scalar or list); None means "assign or restore first".
InitialValue = Union["Variable", Initializer, InitializerFunction, npt.ArrayLike, None]


# ---------------------------------------------------------------- helpers
_materialize_lock = threading.RLock()


class _InitStack(threading.local):
    def __init__(self) -> None:
        self.variables: list[Variable] = []


_init_stack = _InitStack()

_registry_provider: Callable[[], VariableRegistry] | None = None


def set_default_registry(provider: Callable[[], VariableRegistry]) -> None:
    """Installs the function that gives the registry a `Variable(...)` without `store=` joins.

    `varstore.scopes` installs `get_default_store` (the store of the active
    variable_scope, else the process-wide one) when it is imported, which
    `import varstore` does.
    """
    global _registry_provider
    _registry_provider = provider


def default_registry() -> VariableRegistry:
    """The registry new variables join when no `store=` is given.

    Raises:
      ScopeError: no provider was installed with `set_default_registry`.
    """
    if _registry_provider is None:
        raise ScopeError("no default VariableStore is installed: import varstore (varstore.scopes installs "
                         "it), or pass store=... to Variable")
    return _registry_provider()


def _kind(dtype: np.dtype) -> str:
    return "f" if dtypes.is_floating(dtype) else dtype.kind


_KIND_NAMES = {"b": "bool", "i": "integer", "u": "integer", "f": "floating-point", "c": "complex",
               "U": "string", "S": "bytes"}

# Python values may become any dtype of these kinds (NumPy's weak-scalar rule, NEP 50).
_PYTHON_TARGET_KINDS = {"b": "biufc", "i": "iufc", "u": "iufc", "f": "fc", "c": "c", "U": "US", "S": "S"}


def _python_value(value: Any) -> bool:
    return isinstance(value, (bool, int, float, complex, str, bytes, list, tuple))


def _tf_dtype(value: Any, inferred: np.dtype) -> np.dtype:
    """TF's dtype for a Python value: float -> float32, int -> int32 (int64 when out of range), complex -> complex128, bool -> bool."""
    kind = inferred.kind
    if kind == "f":
        return np.dtype(np.float32)
    if kind in "iu":
        arr = np.asarray(value)
        if arr.size == 0 or (arr.min() >= np.iinfo(np.int32).min and arr.max() <= np.iinfo(np.int32).max):
            return np.dtype(np.int32)
        if arr.max() <= np.iinfo(np.int64).max:
            return np.dtype(np.int64)
        raise DtypeMismatchError(f"integer value {value!r} does not fit int64")
    if kind == "c":
        return np.dtype(np.complex128)
    return inferred


def convert_value(value: Any, dtype: npt.DTypeLike | None = None, *, what: str = "a variable") -> Any:
    """Turns a Python value, NumPy/CuPy array or Variable into an array (not copied when already one).

    Python scalars and lists follow TF's convention (float -> float32, int ->
    int32, complex -> complex128, bool -> bool); arrays keep their dtype.

    Args:
      value: the value.
      dtype: requested dtype; the value must cast to it by NumPy's "same_kind" rule.
      what: how to name the target in errors.

    Raises:
      DtypeMismatchError: the value cannot be cast to `dtype`, or a Python int overflows it.
      UnsupportedDtypeError: object / ragged values.
    """
    target = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(value, Variable):
        arr = value._materialize()
    elif isinstance(value, np.ndarray) or devices.is_device_array(value) or isinstance(value, np.generic):
        arr = value if not isinstance(value, np.generic) else np.asarray(value)
    elif _python_value(value):
        try:
            inferred = np.asarray(value)
        except ValueError as err:
            raise UnsupportedDtypeError(f"cannot make {what} from a ragged value {value!r}") from err
        if inferred.dtype.kind == "O":
            raise UnsupportedDtypeError(f"cannot make {what} from {value!r}: it is not a numeric or string array")
        natural = _tf_dtype(value, inferred.dtype)
        if target is None:
            target = natural
        elif _kind(target) not in _PYTHON_TARGET_KINDS.get(inferred.dtype.kind, inferred.dtype.kind):
            raise DtypeMismatchError(
                f"cannot convert {reprlib.repr(value)} to {target.name} for {what}: "
                f"{_KIND_NAMES.get(inferred.dtype.kind, inferred.dtype.name)} values do not cast to "
                f"{target.name} under NumPy's 'same_kind' rule")
        try:
            return np.asarray(value, dtype=target)
        except OverflowError as err:
            raise DtypeMismatchError(
                f"cannot convert {reprlib.repr(value)} to {target.name} for {what}: the value overflows "
                f"{target.name}") from err
    else:
        arr = np.asarray(value)  # objects with __array__ (torch, jax, ...)
    dtypes.as_dtype(arr.dtype)  # rejects object / structured dtypes
    if target is not None and arr.dtype != target:
        if not np.can_cast(arr.dtype, target, "same_kind"):
            raise DtypeMismatchError(
                f"cannot convert a {arr.dtype.name} array to {target.name} for {what}: "
                f"NumPy's 'same_kind' rule forbids the cast")
        arr = arr.astype(target)
    return arr


def check_restorable(variable: Variable, source: ValueSource) -> None:
    """Checks that `source` can restore `variable`, changing nothing.

    Shapes must be equal; the dtype equal or castable by NumPy's "same_kind"
    rule (this covers bfloat16 / float8 through ml_dtypes' casts).

    Raises:
      ShapeMismatchError: naming the variable, `source.origin` and both shapes.
      DtypeMismatchError: naming the variable, `source.origin` and both dtypes.
    """
    shape = tuple(int(d) for d in source.shape)
    if shape != variable.shape:
        raise ShapeMismatchError(
            f"cannot restore variable '{variable.name}' from {source.origin}: the source has shape "
            f"{shape}, the variable was created with {variable.shape}")
    stored = np.dtype(source.dtype)
    if stored != variable.dtype and not np.can_cast(stored, variable.dtype, "same_kind"):
        raise DtypeMismatchError(
            f"cannot restore variable '{variable.name}' from {source.origin}: the source has dtype "
            f"{dtypes.dtype_name(stored)}, the variable has {dtypes.dtype_name(variable.dtype)}, and "
            f"a 'same_kind' cast between them is not possible")


def _choose_device(name: str, shape: tuple[int, ...], dtype: np.dtype, device: DeviceSpec) -> tuple[str, str | None]:
    """(device label, task) for a new variable: explicit `device` (name or function), else the device(...) contexts, else the default.

    The task is the "/job:NAME/task:K" part of the request (None when there is none).
    """
    request = placement.PlacementRequest(name, shape, dtype, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    if device is None:
        requested = placement.requested_device(request)
    elif callable(device):
        requested = device(request)
    else:
        requested = device
    task, requested = placement.split_task(requested) if requested is not None else (None, None)
    label = devices.place(requested, dtype, what=f"variable '{name}'")
    devices.log_placement(name, label if task is None else f"{task}/{label}")
    return label, task


class Variable(ArrayInterop):
    """A named array with a fixed shape and dtype that changes only through assign, as tf.Variable.

    Acts like a read-only NumPy array (functions, ufuncs, operators, indexing
    return new arrays) and exports its buffer through DLPack.

    Args:
      initial_value: a Python scalar or (nested) list, a NumPy/CuPy array,
        another Variable (copied, no shared memory), or a zero-argument
        callable returning one of those. Python floats become float32, ints
        int32, complex complex128, bools bool (TF's convention); arrays keep
        their dtype.
      trainable: add to TRAINABLE_VARIABLES (unless `collections` already lists it).
      name: the name within the current variable scope; "Variable" by default.
        Names are made unique as in a TF1 graph ("Mark", "Mark_1", ...).
      dtype: cast the value to this dtype ("same_kind" casts only).
      collections: collection names, default [GLOBAL_VARIABLES]; TF1 semantics.
      device: device name ("cpu:0", "gpu:0") or a device function; default:
        the active `device(...)` contexts, else the fastest device for the dtype.
      store: the VariableStore to register with; default: the store whose
        scope is active, else the default store. The store holds the variable
        weakly (it is freed when nobody references it).

    Raises:
      DtypeMismatchError, UnsupportedDtypeError: as `convert_value`.
      InvalidNameError: the name is malformed. DeviceError: see `devices.place`.
    """

    _collection_names: list[str]
    _buffer: Any  # NumPy or CuPy array, None until materialized
    _view: Any  # cached read-only view of _buffer (host_view), valid while _view_of is _buffer
    _view_of: Any
    _task: str | None  # "/job:NAME/task:K" or None
    _binding: ownership.Binding  # the rank binding of the store the variable joined
    _save_slice_info: Any  # partitioning.SaveSliceInfo of a part, else None

    def __init__(self, initial_value: npt.ArrayLike | Variable | Callable[[], npt.ArrayLike | Variable],
                 trainable: bool = True, name: str | None = None, dtype: npt.DTypeLike | None = None, *,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 store: VariableRegistry | None = None) -> None:
        if callable(initial_value) and not isinstance(initial_value, Variable):
            initial_value = initial_value()
        registry = store if store is not None else default_registry()
        full_name = registry.claim_name(name)
        value = convert_value(initial_value, dtype, what=f"variable '{full_name}'")
        shape = tuple(int(d) for d in value.shape)
        self._setup(full_name, shape, np.dtype(value.dtype), trainable, None)
        self._device, self._task = _choose_device(full_name, shape, self._dtype, device)
        self._buffer = devices.to_device(value, self._device, copy=True)
        registry.track_variable(self, collections, trainable, weak=True)  # a store bound to a rank drops others' values

    def _setup(self, name: str, shape: tuple[int, ...], dtype: np.dtype, trainable: bool,
               initializer: InitialValue) -> None:
        self._name = name
        self._shape = shape
        self._dtype = dtypes.as_dtype(dtype)
        self._trainable = bool(trainable)
        self._initializer = initializer
        self._source: ValueSource | None = None
        self._buffer = None
        self._view = None
        self._view_of = None
        self._device = "cpu:0"
        self._task = None
        self._binding = ownership.UNBOUND
        self._save_slice_info = None
        self._collection_names = []

    # ------------------------------------------------------------ attributes
    @property
    def name(self) -> str:
        """Full name, e.g. "conv1/weights" (no ":0" suffix)."""
        return self._name

    @property
    def shape(self) -> tuple[int, ...]:
        """The fixed shape, a tuple of ints."""
        return self._shape

    @shape.setter
    def shape(self, value: Any) -> None:
        self.reshape(value)  # raises ReshapeError

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype."""
        return self._dtype

    @property
    def device(self) -> str:
        """Device label: "cpu:0", "gpu:N", or a host placement label such as "cpu:1"."""
        return self._device

    @property
    def task(self) -> str | None:
        """The task the variable was placed on ("/job:ps/task:1"), or None (replicated under a communicator)."""
        return self._task

    @property
    def owner_rank(self) -> int | None:
        """The rank that owns the variable under a communicator (K of "/job:*/task:K"); None when replicated."""
        return placement.task_index(self._task)

    @property
    def is_owned(self) -> bool:
        """Whether this process holds the value: always, unless its store is bound to a rank (varstore.ownership)."""
        return self._binding.holds(self._task)

    @property
    def save_slice_info(self) -> Any:
        """For a part of a partitioned variable: its `partitioning.SaveSliceInfo` (full name, full shape, offset, shape); else None."""
        return self._save_slice_info

    @property
    def trainable(self) -> bool:
        """Whether the variable is meant to be trained."""
        return self._trainable

    @property
    def collections(self) -> tuple[str, ...]:
        """Names of the store's collections that hold this variable, in the order it was added."""
        return tuple(self._collection_names)

    @property
    def is_initialized(self) -> bool:
        """True once the value is allocated and filled (initializer run, value assigned or restored)."""
        return self._buffer is not None and self._source is None

    @property
    def is_allocated(self) -> bool:
        """True once the variable has memory for its value (it may still wait for a pending restore)."""
        return self._buffer is not None

    @property
    def is_restore_pending(self) -> bool:
        """True while a ValueSource waits to fill this variable on first use."""
        return self._source is not None

    # ---------------------------------------------------------- materialize
    def _materialize(self) -> Any:
        """Returns the live buffer, running the initializer or the pending restore first if needed."""
        if self._buffer is not None and self._source is None:
            return self._buffer
        with _materialize_lock:
            if self._buffer is not None and self._source is None:
                return self._buffer
            if self._task is not None:
                ownership.check_holds(self, "read")
            stack = _init_stack.variables
            for index, other in enumerate(stack):
                if other is self:
                    cycle = " -> ".join([v._name for v in stack[index:]] + [self._name])
                    raise InitializationCycleError(
                        f"initializers read each other's values in a cycle: {cycle}; "
                        f"give one of them an initializer that does not read the others")
            stack.append(self)
            try:
                if self._source is not None:
                    self._fill_from(self._source)
                    self._source = None
                else:
                    self._run_initializer()
            finally:
                stack.pop()
            return self._buffer

    def _run_initializer(self) -> None:
        init = self._initializer
        what = f"variable '{self._name}'"
        value: Any
        if isinstance(init, Variable):
            value = init._materialize()
        elif isinstance(init, Initializer):
            value = init(self._shape, self._dtype, name=self._name)
        elif callable(init):
            value = init(self._shape, self._dtype)
        elif init is None:
            raise InitializerError(f"{what} has no initializer and no value; assign or restore it first")
        else:
            value = init
        if isinstance(value, Variable):
            value = value._materialize()
        if not (isinstance(value, np.ndarray) or devices.is_device_array(value)):
            value = np.asarray(value)
        if tuple(value.shape) != self._shape:
            raise ShapeMismatchError(
                f"the initializer of {what} returned shape {tuple(value.shape)}, "
                f"the variable was created with shape {self._shape}")
        if (type(value) is np.ndarray and value.dtype == self._dtype and value.flags.c_contiguous
                and value.flags.owndata and value.flags.writeable and value.flags.aligned
                and not devices.is_gpu(self._device) and sys.getrefcount(value) <= 2):
            # A fresh host array nobody else references (refcount: this frame only): adopt it as the
            # buffer instead of copying, so materializing never holds two copies of a variable (the
            # freed temporaries stayed in the malloc heap: ~100 MiB of RSS for a 1.2 GB model).
            self._buffer = value
            return
        buffer = devices.empty(self._shape, self._dtype, self._device)
        try:
            devices.copy_into(buffer, value)
        except TypeError as err:
            raise DtypeMismatchError(
                f"the initializer of {what} returned dtype {value.dtype}, which does not cast "
                f"('same_kind') to the variable's dtype {self._dtype.name}") from err
        self._buffer = buffer

    def _fill_from(self, source: ValueSource) -> None:
        """Fills the buffer from `source` (in place when allocated on the host)."""
        if self._buffer is not None and not devices.is_device_array(self._buffer):
            source.read_into(self._buffer)
            return
        host = np.empty(self._shape, dtype=self._dtype)
        source.read_into(host)
        if self._buffer is not None:
            devices.copy_into(self._buffer, host)
        else:
            self._buffer = devices.to_device(host, self._device)

    def initialize(self) -> Variable:
        """Materializes the value now (initializer or pending restore), as running tf's v.initializer once.

        Never re-runs the initializer of an initialized variable.

        Returns:
          This variable.

        Raises:
          InitializationCycleError: initializers read each other in a cycle (the message names it).
        """
        self._materialize()
        return self

    def initialized_value(self) -> Any:
        """The value after initialization (initializing first if needed), as a copy, as tf.Variable.initialized_value.

        Initializers of other variables may call this; the order resolves itself.
        """
        return self.read_value()

    # ----------------------------------------------------------------- read
    def read_value(self) -> Any:
        """A copy of the current value on the variable's device (NumPy array on the host, CuPy on a GPU)."""
        return self._materialize().copy()

    def value(self) -> Any:
        """Same as read_value (tf.Variable.value)."""
        return self.read_value()

    def numpy(self) -> npt.NDArray[Any]:
        """A new host NumPy array with the current value."""
        buf = self._materialize()
        if devices.is_device_array(buf):
            return devices.to_host(buf)
        copied: npt.NDArray[Any] = buf.copy()
        return copied

    def host_view(self) -> npt.NDArray[Any]:
        """The value on the host without a copy for CPU variables (read-only view of the live buffer); a host copy for GPU ones.

        Materializes first. Used by save, which must not double memory.
        """
        buf = self._buffer
        if buf is None or self._source is not None:
            buf = self._materialize()
        if self._view_of is buf:
            cached: npt.NDArray[Any] = self._view
            return cached
        if type(buf) is not np.ndarray and devices.is_device_array(buf):
            return devices.to_host(buf)
        view: npt.NDArray[Any] = buf.view()
        view.flags.writeable = False
        self._view, self._view_of = view, buf  # the same buffer for life: the view stays valid
        return view

    # --------------------------------------------------------------- assign
    def _convert_operand(self, value: Any, op: str) -> Any:
        what = f"{op} to variable '{self._name}'" if op == "assign" else f"{op} on variable '{self._name}'"
        if _python_value(value):
            return convert_value(value, self._dtype, what=what)
        if isinstance(value, Variable):
            arr = value._materialize()
        elif isinstance(value, np.ndarray) or devices.is_device_array(value):
            arr = value
        else:
            arr = np.asarray(value)
        if arr.dtype != self._dtype and not np.can_cast(arr.dtype, self._dtype, "same_kind"):
            raise DtypeMismatchError(
                f"cannot {what}: the value has dtype {arr.dtype.name}, the variable has "
                f"{self._dtype.name}, and NumPy's 'same_kind' rule forbids the cast")
        return arr

    def assign(self, value: Any) -> Variable:
        """Overwrites the value in place (same buffer), as tf.Variable.assign.

        An uninitialized variable is allocated and filled without running its
        initializer (a pending restore is dropped).

        Args:
          value: array-like of exactly `self.shape`; Python values are
            converted to `self.dtype` when NumPy would ('same_kind', no overflow),
            arrays must satisfy np.can_cast(value.dtype, self.dtype, "same_kind").

        Returns:
          This variable.

        Raises:
          ShapeMismatchError: the value's shape differs (names the variable and both shapes).
          DtypeMismatchError: the cast is not 'same_kind', or a Python int overflows.
        """
        arr = self._convert_operand(value, "assign")
        if tuple(arr.shape) != self._shape:
            raise ShapeMismatchError(
                f"cannot assign a value of shape {tuple(arr.shape)} to variable '{self._name}' of "
                f"shape {self._shape}: assign needs exactly the variable's shape")
        if self._task is not None:
            ownership.check_holds(self, "assign to")
        with _materialize_lock:
            if self._buffer is None:
                self._buffer = devices.empty(self._shape, self._dtype, self._device)
            self._source = None
            devices.copy_into(self._buffer, arr)
        return self

    def _update(self, delta: Any, ufunc: np.ufunc, op: str) -> Variable:
        arr = self._convert_operand(delta, op)
        try:
            shape = np.broadcast_shapes(tuple(arr.shape), self._shape)
        except ValueError:
            shape = None
        if shape != self._shape:
            raise ShapeMismatchError(
                f"cannot {op} a value of shape {tuple(arr.shape)} to variable '{self._name}' of "
                f"shape {self._shape}: the value must broadcast to the variable's shape")
        buf = self._materialize()
        label = devices.device_of_array(buf)
        function = devices.function_for(ufunc, label)
        function(buf, devices.to_device(arr, label), out=buf, casting="same_kind")
        return self

    def assign_add(self, delta: Any) -> Variable:
        """Adds `delta` in place, as tf.Variable.assign_add.

        Args:
          delta: array-like broadcastable to `self.shape` (a scalar works);
            cast as in `assign`.

        Returns:
          This variable.

        Raises:
          ShapeMismatchError: `delta` does not broadcast to `self.shape`.
          DtypeMismatchError: `delta` cannot be cast ('same_kind') to `self.dtype`.
        """
        return self._update(delta, np.add, "assign_add")

    def assign_sub(self, delta: Any) -> Variable:
        """Subtracts `delta` in place, as tf.Variable.assign_sub (same rules as assign_add).

        Returns:
          This variable.

        Raises:
          ShapeMismatchError, DtypeMismatchError: as assign_add.
        """
        return self._update(delta, np.subtract, "assign_sub")

    # -------------------------------------------------------------- restore
    def restore_from(self, source: ValueSource, lazy: bool = False) -> None:
        """Takes the value from `source` instead of the initializer (the checkpoint layer's hook).

        Args:
          source: a ValueSource of the same shape and a castable dtype.
          lazy: defer reading to first use. Without it, an allocated variable
            is refilled at once in its existing buffer (same data pointer); an
            unallocated one always defers. The initializer never runs for a
            variable restored before its first use.

        Raises:
          ShapeMismatchError, DtypeMismatchError: as `check_restorable` (nothing changes).
        """
        check_restorable(self, source)
        with _materialize_lock:
            if self._buffer is not None and not lazy:
                self._fill_from(source)
                self._source = None
            else:
                self._source = source

    # ---------------------------------------------------------------- misc
    def __repr__(self) -> str:
        if self.is_initialized:
            value = np.array2string(devices.to_host(self._buffer), separator=", ", threshold=20)
            value = f", numpy={value}"
        else:
            value = ", <not initialized>"
        return (f"<varstore.Variable '{self._name}' shape={self._shape} dtype={dtypes.dtype_name(self._dtype)} "
                f"device={self._device}{value}>")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"variable '{self._name}' cannot be pickled; save it in a checkpoint instead")


def lazy_variable(full_name: str, shape: tuple[int, ...], dtype: np.dtype, initializer: InitialValue,
                  trainable: bool, device: DeviceSpec) -> Variable:
    """A variable that allocates nothing until first use, as get_variable makes them.

    The name is used as given (the caller's registry already claimed it) and
    the variable is NOT tracked: the caller registers it (`track_variable`).

    Args:
      full_name: the full, already unique name.
      shape: the fixed shape.
      dtype: the fixed dtype.
      initializer: what the first read runs (see `InitialValue`).
      trainable: whether the variable is meant to be trained.
      device: device name or device function (default: the device contexts).

    Raises:
      DeviceError: see `devices.place`.
    """
    variable = Variable.__new__(Variable)
    variable._setup(full_name, shape, dtype, trainable, initializer)
    variable._device, variable._task = _choose_device(full_name, shape, variable._dtype, device)
    return variable


# ------------------------------------------------------------------ batches
def host_views(variables: Sequence[Variable], read_only: bool = True) -> list[npt.NDArray[Any]]:
    """`[v.host_view() for v in variables]`, at a fraction of a microsecond per materialized CPU variable.

    Used by save for many small variables (50,000 of 64 floats): views of
    the live buffers, no copy; GPU variables give host copies; variables not
    yet materialized run their initializer or pending restore first, as
    host_view does.

    Args:
      variables: the variables.
      read_only: False returns CPU variables' live buffers themselves (no
        view object is made); only for callers that neither write into them
        nor keep them (the checkpoint writer).
    """
    out: list[npt.NDArray[Any]] = []
    append = out.append
    for variable in variables:
        buf = variable._buffer
        if variable._source is None and buf is not None:
            if variable._view_of is buf:
                append(variable._view)
                continue
            if not read_only and type(buf) is np.ndarray:
                append(buf)
                continue
        append(variable.host_view())
    return out


def restore_many(variables: Sequence[Variable], values: Sequence[Any], adopt: bool = False) -> None:
    """Fills many variables from host arrays in one validated pass, as `restore_from` each.

    Every shape and dtype is checked before any variable changes, so a
    failure changes nothing. Each value is COPIED into the variable's own
    buffer (in place, same data pointer, for allocated CPU variables; a new
    buffer on the variable's device otherwise), so `values` may be views into
    one large blob (a checkpoint's packed variables) that the caller frees
    afterwards: no variable keeps the blob alive. Pending restores are
    dropped and initializers never run. Costs well under a microsecond per
    small variable beyond the copy.

    Args:
      variables: the targets.
      values: host NumPy arrays, `values[i]` of `variables[i].shape` and a
        dtype that casts to `variables[i].dtype` by NumPy's "same_kind" rule.
      adopt: the caller hands over fresh arrays it keeps no reference to (a
        restore's reads): a CPU variable without memory takes a C-contiguous
        array of its dtype that owns its data as its buffer, without a copy.

    Raises:
      ValueError: the two sequences differ in length.
      ShapeMismatchError, DtypeMismatchError: naming the first bad variable (nothing changes).
    """
    if len(variables) != len(values):
        raise ValueError(f"restore_many got {len(variables)} variables and {len(values)} values")
    for variable, value in zip(variables, values):
        if value.shape != variable._shape or value.dtype != variable._dtype:
            _check_value(variable, value)
    with _materialize_lock:
        for variable, value in zip(variables, values):
            buf = variable._buffer
            if (adopt and buf is None and type(value) is np.ndarray and value.dtype == variable._dtype
                    and value.flags.owndata and value.flags.c_contiguous and value.flags.writeable
                    and not devices.is_gpu(variable._device)):
                variable._buffer = value
            elif type(buf) is np.ndarray:
                if value.dtype == buf.dtype:
                    buf[...] = value
                else:
                    np.copyto(buf, value, casting="same_kind")
            else:
                host = np.empty(variable._shape, dtype=variable._dtype)
                np.copyto(host, value, casting="same_kind")
                if buf is not None:
                    devices.copy_into(buf, host)
                else:
                    variable._buffer = devices.to_device(host, variable._device)
            variable._source = None


class _ArraySource:
    """A host array seen as a ValueSource, for check_restorable's messages."""

    def __init__(self, value: npt.NDArray[Any]) -> None:
        self.origin = "a host array"
        self.shape = tuple(int(d) for d in value.shape)
        self.dtype = value.dtype
        self._value = value

    def read_into(self, out: npt.NDArray[Any]) -> None:
        np.copyto(out, self._value, casting="same_kind")


def _check_value(variable: Variable, value: Any) -> None:
    if not isinstance(value, np.ndarray):
        raise DtypeMismatchError(
            f"cannot restore variable '{variable.name}': expected a NumPy array, got {type(value).__name__}")
    check_restorable(variable, _ArraySource(value))

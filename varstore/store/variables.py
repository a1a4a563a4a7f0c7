"""Variable: a named, mutable array with a fixed shape and dtype, a device and a lazy value.

Holds the value (NumPy on the host, CuPy on a GPU, through `devices`), runs
the initializer on first use and restores from a `ValueSource`. What it
delegates: value conversion (`values.py`), in-place updates
(`_assignment.py`), the restore rule (`value_sources.py`), the checkpoint
engine's batch hooks (`variable_batches.py`). Naming rules, scopes and
collections belong to the store: a Variable asks the `VariableRegistry` it
is given (or the default one, which `default_store.py` installs with
`set_default_registry`) for a name and registers there.
Never does file I/O, never imports the checkpoint layer or `scopes.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, Union

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.store import device_transfers, devices, host_arrays, ownership, placement
from varstore.store._array_interop import ArrayInterop
from varstore.store._assignment import Assignable
from varstore.errors import DtypeMismatchError, InitializationCycleError, InitializerError, ScopeError, ShapeMismatchError
from varstore.initializers import Initializer, InitializerFunction
from varstore.store.placement import DeviceSpec
from varstore.store.variable_options import Constraint, VariableAggregation, VariableOptions, VariableSynchronization, resolve_options

# Re-exported for the checkpoint engine (checkpoint/write/writer.py, checkpoint/read/restoration.py import these names from
# here; they live in value_sources.py, values.py and variable_batches.py). New code imports them from there.
from varstore.store._variable_state import VariableState
from varstore.store.value_sources import ValueSource, check_restorable
from varstore.store.values import convert_value
from varstore.store.variable_batches import MATERIALIZE_LOCK, host_views, restore_many

__all__ = [
    "Variable",
    "VariableRegistry",
    "InitialValue",
    "default_registry",
    "lazy_variable",
    "set_default_registry",
    # re-exports (see above)
    "ValueSource",
    "check_restorable",
    "convert_value",
    "host_views",
    "restore_many",
]


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
_materialize_lock = MATERIALIZE_LOCK  # shared with the batch hooks


class _InitStack(threading.local):
    def __init__(self) -> None:
        self.variables: list[Variable] = []


_init_stack = _InitStack()

_registry_provider: Callable[[], VariableRegistry] | None = None


def set_default_registry(provider: Callable[[], VariableRegistry]) -> None:
    """Installs the function that gives the registry a `Variable(...)` without `store=` joins.

    `varstore.default_store` installs `get_default_store` (the store of the active
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
        raise ScopeError("no default VariableStore is installed: import varstore (varstore.default_store installs "
                         "it), or pass store=... to Variable")
    return _registry_provider()


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


class Variable(Assignable, ArrayInterop, VariableOptions):
    """A named array with a fixed shape and dtype that changes only through assign, as tf.Variable.

    Acts like a read-only NumPy array (functions, ufuncs, operators, indexing
    return new arrays) and exports its buffer through DLPack.

    Args:
      initial_value: a Python scalar or (nested) list, a NumPy/CuPy array,
        another Variable (copied, no shared memory), or a zero-argument
        callable returning one of those. Python floats become float32, ints
        int32, complex complex128, bools bool (TF's convention); arrays keep
        their dtype.
      trainable: add to TRAINABLE_VARIABLES; None (TF's default): True, unless `synchronization` is ON_READ.
      name: the name within the current variable scope; "Variable" by default.
        Names are made unique as in a TF1 graph ("Mark", "Mark_1", ...).
      dtype: cast the value to this dtype ("same_kind" casts only).
      collections: collection names, default [GLOBAL_VARIABLES]; TF1 semantics.
      device: device name ("cpu:0", "gpu:0") or a device function; default:
        the active `device(...)` contexts, else the fastest device for the dtype.
      store: the VariableStore to register with; default: the store whose
        scope is active, else the default store. The store holds the variable
        weakly (it is freed when nobody references it).
      constraint: a projection `array -> array` (same shape) applied after every assign (as TF's
        optimizers apply it after each update; see variable_options.py), never to initial or restored values.
      synchronization, aggregation: VariableSynchronization / VariableAggregation (None: AUTO / NONE), stored only.
      use_resource: accepted and ignored (every varstore variable behaves as TF's resource variables).

    Raises:
      DtypeMismatchError, UnsupportedDtypeError: as `convert_value`.
      InvalidNameError: the name is malformed. DeviceError: see `devices.place`.
      VariableArgumentError: an unknown synchronization or aggregation, a constraint that is not callable.
    """

    _collection_names: list[str]
    _state: VariableState  # the value: buffer (None until materialized), pending restore, cached host view
    _task: str | None  # "/job:NAME/task:K" or None
    _binding: ownership.Binding  # the rank binding of the store the variable joined
    _save_slice_info: Any  # partitioning.SaveSliceInfo of a part, else None

    def __init__(self, initial_value: npt.ArrayLike | Variable | Callable[[], npt.ArrayLike | Variable],
                 trainable: bool | None = None, name: str | None = None, dtype: npt.DTypeLike | None = None, *,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 store: VariableRegistry | None = None, constraint: Constraint | None = None,
                 synchronization: VariableSynchronization | None = None,
                 aggregation: VariableAggregation | None = None, use_resource: bool | None = None) -> None:
        if callable(initial_value) and not isinstance(initial_value, Variable):
            initial_value = initial_value()
        registry = store if store is not None else default_registry()
        full_name = registry.claim_name(name)
        options, trainable = resolve_options(constraint, synchronization, aggregation, trainable, full_name)
        value = convert_value(initial_value, dtype, what=f"variable '{full_name}'")
        shape = tuple(int(d) for d in value.shape)
        self._setup(full_name, shape, np.dtype(value.dtype), trainable, None, options)
        self._initial = value  # v.initial_value: the converted value (the caller's own array when not converted)
        self._device, self._task = _choose_device(full_name, shape, self._dtype, device)
        self._state.buffer = devices.to_device(value, self._device, copy=True)
        registry.track_variable(self, collections, trainable, weak=True)  # a store bound to a rank drops others' values

    def _setup(self, name: str, shape: tuple[int, ...], dtype: np.dtype, trainable: bool, initializer: InitialValue,
               options: tuple[Any, Any, Any] = (None, VariableSynchronization.AUTO, VariableAggregation.NONE)) -> None:
        self._name = name
        self._shape = shape
        self._dtype = dtypes.as_dtype(dtype)
        self._trainable = bool(trainable)
        self._initializer = initializer
        self._initial, (self._constraint, self._synchronization, self._aggregation) = None, options  # variable_options
        self._state = VariableState()
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

    def _set_save_slice_info(self, info: Any) -> None:
        """Marks this variable as a part of a partitioned variable (a partitioning.SaveSliceInfo), as TF's
        Variable._set_save_slice_info; the partitioned store calls it once, when it makes the part."""
        self._save_slice_info = info

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
        return self._state.buffer is not None and self._state.source is None

    @property
    def is_allocated(self) -> bool:
        """True once the variable has memory for its value (it may still wait for a pending restore)."""
        return self._state.buffer is not None

    @property
    def is_restore_pending(self) -> bool:
        """True while a ValueSource waits to fill this variable on first use."""
        return self._state.source is not None

    # ---------------------------------------------------------- materialize
    def _materialize(self) -> Any:
        """Returns the live buffer, running the initializer or the pending restore first if needed."""
        state = self._state
        buffer = state.buffer
        if buffer is not None and state.source is None:
            return buffer
        with _materialize_lock:
            if self._state.buffer is not None and self._state.source is None:
                return self._state.buffer
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
                if self._state.source is not None:
                    self._fill_from(self._state.source)
                    self._state.settle()
                else:
                    self._run_initializer()
            finally:
                stack.pop()
            return self._state.buffer

    def _run_initializer(self) -> None:
        value = self._initializer_value()
        if (type(value) is np.ndarray and value.dtype == self._dtype and value.flags.c_contiguous
                and host_arrays.owns_memory(value) and value.flags.writeable and value.flags.aligned
                and not devices.is_gpu(self._device) and host_arrays.held_by_one_name(value)):
            # A fresh host array nobody else references (refcount: this frame only): adopt it as the
            # buffer instead of copying, so materializing never holds two copies of a variable (the
            # freed temporaries stayed in the malloc heap: ~100 MiB of RSS for a 1.2 GB model).
            self._state.buffer = value
            return
        buffer = devices.empty(self._shape, self._dtype, self._device)
        try:
            devices.copy_into(buffer, value)
        except TypeError as err:
            raise DtypeMismatchError(
                f"the initializer of variable '{self._name}' returned dtype {value.dtype}, which does not cast "
                f"('same_kind') to the variable's dtype {self._dtype.name}") from err
        self._state.buffer = buffer

    def _initializer_value(self) -> Any:
        """What the initializer gives (an array of the variable's shape), checked; the caller keeps it or copies it."""
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
        return value

    def _fill_from(self, source: ValueSource) -> None:
        """Fills the buffer from `source`: in place when allocated (same data pointer, host or GPU).

        GPU values are read into pinned host staging and copied with one
        asynchronous host-to-device copy (device_transfers); inside a restore's
        batch the copy finishes when the batch ends.
        """
        if self._state.buffer is not None and not devices.is_device_array(self._state.buffer):
            source.read_into(self._state.buffer)
            return
        if not devices.is_gpu(self._device):
            host = host_arrays.host_empty(self._shape, self._dtype)
            source.read_into(host)
            self._state.buffer = devices.to_device(host, self._device)
            return
        # a GPU variable: read into pinned staging, then one async copy (device_transfers)
        self._state.buffer = device_transfers.fill_on_device(source.read_into, self._shape, self._dtype,
                                                       self._device, self._state.buffer)

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
            return device_transfers.to_host(buf)
        copied: npt.NDArray[Any] = buf.copy()
        return copied

    def host_view(self) -> npt.NDArray[Any]:
        """The value on the host without a copy for CPU variables (read-only view of the live buffer); a host copy for GPU ones.

        Materializes first. Used by save, which must not double memory.
        """
        buf = self._state.buffer
        if buf is None or self._state.source is not None:
            buf = self._materialize()
        if self._state.view_of is buf:
            cached: npt.NDArray[Any] = self._state.view
            return cached
        if type(buf) is not np.ndarray and devices.is_device_array(buf):
            return device_transfers.to_host(buf)
        view: npt.NDArray[Any] = buf.view()
        view.setflags(write=False)  # as flags.writeable = False, without a flags object (~0.15 us)
        self._state.remember_view(view)  # the same buffer for life: the view stays valid
        return view

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
            if self._state.buffer is not None and not lazy:
                self._fill_from(source)
                self._state.settle()
            else:
                self._state.defer(source)

    # ---------------------------------------------------------------- misc
    def __repr__(self) -> str:
        if self.is_initialized:
            value = np.array2string(devices.to_host(self._state.buffer), separator=", ", threshold=20)
            value = f", numpy={value}"
        else:
            value = ", <not initialized>"
        return (f"<varstore.Variable '{self._name}' shape={self._shape} dtype={dtypes.dtype_name(self._dtype)} "
                f"device={self._device}{value}>")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"variable '{self._name}' cannot be pickled; save it in a checkpoint instead")


def lazy_variable(full_name: str, shape: tuple[int, ...], dtype: np.dtype, initializer: InitialValue,
                  trainable: bool, device: DeviceSpec,
                  options: tuple[Any, Any, Any] = (None, VariableSynchronization.AUTO, VariableAggregation.NONE)
                  ) -> Variable:
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
      options: (constraint, synchronization, aggregation), resolved as `Variable` does.

    Raises:
      DeviceError: see `devices.place`.
    """
    variable = Variable.__new__(Variable)
    variable._setup(full_name, shape, dtype, trainable, initializer, options)
    variable._device, variable._task = _choose_device(full_name, shape, variable._dtype, device)
    return variable



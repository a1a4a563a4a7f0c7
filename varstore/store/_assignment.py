"""In-place updates of a variable's value: assign, assign_add, assign_sub, sliced assign, with TF's shape and cast rules.

A mixin of `Variable` (as `_array_interop.ArrayInterop` is): every update
checks the shape and the "same_kind" cast first and writes into the
variable's own buffer (same data pointer), then applies the variable's
constraint. Also the module-level spellings tf.compat.v1.assign, assign_add,
assign_sub and scatter_update. Knows nothing about stores, names,
initializers or restores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from varstore.store import devices, ownership
from varstore.store._array_interop import ArrayInterop
from varstore.errors import DtypeMismatchError, ShapeMismatchError
from varstore.store.values import check_fits, convert_value, is_python_value
from varstore.store.variable_batches import MATERIALIZE_LOCK
from varstore.store._variable_state import VariableState

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Assignable", "assign", "assign_add", "assign_sub", "scatter_update"]


class Assignable:
    """assign / assign_add / assign_sub for a class that keeps a variable's state (`Variable`)."""

    _name: str
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _device: str
    _task: str | None
    _state: VariableState
    _constraint: Any  # a callable array -> array, or None (variable_options.py)

    def _materialize(self) -> Any:  # pragma: no cover - implemented by Variable
        raise NotImplementedError

    def _constrain(self) -> None:
        """Replaces the value by constraint(value) after an update, as TF's optimizers do after theirs.

        Raises:
          ShapeMismatchError, DtypeMismatchError: the constraint returned another shape or a dtype that does not cast.
        """
        if self._constraint is None:
            return
        projected = self._convert_operand(self._constraint(self._materialize().copy()), "constrain")
        if tuple(projected.shape) != self._shape:
            raise ShapeMismatchError(
                f"the constraint of variable '{self._name}' returned shape {tuple(projected.shape)}, the variable "
                f"has shape {self._shape}: a constraint must keep the shape")
        devices.copy_into(self._state.buffer, projected)

    def _convert_operand(self, value: Any, op: str) -> Any:
        what = f"{op} to variable '{self._name}'" if op == "assign" else f"{op} on variable '{self._name}'"
        if self._dtype.kind in "US" and op == "assign" and (is_python_value(value) or isinstance(value, np.ndarray)):
            return self._string_operand(value, what)
        if is_python_value(value):
            return convert_value(value, self._dtype, what=what)
        if isinstance(value, ArrayInterop):  # another Variable
            arr = value._materialize()
        elif isinstance(value, np.ndarray) or devices.is_device_array(value):
            arr = value
        else:
            arr = np.asarray(value)
        if arr.dtype != self._dtype and not np.can_cast(arr.dtype, self._dtype, "same_kind"):
            raise DtypeMismatchError(
                f"cannot {what}: the value has dtype {arr.dtype.name}, the variable has "
                f"{self._dtype.name}, and NumPy's 'same_kind' rule forbids the cast")
        if isinstance(arr, np.ndarray):
            check_fits(arr, self._dtype, what)
        return arr

    def _string_operand(self, value: Any, what: str) -> Any:
        """A string value for a string variable at its full length: the storage grows to fit (never truncated).

        TF's strings have no width (tf.Variable("abc").assign("defgh") reads
        b"defgh"); NumPy's do, so a longer value widens the variable's dtype
        ("U3" -> "U5") and its buffer is replaced on assign.
        """
        arr = convert_value(value, None, what=what)
        if arr.dtype.kind not in "US" or (arr.dtype.kind == "U" and self._dtype.kind == "S"):
            return convert_value(value, self._dtype, what=what)  # refused with the usual message
        chars = arr.dtype.itemsize // (4 if arr.dtype.kind == "U" else 1)
        width = self._dtype.itemsize // (4 if self._dtype.kind == "U" else 1)
        if chars > width:
            self._widen(np.dtype(f"{self._dtype.kind}{chars}"))
        return arr.astype(self._dtype)

    def _widen(self, dtype: np.dtype) -> None:
        """Replaces a string variable's dtype by a wider one, keeping its value (host only: strings never live on a GPU)."""
        with MATERIALIZE_LOCK:
            old = self._state.buffer if self._state.source is None else None
            self._dtype = dtype
            self._state.buffer = None if old is None else np.asarray(old).astype(dtype)

    def assign(self, value: Any, use_locking: bool | None = None, name: str | None = None,
               read_value: bool = True) -> Self | None:
        """Overwrites the value in place (same buffer), as tf.Variable.assign.

        An uninitialized variable is allocated and filled without running its
        initializer (a pending restore is dropped).

        Args:
          value: array-like of exactly `self.shape`; Python values are
            converted to `self.dtype` when NumPy would ('same_kind', no overflow),
            arrays must satisfy np.can_cast(value.dtype, self.dtype, "same_kind").
          A string variable widens to hold a longer string (never truncated).
          use_locking, name: accepted for ported code, ignored (one buffer, updated under no lock).
          read_value: False returns None, as TF's eager assign(read_value=False).

        Returns:
          This variable (None with read_value=False); its constraint was applied.

        Raises:
          ShapeMismatchError: the value's shape differs (names the variable and both shapes).
          DtypeMismatchError: the cast is not 'same_kind', or a Python int overflows.
          ValueOutOfRangeError: an array value would change in the cast (values.check_fits).
        """
        arr = self._convert_operand(value, "assign")
        if tuple(arr.shape) != self._shape:
            raise ShapeMismatchError(
                f"cannot assign a value of shape {tuple(arr.shape)} to variable '{self._name}' of "
                f"shape {self._shape}: assign needs exactly the variable's shape")
        if self._task is not None:
            ownership.check_holds(self, "assign to")
        with MATERIALIZE_LOCK:
            if self._state.buffer is None:
                self._state.buffer = devices.empty(self._shape, self._dtype, self._device)
            self._state.settle()
            devices.copy_into(self._state.buffer, arr)
        self._constrain()
        return self if read_value else None

    def _assign_slice(self, key: Any, value: Any) -> Self:
        """Writes `value` into `self[key]` in place, as `v[1:3].assign(...)` (TF's strided_slice_assign), then the constraint.

        Raises:
          ShapeMismatchError: `value`'s shape is not exactly the slice's (TF: "sliced l-value shape ... does not match").
          DtypeMismatchError, ValueOutOfRangeError: as `assign`.
        """
        arr = self._convert_operand(value, "assign")
        if self._task is not None:
            ownership.check_holds(self, "assign to")
        buf = self._materialize()
        target = buf[key]
        if tuple(getattr(target, "shape", ())) != tuple(arr.shape):
            raise ShapeMismatchError(
                f"cannot assign a value of shape {tuple(arr.shape)} to the slice {key!r} of variable '{self._name}' "
                f"(shape {tuple(getattr(target, 'shape', ()))}): a sliced assign needs exactly the slice's shape")
        with MATERIALIZE_LOCK:
            buf[key] = devices.to_device(arr, devices.device_of_array(buf))
        self._constrain()
        return self

    def scatter_update(self, indices: Any, updates: Any) -> Self:
        """Writes `updates[i]` into row `indices[i]` in place, as tf.compat.v1.scatter_update(ref, indices, updates).

        Args:
          indices: int or int array of rows along axis 0 (negative counts from the end, as NumPy).
          updates: array of shape `indices.shape + self.shape[1:]`, cast as in `assign`.

        Returns:
          This variable (its constraint applied).

        Raises:
          ShapeMismatchError: `updates` has another shape. IndexError: an index outside the variable.
        """
        rows = np.asarray(indices)
        if rows.dtype.kind not in "iu":
            raise TypeError(f"scatter_update on variable '{self._name}': indices must be integers, got {rows.dtype}")
        return self._assign_slice(rows if rows.ndim else int(rows), updates)

    def _update(self, delta: Any, ufunc: np.ufunc, op: str) -> Self:
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
        self._constrain()
        return self

    def assign_add(self, delta: Any, use_locking: bool | None = None, name: str | None = None,
                   read_value: bool = True) -> Self | None:
        """Adds `delta` in place, as tf.Variable.assign_add.

        Args:
          delta: array-like broadcastable to `self.shape` (a scalar works);
            cast as in `assign`.

          use_locking, name, read_value: as `assign`.

        Returns:
          This variable (None with read_value=False); its constraint was applied.

        Raises:
          ShapeMismatchError: `delta` does not broadcast to `self.shape`.
          DtypeMismatchError: `delta` cannot be cast ('same_kind') to `self.dtype`.
        """
        updated = self._update(delta, np.add, "assign_add")
        return updated if read_value else None

    def assign_sub(self, delta: Any, use_locking: bool | None = None, name: str | None = None,
                   read_value: bool = True) -> Self | None:
        """Subtracts `delta` in place, as tf.Variable.assign_sub (same rules and arguments as assign_add).

        Returns:
          This variable (None with read_value=False).

        Raises:
          ShapeMismatchError, DtypeMismatchError: as assign_add.
        """
        updated = self._update(delta, np.subtract, "assign_sub")
        return updated if read_value else None


def assign(ref: Any, value: Any, validate_shape: bool | None = None, use_locking: bool | None = None,
           name: str | None = None) -> Any:
    """`ref.assign(value)`, as tf.compat.v1.assign; returns `ref` (TF: a tensor holding the new value).

    validate_shape=False (TF: the variable takes the value's shape) is refused: a varstore variable's
    shape is fixed. Raises as `Variable.assign`; ShapeMismatchError for validate_shape=False.
    """
    if validate_shape is False:
        raise ShapeMismatchError(f"assign(validate_shape=False) to variable '{ref.name}': a varstore variable's "
                                 f"shape is fixed at creation; make a new Variable for a value of another shape")
    return ref.assign(value)


def assign_add(ref: Any, value: Any, use_locking: bool | None = None, name: str | None = None) -> Any:
    """`ref.assign_add(value)`, as tf.compat.v1.assign_add; returns `ref`. Raises as `Variable.assign_add`."""
    return ref.assign_add(value)


def assign_sub(ref: Any, value: Any, use_locking: bool | None = None, name: str | None = None) -> Any:
    """`ref.assign_sub(value)`, as tf.compat.v1.assign_sub; returns `ref`. Raises as `Variable.assign_sub`."""
    return ref.assign_sub(value)


def scatter_update(ref: Any, indices: Any, updates: Any, use_locking: bool = True, name: str | None = None) -> Any:
    """`ref.scatter_update(indices, updates)`, as tf.compat.v1.scatter_update; returns `ref`."""
    return ref.scatter_update(indices, updates)


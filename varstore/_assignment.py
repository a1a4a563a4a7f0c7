"""In-place updates of a variable's value: assign, assign_add, assign_sub, with TF's shape and cast rules.

A mixin of `Variable` (as `_array_interop.ArrayInterop` is): every update
checks the shape and the "same_kind" cast first and writes into the
variable's own buffer (same data pointer). Knows nothing about stores,
names, initializers or restores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from varstore import devices, ownership
from varstore._array_interop import ArrayInterop
from varstore.errors import DtypeMismatchError, ShapeMismatchError
from varstore.values import check_fits, convert_value, is_python_value
from varstore.variable_batches import MATERIALIZE_LOCK
from varstore._variable_state import VariableState

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Assignable"]


class Assignable:
    """assign / assign_add / assign_sub for a class that keeps a variable's state (`Variable`)."""

    _name: str
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _device: str
    _task: str | None
    _state: VariableState

    def _materialize(self) -> Any:  # pragma: no cover - implemented by Variable
        raise NotImplementedError

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

    def assign(self, value: Any) -> Self:
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
        with MATERIALIZE_LOCK:
            if self._state.buffer is None:
                self._state.buffer = devices.empty(self._shape, self._dtype, self._device)
            self._state.settle()
            devices.copy_into(self._state.buffer, arr)
        return self

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
        return self

    def assign_add(self, delta: Any) -> Self:
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

    def assign_sub(self, delta: Any) -> Self:
        """Subtracts `delta` in place, as tf.Variable.assign_sub (same rules as assign_add).

        Returns:
          This variable.

        Raises:
          ShapeMismatchError, DtypeMismatchError: as assign_add.
        """
        return self._update(delta, np.subtract, "assign_sub")


"""NumPy interop for Variable: array protocols, operators, indexing (sliced assign), DLPack.

A mixin that makes a variable act like a read-only array: NumPy functions,
ufuncs and Python operators accept it and return plain NumPy (or CuPy)
arrays that never alias the variable's buffer, except where NumPy itself
writes in place (`out=`, `np.copyto`, `ufunc.at`). Operands on different
devices are copied to the compute device chosen by `placement.compute_device`.
Indexing a host variable gives a SliceValue: a new array that remembers
where it came from, so `v[1:3].assign(x)` writes back as TF's sliced
variables do. Knows nothing about stores, names or initializers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore.store import device_transfers, devices, placement
from varstore.errors import ReshapeError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ArrayInterop", "SliceValue"]

_SHAPE_FUNCTIONS = {np.shape: "shape", np.ndim: "ndim", np.size: "size"}


class SliceValue(np.ndarray):
    """`variable[key]`: a new host array (never a view of the buffer) whose `assign` writes into the variable.

    As TF's `v[1].assign(9.0)` / `v[1:3].assign(...)` (tf.Variable.__getitem__'s
    strided_slice_assign). Anything computed from it (operators, ufuncs,
    further indexing) is a plain array without `assign`. An integer index
    into a 1-D variable gives a 0-d SliceValue where NumPy gives a scalar.
    """

    _variable: Any = None
    _key: Any = None

    def __array_finalize__(self, obj: Any) -> None:
        self._variable = self._key = None  # views and results of this array are not the slice

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        result = np.asarray(array).view(np.ndarray)
        return result[()] if return_scalar else result

    def __repr__(self) -> str:
        return repr(self.view(np.ndarray))

    def __reduce__(self) -> Any:
        return self.view(np.ndarray).__reduce__()  # a copy is a plain array

    def assign(self, value: Any, use_locking: bool | None = None, name: str | None = None,
               read_value: bool = True) -> Any:
        """Writes `value` (exactly this slice's shape) into the variable at this slice, as TF's sliced assign.

        Returns:
          The variable (TF returns it too), or None with read_value=False.

        Raises:
          TypeError: this array was not taken from a variable by indexing.
          ShapeMismatchError, DtypeMismatchError, ValueOutOfRangeError: as Variable.assign.
        """
        if self._variable is None:
            raise TypeError("only a slice taken from a variable (v[1], v[1:3]) can be assigned; this array is a "
                            "copy or a result computed from one")
        variable = self._variable._assign_slice(self._key, value)
        return variable if read_value else None


def _is_variable(obj: Any) -> bool:
    return isinstance(obj, ArrayInterop)


def _first_variable(objs: Any) -> Any:
    for obj in objs:
        if _is_variable(obj):
            return obj
        if isinstance(obj, (list, tuple)):
            found = _first_variable(obj)
            if found is not None:
                return found
    return None


class _Converter:
    """Moves operands to the compute device, remembering which buffers belong to variables."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.buffers: list[Any] = []
        self.variables: list[Any] = []

    def __call__(self, obj: Any) -> Any:
        if _is_variable(obj):
            buf = obj._materialize()
            self.buffers.append(buf)
            self.variables.append(obj)
            if devices.is_gpu(self.label) or devices.is_device_array(buf):
                return devices.to_device(buf, self.label)
            return buf
        if isinstance(obj, np.ndarray) or devices.is_device_array(obj):
            return devices.to_device(obj, self.label)
        if isinstance(obj, list):
            return [self(x) for x in obj]
        if isinstance(obj, tuple):
            return tuple(self(x) for x in obj)
        return obj

    def detach(self, result: Any) -> Any:
        """Copies results that may share memory with a variable's buffer (np.reshape returns a view)."""
        if isinstance(result, np.ndarray) or devices.is_device_array(result):
            for buf in self.buffers:
                if type(buf) is not type(result):
                    continue
                may_share = devices.function_for(np.may_share_memory, devices.device_of_array(buf))
                if may_share(result, buf):
                    return result.copy()
            return result
        if isinstance(result, tuple):
            return tuple(self.detach(r) for r in result)
        if isinstance(result, list):
            return [self.detach(r) for r in result]
        return result


def _compute_label(operands: Any) -> str:
    first = _first_variable(operands)
    default = first._device if first is not None else "cpu:0"
    return placement.compute_device(default)


class ArrayInterop:
    """Array behavior for Variable (NumPy protocols, operators, DLPack)."""

    __array_priority__ = 100.0

    # Provided by Variable.
    _device: str
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _name: str

    def _materialize(self) -> Any:  # pragma: no cover - implemented by Variable
        raise NotImplementedError

    # ------------------------------------------------------------- protocols
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """A host NumPy array: a read-only view of a CPU variable's buffer (copy=None/False), a new array for copy=True or GPU."""
        buf = self._materialize()
        if devices.is_device_array(buf):
            if copy is False:
                raise ValueError(f"variable '{self._name}' lives on {self._device}; a host array needs a copy")
            host = device_transfers.to_host(buf)
            return host if dtype is None else host.astype(dtype)
        if copy:
            return np.array(buf, dtype=dtype, copy=True)
        if dtype is not None and np.dtype(dtype) != buf.dtype:
            if copy is False:
                raise ValueError(f"variable '{self._name}' has dtype {buf.dtype}; dtype {np.dtype(dtype)} needs a copy")
            converted: npt.NDArray[Any] = buf.astype(dtype)
            return converted
        view: npt.NDArray[Any] = buf.view()
        view.flags.writeable = False
        return view

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        out_variables = [o for o in (out or ()) if _is_variable(o)]
        # in-place into a variable runs on its device; otherwise on the context's (or first variable's) device
        label = out_variables[0]._device if out_variables else _compute_label(inputs)
        convert = _Converter(label)
        args = [convert(x) for x in inputs]
        if out is not None:
            out_convert = _Converter(label)
            kwargs["out"] = tuple(o._materialize() if _is_variable(o) else out_convert(o) for o in out)
        function = devices.function_for(ufunc, label)
        if method == "at":
            # ufunc.at writes into its first operand in place (the variable's own buffer).
            if _is_variable(inputs[0]):
                args[0] = inputs[0]._materialize()
            getattr(function, method)(*args, **kwargs)
            return None
        result = getattr(function, method)(*args, **kwargs)
        if out is not None:
            if isinstance(result, tuple):
                return tuple(o if _is_variable(o) else r for o, r in zip(out, result))
            return out[0] if _is_variable(out[0]) else result
        return convert.detach(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in _SHAPE_FUNCTIONS and len(args) == 1 and not kwargs and args[0] is self:
            return getattr(self, _SHAPE_FUNCTIONS[func])  # no materialization for shape queries
        label = _compute_label(list(args) + list(kwargs.values()))
        convert = _Converter(label)
        new_args = convert(tuple(args))
        new_kwargs = {k: convert(v) for k, v in kwargs.items()}
        function = devices.function_for(func, label)
        return convert.detach(function(*new_args, **new_kwargs))

    def __dlpack__(self, **kwargs: Any) -> Any:
        """Exports the live buffer (no copy) through DLPack, so torch/jax/cupy/np.from_dlpack can view it."""
        buf = self._materialize()
        return buf.__dlpack__(**{k: v for k, v in kwargs.items() if v is not None})

    def __dlpack_device__(self) -> tuple[int, int]:
        """(1, 0) for host variables (kDLCPU), (2, N) for "gpu:N" (kDLCUDA); no materialization."""
        if devices.is_gpu(self._device):
            return (2, int(self._device.split(":")[1]))
        return (1, 0)

    # ---------------------------------------------------------------- shape
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the value (size * itemsize), known before materialization."""
        return self.size * self._dtype.itemsize

    @property
    def T(self) -> Any:  # noqa: N802 - NumPy's name
        """The transposed value as a new array."""
        return np.transpose(self)

    def reshape(self, *shape: Any, **kwargs: Any) -> Any:
        """Always raises: a variable's shape is fixed at creation (as tf.Variable).

        Raises:
          ReshapeError: always; use np.reshape(v, shape) for a reshaped copy.
        """
        raise ReshapeError(
            f"variable '{self._name}' has fixed shape {self._shape} and cannot be reshaped in place; "
            f"np.reshape(v, new_shape) returns a reshaped copy, or create a new Variable")

    def resize(self, *shape: Any, **kwargs: Any) -> Any:
        """Always raises: a variable's shape is fixed at creation.

        Raises:
          ReshapeError: always; np.resize(v, shape) returns a resized copy.
        """
        raise ReshapeError(
            f"variable '{self._name}' has fixed shape {self._shape} and cannot be resized in place; "
            f"np.resize(v, new_shape) returns a resized copy")

    # ------------------------------------------------------------- sequence
    def __len__(self) -> int:
        if not self._shape:
            raise TypeError(f"len() of a scalar variable '{self._name}'")
        return self._shape[0]

    def __iter__(self) -> Any:
        if not self._shape:
            raise TypeError(f"iteration over a scalar variable '{self._name}'")
        buf = self._materialize()
        for row in buf:
            yield row.copy() if hasattr(row, "copy") else row

    def __getitem__(self, key: Any) -> Any:
        """Indexing returns a new array, never a view of the buffer: a SliceValue for a host variable (its `assign`
        writes back, as TF's `v[1:3].assign(...)`), a CuPy array or scalar for a GPU one."""
        buf = self._materialize()
        convert = _Converter(devices.device_of_array(buf))
        index = convert(key)
        result = buf[index]
        if isinstance(result, np.ndarray) or isinstance(result, np.generic):
            sliced = np.array(result).view(SliceValue)
            sliced._variable, sliced._key = self, index
            return sliced
        if devices.is_device_array(result):
            return result.copy()
        return result

    def _scalar(self) -> Any:
        buf = self._materialize()
        if buf.size != 1:
            raise TypeError(f"only a variable with one element converts to a Python scalar; "
                            f"'{self._name}' has shape {self._shape}")
        return devices.to_host(buf).reshape(()).item()

    def __bool__(self) -> bool:
        return bool(self._scalar())

    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __complex__(self) -> complex:
        return complex(self._scalar())

    def __index__(self) -> int:
        if self._dtype.kind not in "iu":
            raise TypeError(f"variable '{self._name}' of dtype {self._dtype.name} cannot be used as an index")
        return int(self._scalar())

    def __format__(self, spec: str) -> str:
        if spec and self.size == 1:
            return format(self._scalar(), spec)
        return format(str(self), spec)

    # ------------------------------------------------------------- operators
    def __add__(self, other: Any) -> Any: return np.add(self, other)
    def __radd__(self, other: Any) -> Any: return np.add(other, self)
    def __sub__(self, other: Any) -> Any: return np.subtract(self, other)
    def __rsub__(self, other: Any) -> Any: return np.subtract(other, self)
    def __mul__(self, other: Any) -> Any: return np.multiply(self, other)
    def __rmul__(self, other: Any) -> Any: return np.multiply(other, self)
    def __truediv__(self, other: Any) -> Any: return np.true_divide(self, other)
    def __rtruediv__(self, other: Any) -> Any: return np.true_divide(other, self)
    def __floordiv__(self, other: Any) -> Any: return np.floor_divide(self, other)
    def __rfloordiv__(self, other: Any) -> Any: return np.floor_divide(other, self)
    def __mod__(self, other: Any) -> Any: return np.remainder(self, other)
    def __rmod__(self, other: Any) -> Any: return np.remainder(other, self)
    def __pow__(self, other: Any) -> Any: return np.power(self, other)
    def __rpow__(self, other: Any) -> Any: return np.power(other, self)
    def __matmul__(self, other: Any) -> Any: return np.matmul(self, other)
    def __rmatmul__(self, other: Any) -> Any: return np.matmul(other, self)
    def __and__(self, other: Any) -> Any: return np.bitwise_and(self, other)
    def __rand__(self, other: Any) -> Any: return np.bitwise_and(other, self)
    def __or__(self, other: Any) -> Any: return np.bitwise_or(self, other)
    def __ror__(self, other: Any) -> Any: return np.bitwise_or(other, self)
    def __xor__(self, other: Any) -> Any: return np.bitwise_xor(self, other)
    def __rxor__(self, other: Any) -> Any: return np.bitwise_xor(other, self)
    def __invert__(self) -> Any: return np.invert(self)
    def __neg__(self) -> Any: return np.negative(self)
    def __pos__(self) -> Any: return np.positive(self)
    def __abs__(self) -> Any: return np.absolute(self)
    def __lt__(self, other: Any) -> Any: return np.less(self, other)
    def __le__(self, other: Any) -> Any: return np.less_equal(self, other)
    def __gt__(self, other: Any) -> Any: return np.greater(self, other)
    def __ge__(self, other: Any) -> Any: return np.greater_equal(self, other)
    def __eq__(self, other: Any) -> Any: return np.equal(self, other)
    def __ne__(self, other: Any) -> Any: return np.not_equal(self, other)

    def __hash__(self) -> int:
        """Identity hash, so variables work as dict keys and set members (TF2 raises; see docs)."""
        return id(self)

    # In-place operators update the variable in place (NumPy semantics), with assign's checks.
    def __iadd__(self, other: Any) -> Self: return self.assign_add(other)  # type: ignore[attr-defined,no-any-return]
    def __isub__(self, other: Any) -> Self: return self.assign_sub(other)  # type: ignore[attr-defined,no-any-return]
    def __imul__(self, other: Any) -> Self: return self.assign(np.multiply(self, other))  # type: ignore[attr-defined,no-any-return]
    def __itruediv__(self, other: Any) -> Self: return self.assign(np.true_divide(self, other))  # type: ignore[attr-defined,no-any-return]

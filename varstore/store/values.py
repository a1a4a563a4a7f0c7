"""Value conversion: Python values and arrays -> arrays for a variable, with TF's dtype rules and checked casts.

`convert_value` turns what a user passes (Python scalars and lists,
NumPy/CuPy arrays, Variables, objects with `__array__`) into an array of the
wanted dtype, refusing casts NumPy's "same_kind" rule forbids. Keeps no
state and knows nothing about stores, names or initializers.
"""

from __future__ import annotations

import reprlib
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.store import devices
from varstore.store._array_interop import ArrayInterop
from varstore.errors import DtypeMismatchError, UnsupportedDtypeError, ValueOutOfRangeError

__all__ = ["check_fits", "convert_value", "is_python_value"]


def _kind(dtype: np.dtype) -> str:
    return "f" if dtypes.is_floating(dtype) else dtype.kind


_KIND_NAMES = {"b": "bool", "i": "integer", "u": "integer", "f": "floating-point", "c": "complex",
               "U": "string", "S": "bytes"}

# Python values may become any dtype of these kinds (NumPy's weak-scalar rule, NEP 50).
_PYTHON_TARGET_KINDS = {"b": "biufc", "i": "iufc", "u": "iufc", "f": "fc", "c": "c", "U": "US", "S": "S"}


def is_python_value(value: Any) -> bool:
    """Whether `value` is a plain Python value (scalar, str, bytes, list, tuple, range), converted by TF's dtype rules."""
    return isinstance(value, (bool, int, float, complex, str, bytes, list, tuple, range))


def _changed(value: npt.NDArray[Any], cast: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Where `cast` (value.astype(narrower)) no longer holds the value: wrapped, overflowed to inf, rounded, cut."""
    source, target = value.dtype, cast.dtype
    if _kind(target) in "fc" and _kind(source) in "fc":  # finite stays finite; rounding is what a float cast is
        finite: npt.NDArray[Any] = np.isfinite(value) & ~np.isfinite(cast)
        return finite
    back = (cast.real if target.kind == "c" and source.kind != "c" else cast).astype(source)
    changed: npt.NDArray[Any] = back != value
    return changed


def check_fits(value: npt.NDArray[Any], dtype: npt.DTypeLike, what: str) -> None:
    """Refuses a cast of host array `value` to `dtype` that would change a value (the narrowing a restore may do).

    A cast NumPy calls "safe" passes without a look, except integers into a
    floating dtype (int64 2**53 + 1 into float64 loses its last bit). Else the
    values are checked: integers must keep their value (int64 2**40 into int32
    would wrap to 0), finite floats must stay finite (float32 1e5 into float16
    would become inf; rounding is allowed, as any float cast rounds), strings
    must keep every character. TensorFlow refuses these restores outright.

    Args:
      value: the host array as stored (any dtype).
      dtype: the dtype it is cast to.
      what: names the cast in the message, e.g. "restore variable 'step' from 'step' in 'ckpt.h5'".

    Raises:
      ValueOutOfRangeError: naming `what`, both dtypes, the first offending value and its index.
    """
    target = np.dtype(dtype)
    source = value.dtype
    if source == target or value.size == 0 or source.kind == "V" and target.kind == "V":
        return
    if np.can_cast(source, target, "safe") and not (source.kind in "iu" and _kind(target) in "fc"):
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cast = value.astype(target)
        bad = _changed(value, cast)
    if not bad.any():
        return
    flat = int(np.argmax(bad))
    index = [int(i) for i in np.unravel_index(flat, value.shape)] if value.ndim else []
    found, became = value.reshape(-1)[flat].tolist(), cast.reshape(-1)[flat].tolist()
    raise ValueOutOfRangeError(
        f"cannot {what}: the value {found!r} at index {index} ({dtypes.dtype_name(source)}) does not fit "
        f"{dtypes.dtype_name(target)} and would become {became!r}; create the variable with dtype "
        f"{dtypes.dtype_name(source)} (or cast the values yourself first)")


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
        raise ValueOutOfRangeError(f"integer value {reprlib.repr(value)} does not fit int64")
    if kind == "c":
        return np.dtype(np.complex128)
    return inferred


def _overflowed(inferred: npt.NDArray[Any], result: npt.NDArray[Any]) -> bool:
    """Whether a finite Python number became inf in `result` (TF's ErrorOutOfRangeDouble)."""
    finite = np.isfinite(inferred)
    if not finite.any():
        return False
    return bool((~np.isfinite(result) & finite).any())


def convert_value(value: Any, dtype: npt.DTypeLike | None = None, *, what: str = "a variable") -> Any:
    """Turns a Python value, NumPy/CuPy array or Variable into an array (not copied when already one).

    Python scalars and lists follow TF's convention (float -> float32, int ->
    int32, complex -> complex128, bool -> bool); arrays keep their dtype.

    Args:
      value: the value.
      dtype: requested dtype; the value must cast to it by NumPy's "same_kind" rule.
      what: how to name the target in errors.

    Raises:
      DtypeMismatchError: the value cannot be cast to `dtype`.
      ValueOutOfRangeError: a Python number does not fit `dtype` (1e40 as
        float32, 2**40 as int32); TF raises ValueError here, and this is one.
      UnsupportedDtypeError: object / ragged values.
      ValueOutOfRangeError: also an array whose values would change in the cast to `dtype` (`check_fits`).
    """
    target = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(value, ArrayInterop):  # a Variable: its value, initialized first
        arr = value._materialize()
    elif isinstance(value, np.ndarray) or devices.is_device_array(value) or isinstance(value, np.generic):
        arr = value if not isinstance(value, np.generic) else np.asarray(value)
    elif is_python_value(value):
        try:
            inferred = np.asarray(value)
        except ValueError as err:
            raise UnsupportedDtypeError(f"cannot make {what} from a ragged value {value!r}") from err
        if inferred.dtype.kind == "O" and all(type(x) is int for x in np.asarray(value, dtype=object).ravel()):
            raise ValueOutOfRangeError(f"integer value {reprlib.repr(value)} does not fit int64 for {what} "
                                       f"(TF: \"Can't convert Python int to int64\"); pass it as a float or a string")
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
            with np.errstate(over="ignore"):
                result = np.asarray(value, dtype=target)
        except OverflowError as err:
            raise ValueOutOfRangeError(
                f"cannot convert {reprlib.repr(value)} to {target.name} for {what}: the value overflows "
                f"{target.name}") from err
        if _kind(target) in "fc" and inferred.dtype.kind in "iufc" and _overflowed(inferred, result):
            raise ValueOutOfRangeError(
                f"cannot convert {reprlib.repr(value)} to {target.name} for {what}: a finite value is beyond "
                f"the largest {target.name} and would become inf "
                f"(as tf.Variable(1e40) refuses it); pass dtype=np.float64 or a smaller value")
        return result
    else:
        arr = np.asarray(value)  # objects with __array__ (torch, jax, ...)
    dtypes.as_dtype(arr.dtype)  # rejects object / structured dtypes
    if target is not None and arr.dtype != target:
        if not np.can_cast(arr.dtype, target, "same_kind"):
            raise DtypeMismatchError(
                f"cannot convert a {arr.dtype.name} array to {target.name} for {what}: "
                f"NumPy's 'same_kind' rule forbids the cast")
        if isinstance(arr, np.ndarray):
            check_fits(arr, target, f"convert a {dtypes.dtype_name(arr.dtype)} array to {what}")
        arr = arr.astype(target)
    return arr


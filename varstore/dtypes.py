"""Logical dtype names <-> NumPy dtypes; the only module that imports ml_dtypes.

A logical dtype name is what checkpoints and VariableInfo record: NumPy's
`dtype.name` for numeric and bool dtypes ("float32", "bfloat16",
"float8_e4m3fn", "complex64", "bool"), and NumPy's byte-order-free type string
for fixed-length strings ("S5" bytes, "U3" unicode). Knows nothing about
variables or files.
"""

from __future__ import annotations


import ml_dtypes
import numpy as np
import numpy.typing as npt

from varstore.errors import UnsupportedDtypeError

__all__ = [
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "as_dtype",
    "dtype_name",
    "is_floating",
    "is_extension",
    "storage_dtype",
    "SUPPORTED_NAMES",
]

bfloat16: np.dtype = np.dtype(ml_dtypes.bfloat16)
float8_e4m3fn: np.dtype = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2: np.dtype = np.dtype(ml_dtypes.float8_e5m2)

_EXTENSION: dict[str, np.dtype] = {
    "bfloat16": bfloat16,
    "float8_e4m3fn": float8_e4m3fn,
    "float8_e5m2": float8_e5m2,
}

_NUMERIC = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]

#: Every numeric logical name; strings are "S<n>" / "U<n>".
SUPPORTED_NAMES = tuple(_NUMERIC) + tuple(_EXTENSION)


def as_dtype(dtype: npt.DTypeLike) -> np.dtype:
    """Returns the NumPy dtype for a logical name, NumPy dtype or scalar type.

    Accepts "float32", np.float32, "bfloat16", "float8_e4m3fn", "S5", "U3",
    "<f4" and anything else np.dtype accepts except object dtypes.

    Raises:
      UnsupportedDtypeError: the dtype is unknown, object, void or structured.
    """
    if isinstance(dtype, str) and dtype in _EXTENSION:
        return _EXTENSION[dtype]
    try:
        result: np.dtype = np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise UnsupportedDtypeError(f"unknown dtype {dtype!r}") from err
    if result.kind == "O":
        raise UnsupportedDtypeError(
            "object dtype is not supported: a checkpoint holds numbers and fixed-length strings, never Python objects")
    if result.kind == "V" and result.name not in _EXTENSION:
        raise UnsupportedDtypeError(f"structured or void dtype {result!r} is not supported")
    if result.kind in "SU":
        if result.itemsize == 0:
            raise UnsupportedDtypeError(f"string dtype {result!r} needs a fixed length")
    elif result.kind not in "biufcV" and result.name not in _EXTENSION:
        raise UnsupportedDtypeError(f"dtype {result!r} is not supported")
    return result


def dtype_name(dtype: npt.DTypeLike) -> str:
    """Returns the logical name of a dtype: "float32", "bfloat16", "S5", "U3".

    Raises:
      UnsupportedDtypeError: as `as_dtype`.
    """
    dt = as_dtype(dtype)
    if dt.kind == "S":
        return f"S{dt.itemsize}"
    if dt.kind == "U":
        return f"U{dt.itemsize // 4}"
    name: str = dt.name
    return name


def is_extension(dtype: npt.DTypeLike) -> bool:
    """True for the ml_dtypes types (bfloat16, float8_*) that HDF5/Zarr cannot store natively."""
    return dtype_name(dtype) in _EXTENSION


def is_floating(dtype: npt.DTypeLike) -> bool:
    """True for float16/32/64, bfloat16 and float8 dtypes (the ones glorot_uniform applies to)."""
    dt = as_dtype(dtype)
    return dt.kind == "f" or dt.name in _EXTENSION


def storage_dtype(dtype: npt.DTypeLike) -> np.dtype:
    """The plain unsigned dtype of the same itemsize, used to store extension dtypes bit-exactly.

    bfloat16 -> uint16, float8_* -> uint8. Other dtypes are returned unchanged.
    """
    dt = as_dtype(dtype)
    if dt.name in _EXTENSION:
        return np.dtype(f"u{dt.itemsize}")
    return dt

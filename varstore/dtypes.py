"""Logical dtype names <-> NumPy dtypes; the only module that imports ml_dtypes.

A logical dtype name is what checkpoints and VariableInfo record: NumPy's
`dtype.name` for numeric and bool dtypes ("float32", "bfloat16",
"float8_e4m3fn", "complex64", "bool"), and NumPy's byte-order-free type string
for fixed-length strings ("S5" bytes, "U3" unicode). Knows nothing about
variables or files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from varstore.errors import UnsupportedDtypeError

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

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

#: The ml_dtypes types by logical name; ml_dtypes is imported on first use (import varstore stays light).
_EXTENSION_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_extension_dtypes: dict[str, np.dtype] = {}


def _extension(name: str) -> np.dtype:
    """The NumPy dtype of an ml_dtypes type by name, importing ml_dtypes on first use."""
    if not _extension_dtypes:
        import ml_dtypes

        _extension_dtypes.update({n: np.dtype(getattr(ml_dtypes, n)) for n in _EXTENSION_NAMES})
    return _extension_dtypes[name]


def __getattr__(name: str) -> Any:
    """bfloat16, float8_e4m3fn, float8_e5m2: NumPy dtypes of ml_dtypes, imported on first access."""
    if name in _EXTENSION_NAMES:
        return _extension(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Logical names of the ml_dtypes types (a dtype of that name is one of them).
_EXTENSION = frozenset(_EXTENSION_NAMES)

_NUMERIC = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]

#: Every numeric logical name; strings are "S<n>" / "U<n>".
SUPPORTED_NAMES = tuple(_NUMERIC) + _EXTENSION_NAMES


def as_dtype(dtype: npt.DTypeLike) -> np.dtype:
    """Returns the NumPy dtype for a logical name, NumPy dtype or scalar type.

    Accepts "float32", np.float32, "bfloat16", "float8_e4m3fn", "S5", "U3",
    "<f4" and anything else np.dtype accepts except object dtypes.

    Raises:
      UnsupportedDtypeError: the dtype is unknown, object, void or structured.
    """
    if isinstance(dtype, str) and dtype in _EXTENSION:
        return _extension(dtype)
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

"""ValueSource: where a restored value comes from, and the check that a source fits a variable.

The protocols the checkpoint layer implements (ValueSource: one checkpoint
entry or a region of one; Resolver: a pending restore that finds the source
of a variable created later, a part of a partitioned variable included) and
the one shape / dtype rule a restore obeys (`check_restorable`). Changes no
variable and reads no value; never does file I/O.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.errors import DtypeMismatchError, ShapeMismatchError

__all__ = ["RestoreTarget", "Resolver", "SliceInfo", "ValueSource", "check_host_value", "check_restorable"]


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



class SliceInfo(Protocol):
    """Where a part sits in its partitioned variable (partitioning.SaveSliceInfo is one), as tf.Variable.SaveSliceInfo.

    Attributes:
      full_name: the whole variable's name ("model/embedding").
      full_shape: the whole variable's shape.
      var_offset: the part's first index along every axis.
      var_shape: the part's shape.
    """

    @property
    def full_name(self) -> str: ...

    @property
    def full_shape(self) -> tuple[int, ...]: ...

    @property
    def var_offset(self) -> tuple[int, ...]: ...

    @property
    def var_shape(self) -> tuple[int, ...]: ...


class Resolver(Protocol):
    """A pending restore (`VariableStore.add_pending_restore`): where a variable created later gets its value.

    Called once per new variable with its full name and, for a part of a
    partitioned variable ("model/embedding/part_1"), the part's SliceInfo
    (None otherwise). Returns a ValueSource of the variable's own shape (for a
    part: the region `[var_offset, var_offset + var_shape)` of the stored
    `full_name`, or an entry stored under the part's own name), or None when
    it knows no value. May raise (ShapeMismatchError, ...): the variable is
    then not created.
    """

    def __call__(self, name: str, slice_info: SliceInfo | None) -> ValueSource | None: ...


class RestoreTarget(Protocol):
    """What `check_restorable` looks at: a variable's name, shape and dtype (a `Variable` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...


def check_restorable(variable: RestoreTarget, source: ValueSource) -> None:
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



class _ArraySource:
    """A host array seen as a ValueSource, for check_restorable's messages."""

    def __init__(self, value: npt.NDArray[Any]) -> None:
        self.origin = "a host array"
        self.shape = tuple(int(d) for d in value.shape)
        self.dtype = value.dtype
        self._value = value

    def read_into(self, out: npt.NDArray[Any]) -> None:
        np.copyto(out, self._value, casting="same_kind")


def check_host_value(variable: RestoreTarget, value: Any) -> None:
    """Checks that a host array can restore `variable` (as `check_restorable`); non-arrays are refused.

    Raises:
      ShapeMismatchError, DtypeMismatchError: naming the variable and both shapes / dtypes.
    """
    if not isinstance(value, np.ndarray):
        raise DtypeMismatchError(
            f"cannot restore variable '{variable.name}': expected a NumPy array, got {type(value).__name__}")
    check_restorable(variable, _ArraySource(value))

"""get_variable's rules, as tf.compat.v1.get_variable: reuse checks, and the shape, dtype and initializer of a new variable.

Decides whether get_variable shares an existing variable or refuses (the
errors of tf.compat.v1's `_VariableStore._get_single_variable`), and what
shape, dtype and initializer a new one gets (value initializers,
pending restores, glorot_uniform / zeros defaults). Holds no variables and
creates none: `VariableStore` owns the variables and calls these rules.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Union

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.store import devices
from varstore.errors import (
    DtypeMismatchError,
    InitializerError,
    PartitionError,
    ShapeMismatchError,
    VariableExistsError,
    VariableNotFoundError,
)
from varstore.initializers import GlorotUniform, Initializer, Zeros
from varstore.store.value_sources import ValueSource
from varstore.store.values import convert_value
from varstore.store._variable_scope import InitializerSpec, Reuse
from varstore.store.variables import InitialValue, Variable

__all__ = ["PartialShape", "check_reuse", "existing_variable", "is_value", "new_variable_spec", "shape_tuple"]

#: A requested shape: ints, None for "any" on reuse, or None when the initializer gives it.
PartialShape = Union[int, Sequence[Union[int, None]], None]


def shape_tuple(shape: PartialShape, what: str) -> tuple[int | None, ...] | None:
    """The requested shape as a tuple (None dims kept), or None.

    Raises:
      ShapeMismatchError: not a sequence of ints, or a negative dimension (as TF's Dimension).
    """
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        dims = tuple(None if d is None else int(d) for d in shape)
    except TypeError as err:
        raise ShapeMismatchError(f"{what}: shape must be a sequence of ints, got {shape!r}") from err
    if any(d is not None and d < 0 for d in dims):  # TF: tensor_shape.Dimension(-1) raises "must be >= 0"
        raise ShapeMismatchError(f"{what}: shape {list(shape)} has a negative dimension (TF refuses it too: "
                                 f"\"Dimension -1 must be >= 0\"); pass None for a dimension to leave open on reuse")
    return dims


def is_value(initializer: InitializerSpec) -> bool:
    """True for initializers that ARE the value (arrays, Variables, Python values), as TF1's initializing_from_value."""
    if initializer is None:
        return False
    if isinstance(initializer, Variable) or isinstance(initializer, np.ndarray) or devices.is_device_array(initializer):
        return True
    return not callable(initializer)




def existing_variable(full: str, reuse: Reuse, found: Variable | None, *, partitioned: bool, weak_exists: bool,
                      shape: tuple[int | None, ...] | None, dtype: npt.DTypeLike | None) -> Variable | None:
    """The variable get_variable shares, or None when it may create `full`, as tf.compat.v1's reuse modes.

    Args:
      full: the full name asked for.
      reuse: the scope's reuse mode (False, True or AUTO_REUSE).
      found: the get_variable variable of that name, if any.
      partitioned: a partitioned variable of that name exists.
      weak_exists: a live Variable(...) of that name exists.
      shape: the requested shape (None dims match anything), or None.
      dtype: the requested dtype, or None (not checked).

    Raises:
      PartitionError: `full` is a partitioned variable.
      VariableExistsError: `full` exists and the scope does not reuse, or it was made by Variable(...).
      VariableNotFoundError: reuse=True and `full` does not exist.
      ShapeMismatchError, DtypeMismatchError: as `check_reuse`.
    """
    if partitioned:
        raise PartitionError(
            f"get_variable('{full}'): no partitioner was given, but a partitioned variable '{full}' "
            f"exists (parts '{full}/part_0', ...); pass the same partitioner to share it")
    if found is not None:
        if not reuse:
            raise VariableExistsError(
                f"variable '{full}' already exists; to share it, open the scope with reuse=True "
                f"or reuse=vs.AUTO_REUSE (as tf.compat.v1.variable_scope), or choose another name")
        check_reuse(found, shape, dtype)
        return found
    if reuse is True:
        raise VariableNotFoundError(
            f"variable '{full}' does not exist, or was not created with get_variable(); "
            f"create it first, or open the scope with reuse=vs.AUTO_REUSE to create it when missing")
    if weak_exists:
        raise VariableExistsError(
            f"variable '{full}' already exists, created with Variable(...); get_variable can "
            f"neither share nor rename it: choose another name")
    return None


def check_reuse(found: Variable, shape: tuple[int | None, ...] | None, dtype: npt.DTypeLike | None) -> None:
    """Checks that a reused variable has the requested shape (None dims match anything) and dtype.

    Raises:
      ShapeMismatchError, DtypeMismatchError: naming the variable and both shapes / dtypes.
    """
    if shape is not None and (len(shape) != len(found.shape) or
                              any(d is not None and d != f for d, f in zip(shape, found.shape))):
        raise ShapeMismatchError(
            f"cannot reuse variable '{found.name}': get_variable asked for shape {shape}, "
            f"the existing variable has shape {found.shape}")
    if dtype is not None and dtypes.as_dtype(dtype) != found.dtype:
        raise DtypeMismatchError(
            f"cannot reuse variable '{found.name}': get_variable asked for dtype "
            f"{dtypes.dtype_name(dtype)}, the existing variable has dtype {dtypes.dtype_name(found.dtype)}")


def new_variable_spec(full: str, shape: tuple[int | None, ...] | None, dtype: npt.DTypeLike | None,
                      init_spec: InitializerSpec, pending: Callable[[str], ValueSource | None]
                      ) -> tuple[tuple[int, ...], np.dtype, InitialValue, ValueSource | None]:
    """The shape, dtype, initializer and pending restore of a new get_variable variable, as tf.compat.v1.

    An array / Variable / Python value as initializer gives the shape and the
    dtype; a pending restore (`pending(full)`, asked once) may give the shape;
    the default initializer is glorot_uniform for floating dtypes and zeros for
    ints and bools; an Initializer class is instantiated.

    Returns:
      (shape, dtype, initializer, pending restore source or None).

    Raises:
      ShapeMismatchError: `shape` differs from a value initializer's.
      DtypeMismatchError: a value initializer does not cast to `dtype`.
      InitializerError: no fully defined shape, no default initializer for
        the dtype, or an initializer that is not callable.
    """
    what = f"get_variable('{full}')"
    initializer: InitialValue = init_spec() if inspect.isclass(init_spec) else init_spec
    dt = None if dtype is None else dtypes.as_dtype(dtype)
    if is_value(initializer):
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
    source = pending(full)
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
    elif not (is_value(initializer) or isinstance(initializer, Initializer) or callable(initializer)):
        raise InitializerError(f"{what}: initializer {initializer!r} is not callable")
    return full_shape, dt, initializer, source

"""Batch hooks of the checkpoint engine: host views of many variables, and restoring many at once.

`host_views` and `restore_many` do for thousands of small variables what
`Variable.host_view` / `Variable.restore_from` do for one, at a fraction of a
microsecond each, by reading a variable's state (`VariableState`) directly.
They validate everything before changing anything; they never do file I/O
and never import the checkpoint layer (which calls them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from varstore import devices
from varstore.value_sources import ValueSource, check_host_value

__all__ = ["MATERIALIZE_LOCK", "VariableState", "host_views", "restore_many"]

#: The one lock under which a variable's buffer is allocated, filled or replaced (Variable uses it too).
MATERIALIZE_LOCK = threading.RLock()


class VariableState(Protocol):
    """The state of a `Variable` these hooks read and write (its private fields, see variables.py)."""

    _buffer: Any  # NumPy or CuPy array, None until materialized
    _source: ValueSource | None  # a pending restore
    _view: Any  # cached read-only view of _buffer, valid while _view_of is _buffer
    _view_of: Any
    _shape: tuple[int, ...]
    _dtype: np.dtype
    _device: str
    _task: str | None  # "/job:NAME/task:K" or None: held by every process (ownership.py)

    @property
    def name(self) -> str: ...

    @property
    def is_owned(self) -> bool: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def host_view(self) -> npt.NDArray[Any]: ...


def host_views(variables: Sequence[VariableState], read_only: bool = True) -> list[npt.NDArray[Any]]:
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


def restore_many(variables: Sequence[VariableState], values: Sequence[Any], adopt: bool = False) -> None:
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
      values: host NumPy arrays (or CuPy arrays, as a GPU restore's reads), `values[i]` of `variables[i].shape` and a
        dtype that casts to `variables[i].dtype` by NumPy's "same_kind" rule.
      adopt: the caller hands over fresh arrays it keeps no reference to (a
        restore's reads): a CPU variable without memory takes a C-contiguous
        array of its dtype that owns its data as its buffer, without a copy.

    Variables this process does not hold (a store bound to a communicator,
    varstore.ownership) are skipped: they never allocate.

    Raises:
      ValueError: the two sequences differ in length.
      ShapeMismatchError, DtypeMismatchError: naming the first bad variable (nothing changes).
    """
    if len(variables) != len(values):
        raise ValueError(f"restore_many got {len(variables)} variables and {len(values)} values")
    for variable, value in zip(variables, values):
        if value.shape != variable._shape or value.dtype != variable._dtype:
            check_host_value(variable, value)
    with MATERIALIZE_LOCK:
        for variable, value in zip(variables, values):
            if variable._task is not None and not variable.is_owned:  # another rank holds it (ownership.py)
                continue
            buf = variable._buffer
            if (adopt and buf is None and type(value) is np.ndarray and value.base is None  # a view: copied
                    and value.dtype == variable._dtype and value.flags.owndata and value.flags.c_contiguous
                    and value.flags.writeable and not devices.is_gpu(variable._device)):
                variable._buffer = value
            elif type(value) is not np.ndarray and devices.is_device_array(value):  # read to a GPU already
                if buf is not None:
                    devices.copy_into(buf, value)
                elif adopt and value.dtype == variable._dtype and value.flags.c_contiguous \
                        and devices.device_of_array(value) == variable._device:
                    variable._buffer = value
                else:
                    fresh = devices.empty(variable._shape, variable._dtype, variable._device)
                    devices.copy_into(fresh, value)
                    variable._buffer = fresh
            elif type(buf) is np.ndarray:
                if value.dtype == buf.dtype:
                    buf[...] = value
                else:
                    np.copyto(buf, value, casting="same_kind")
            elif (buf is None and type(value) is np.ndarray and value.dtype == variable._dtype
                    and not devices.is_gpu(variable._device)):
                variable._buffer = value.copy()  # C order: a view of a packed blob keeps nothing alive
            else:
                host = np.empty(variable._shape, dtype=variable._dtype)
                np.copyto(host, value, casting="same_kind")
                if buf is not None:
                    devices.copy_into(buf, host)
                else:
                    variable._buffer = devices.to_device(host, variable._device)
            variable._source = None


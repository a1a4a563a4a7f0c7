"""Partitioned variables: PartitionedVariable, its parts "NAME/part_K" and their values, get_variable(partitioner=...), as TF1.

Sources of the rules (TensorFlow python/ops/variable_scope.py, TF 2.x
`tf.compat.v1`): part names "NAME/part_K", SaveSliceInfo(full name, full
shape, offset, shape) and the reuse errors:
`_VariableStore._get_partitioned_variable`. How many parts along which axis
is `partitioners.py`'s job.
Deliberate difference: TF calls the initializer once per part with the
part's shape (random parts then depend on the partitioning). Here each part
is ITS SLICE OF ONE GLOBAL VALUE drawn from (seed, full name): 1, 2 or 4
parts of the same seed hold the same numbers as one unpartitioned variable.

Knows the store only through `VariableStore._create` and its `_shared` /
`_partitioned` dicts; never does file I/O, never imports the checkpoint layer.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

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
from varstore.initializers import (
    Constant,
    GlorotUniform,
    Identity,
    Initializer,
    Ones,
    RandomUniform,
    VarianceScaling,
    Zeros,
    compute_fans,
)
from varstore.store.partitioners import Partitioner, call_partitioner, iter_slices, slice_dim_and_num_slices
from varstore.store.values import convert_value
from varstore.store.variables import Variable

__all__ = [
    "SaveSliceInfo",
    "PartitionedVariable",
    "get_partitioned_variable",
]

# Beyond this many contiguous runs per part, a random slice is cut from the whole value instead.
_MAX_RUNS = 4096


@dataclasses.dataclass(frozen=True)
class SaveSliceInfo:
    """Where a part sits in its partitioned variable, as tf.Variable.SaveSliceInfo.

    Attributes:
      full_name: the partitioned variable's name ("model/embedding").
      full_shape: the whole variable's shape.
      var_offset: the part's first index along every axis.
      var_shape: the part's shape.
    """

    full_name: str
    full_shape: tuple[int, ...]
    var_offset: tuple[int, ...]
    var_shape: tuple[int, ...]

    @property
    def spec(self) -> str:
        """TF's slice spec string: "10 4 0,5:0,4" (full shape, then offset,length per axis)."""
        shape = " ".join(str(d) for d in self.full_shape)
        slices = ":".join(f"{o},{n}" for o, n in zip(self.var_offset, self.var_shape))
        return f"{shape} {slices}"

    @property
    def index(self) -> tuple[slice, ...]:
        """The part's region of the full array, for `full[info.index]`."""
        return tuple(slice(o, o + n) for o, n in zip(self.var_offset, self.var_shape))


# ------------------------------------------------------- initial values
class _GlobalValue:
    """The one initial value of a partitioned variable, cut into parts without building it when possible.

    Computed directly per part: arrays and Variables (sliced), Zeros, Ones,
    scalar Constant, Identity, and the uniform draws of RandomUniform
    (floating dtypes) and VarianceScaling(distribution="uniform") (which
    includes the default GlorotUniform): the PCG64 stream is advanced past
    the elements before each contiguous run (one 64-bit draw per element).
    Anything else (normal draws, whose rejection sampling uses a variable
    number of draws; Orthogonal; arbitrary callables) builds the whole value
    once, keeps it while this process still has parts to fill, and slices it.
    """

    def __init__(self, initializer: Any, full_name: str, full_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.initializer = initializer
        self.full_name = full_name
        self.full_shape = full_shape
        self.dtype = dtype
        self.parts: list[weakref.ref[Any]] = []
        self._whole: Any = None

    def part(self, info: SaveSliceInfo) -> Any:
        direct = self._direct(info)
        if direct is not None:
            return direct
        if self._whole is None:
            self._whole = self._compute_whole()
        value = self._whole[info.index].copy()
        if self._all_local_parts_done(info):
            self._whole = None
        return value

    def _all_local_parts_done(self, current: SaveSliceInfo) -> bool:
        for ref in self.parts:
            part = ref()
            if part is None or part.save_slice_info == current:
                continue
            if part.is_owned and not part.is_initialized:
                return False
        return True

    def _compute_whole(self) -> Any:
        init = self.initializer
        if isinstance(init, Variable):
            return init._materialize()
        if isinstance(init, Initializer):
            value = init(self.full_shape, self.dtype, name=self.full_name)
        else:
            value = init(self.full_shape, self.dtype)
        if not (isinstance(value, np.ndarray) or devices.is_device_array(value)):
            value = np.asarray(value)
        if tuple(value.shape) != self.full_shape:
            raise ShapeMismatchError(
                f"the initializer of partitioned variable '{self.full_name}' returned shape "
                f"{tuple(value.shape)}, the variable was created with shape {self.full_shape}")
        return value

    def _direct(self, info: SaveSliceInfo) -> Any:  # a NumPy array, a CuPy slice of a CuPy value, or None
        init, dt, shape = self.initializer, self.dtype, info.var_shape
        if isinstance(init, np.ndarray) or devices.is_device_array(init):
            return init[info.index]
        if type(init) is Zeros:
            return np.zeros(shape, dtype=dt)
        if type(init) is Ones:
            return np.ones(shape, dtype=dt)
        if type(init) is Constant and np.ndim(init.value) == 0:
            return np.full(shape, init.value, dtype=dt)
        if type(init) is Identity and len(shape) == 2:
            k = info.var_offset[0] - info.var_offset[1]  # part (a, b) is whole (r0 + a, c0 + b)
            return (init.gain * np.eye(shape[0], shape[1], k=k)).astype(dt)
        if type(init) is RandomUniform and dtypes.is_floating(dt):
            return self._uniform(init, init.minval, init.maxval, info)
        if isinstance(init, VarianceScaling) and init.distribution == "uniform" and \
                type(init).__call__ is VarianceScaling.__call__ and dtypes.is_floating(dt):
            fan_in, fan_out = compute_fans(self.full_shape)  # fans of the WHOLE shape, as TF1 partition_info
            n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[init.mode]
            limit = math.sqrt(3.0 * init.scale / max(1.0, n))
            return self._uniform(init, -limit, limit, info)
        return None

    def _uniform(self, init: Initializer, low: float, high: float, info: SaveSliceInfo) -> npt.NDArray[Any] | None:
        """`rng.uniform(low, high, full_shape)[info.index]` drawing only the part's elements."""
        full, offset, shape = self.full_shape, info.var_offset, info.var_shape
        axes = [axis for axis in range(len(full)) if shape[axis] != full[axis]]
        if len(axes) > 1:
            return None
        axis = axes[0] if axes else 0
        inner = math.prod(full[axis + 1:])
        runs = math.prod(full[:axis])
        if runs > _MAX_RUNS:
            return None
        rng = init._rng(self.full_name)
        run_length = shape[axis] * inner
        out = np.empty((runs, run_length), dtype=np.float64)
        position = 0
        for run in range(runs):
            start = (run * full[axis] + offset[axis]) * inner
            if start > position:
                rng.bit_generator.advance(start - position)  # type: ignore[attr-defined]  # PCG64: as if that many 64-bit draws
            out[run] = rng.uniform(low, high, run_length)
            position = start + run_length
        return out.reshape(shape).astype(self.dtype)


class _PartInitializer(Initializer):
    """The initializer of one part: its slice of the partitioned variable's one global value."""

    def __init__(self, source: _GlobalValue, info: SaveSliceInfo) -> None:
        self._global = source
        self.info = info

    def __call__(self, shape: Any, dtype: Any = None, *, name: str | None = None) -> npt.NDArray[Any]:
        value: npt.NDArray[Any] = self._global.part(self.info)
        return value

    def __repr__(self) -> str:
        return f"PartOf({self._global.initializer!r}, {self.info.spec!r})"


# ---------------------------------------------------- PartitionedVariable
class PartitionedVariable:
    """A variable stored as parts along one axis, as tf.compat.v1 PartitionedVariable.

    Iterating gives the part Variables ("NAME/part_0", "NAME/part_1", ...),
    each with its `save_slice_info`; the parts are what the store, its
    collections and device functions see.

    Attributes:
      name: full name of the whole variable ("model/embedding").
      shape: the whole shape.
      dtype: NumPy dtype.
      partitions: parts per axis (one entry > 1 at most), as TF's _get_partitions().
    """

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype, parts: list[Any],
                 partitions: list[int]) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.partitions = list(partitions)
        self._parts = list(parts)

    @property
    def slice_dim(self) -> int:
        """The sliced axis (0 when there is one part)."""
        return slice_dim_and_num_slices(self.partitions)[0]

    @property
    def variables(self) -> list[Any]:
        """The part Variables in order (a new list)."""
        return list(self._parts)

    @property
    def save_slice_infos(self) -> list[SaveSliceInfo]:
        """Each part's SaveSliceInfo, in order."""
        return [p.save_slice_info for p in self._parts]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, index: int) -> Any:
        return self._parts[index]

    def numpy(self) -> npt.NDArray[Any]:
        """The whole value on the host: the parts concatenated along `slice_dim`.

        Raises:
          NotOwnedError: a part is owned by another rank (naming it and its owner).
        """
        return np.concatenate([p.numpy() for p in self._parts], axis=self.slice_dim)

    def assign(self, value: Any) -> PartitionedVariable:
        """Assigns each part its slice of `value` (exactly `self.shape`).

        Raises:
          ShapeMismatchError: `value` has another shape. NotOwnedError: a part is owned elsewhere.
        """
        array = value if isinstance(value, np.ndarray) or devices.is_device_array(value) else np.asarray(value)
        if tuple(array.shape) != self.shape:
            raise ShapeMismatchError(f"cannot assign a value of shape {tuple(array.shape)} to partitioned variable "
                                     f"'{self.name}' of shape {self.shape}")
        for part in self._parts:
            part.assign(array[part.save_slice_info.index])
        return self

    def __repr__(self) -> str:
        return (f"<varstore.PartitionedVariable '{self.name}' shape={self.shape} dtype={dtypes.dtype_name(self.dtype)} "
                f"parts={len(self._parts)}>")


# ------------------------------------------------------------ get_variable
def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or devices.is_device_array(value)


def get_partitioned_variable(store: Any, full: str, shape: tuple[int | None, ...] | None, dtype: Any,
                             initializer: Any, partitioner: Partitioner, reuse: Any, trainable: bool,
                             collections: Sequence[str] | None, device: Any, extras: Any = None) -> PartitionedVariable:
    """Gets or creates partitioned variable `full` in `store`, as TF's `_get_partitioned_variable`.

    Called by VariableStore.get_variable with the store's lock held.

    Raises:
      PartitionError: an unpartitioned variable `full` (or parts of another
        partitioning) exists; reuse with other partitions; a bad partition list.
      VariableExistsError / VariableNotFoundError: the reuse rules of get_variable.
      ShapeMismatchError / DtypeMismatchError: reuse with another shape / dtype.
    """
    if full in store._shared:
        raise PartitionError(
            f"get_variable('{full}'): a partitioner was given, but an unpartitioned variable '{full}' exists; "
            f"it was created without partitioner: choose another name, or leave partitioner out to share it")
    dt = None if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(initializer, type):
        initializer = initializer()
    if (initializer is not None and not callable(initializer)) or isinstance(initializer, Variable):
        if not isinstance(initializer, Variable):
            initializer = convert_value(initializer, dt, what=f"variable '{full}'")
        value_shape = tuple(initializer.shape)
        if shape is not None and tuple(shape) != value_shape:
            raise ShapeMismatchError(f"get_variable('{full}'): shape {tuple(shape)} differs from the shape "
                                     f"{value_shape} of the value given as initializer; leave shape out")
        shape = value_shape
        dt = dt if dt is not None else np.dtype(initializer.dtype)
    existing: PartitionedVariable | None = store._partitioned.get(full)
    if existing is not None:
        if reuse is False:
            raise VariableExistsError(
                f"partitioned variable '{full}' already exists; to share it, open the scope with reuse=True "
                f"or reuse=vs.AUTO_REUSE (as tf.compat.v1.variable_scope), or choose another name")
        if shape is not None and (len(shape) != len(existing.shape) or
                                  any(d is not None and d != e for d, e in zip(shape, existing.shape))):
            raise ShapeMismatchError(f"cannot reuse partitioned variable '{full}': get_variable asked for shape "
                                     f"{tuple(shape)}, the existing variable has shape {existing.shape}")
        if dt is not None and dt != existing.dtype:
            raise DtypeMismatchError(f"cannot reuse partitioned variable '{full}': get_variable asked for dtype "
                                     f"{dtypes.dtype_name(dt)}, the existing variable has {dtypes.dtype_name(existing.dtype)}")
        partitions = call_partitioner(partitioner, existing.shape, existing.dtype, full)
        if partitions != existing.partitions:
            raise PartitionError(f"cannot reuse partitioned variable '{full}': the partitioner gives partitions "
                                 f"{partitions}, the existing variable has {existing.partitions}")
        return existing
    if reuse is True:
        raise VariableNotFoundError(
            f"partitioned variable '{full}' does not exist, or was not created with get_variable(); create it "
            f"first, or open the scope with reuse=vs.AUTO_REUSE to create it when missing")
    if shape is None or any(d is None for d in shape):
        raise InitializerError(f"get_variable('{full}') needs a fully defined shape to create a partitioned "
                               f"variable, got {shape}; pass shape=... or an array as initializer")
    full_shape = tuple(int(d) for d in shape if d is not None)
    dt = dt if dt is not None else np.dtype(np.float32)
    partitions = call_partitioner(partitioner, full_shape, dt, full)
    slice_dim, num_slices = slice_dim_and_num_slices(partitions)
    if f"{full}/part_0" in store._shared:
        raise PartitionError(
            f"get_variable('{full}'): variables '{full}/part_*' exist from another partitioning than the "
            f"partitioner's {num_slices} parts; use the same partitioner, or another name")
    if initializer is None:
        if dtypes.is_floating(dt):
            initializer = GlorotUniform()
        elif dt.kind in "biu":
            initializer = Zeros()
        else:
            raise InitializerError(f"get_variable('{full}'): dtype {dtypes.dtype_name(dt)} has no default "
                                   f"initializer; pass initializer=...")
    elif not callable(initializer) and not _is_array(initializer):
        raise InitializerError(f"get_variable('{full}'): initializer {initializer!r} is not callable")
    source = _GlobalValue(initializer, full, full_shape, dt)
    parts = []
    for index, (offset, part_shape) in enumerate(iter_slices(full_shape, num_slices, slice_dim)):
        info = SaveSliceInfo(full, full_shape, tuple(offset), tuple(part_shape))
        part = store._create(f"{full}/part_{index}", tuple(part_shape), dt, _PartInitializer(source, info),
                             trainable, collections, device, slice_info=info, extras=extras)
        source.parts.append(weakref.ref(part))
        parts.append(part)
    result = PartitionedVariable(full, full_shape, dt, parts, partitions)
    store._partitioned[full] = result
    return result

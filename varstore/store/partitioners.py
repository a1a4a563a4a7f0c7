"""Partitioners, as TF1: how many parts along which axis (fixed_size, variable_axis_size, min_max) and the slicing rules.

Sources (TensorFlow python/ops/partitioned_variables.py and
python/ops/variable_scope.py, TF 2.x `tf.compat.v1`):
- `fixed_size_partitioner`, `variable_axis_size_partitioner`,
  `min_max_variable_partitioner`: partitioned_variables.py, formulas copied
  (float arithmetic and rounding included).
- validation of a partition list: variable_scope.py `_call_partitioner`;
  which axis is sliced: `_get_slice_dim_and_num_slices`; part sizes (the
  first `dim % n` parts get one extra row): `_iter_slices`.
Pure arithmetic on shapes and dtypes: creates no variable (partitioning.py does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from varstore.errors import PartitionError

__all__ = [
    "Partitioner",
    "call_partitioner",
    "fixed_size_partitioner",
    "iter_slices",
    "min_max_variable_partitioner",
    "slice_dim_and_num_slices",
    "variable_axis_size_partitioner",
]

#: A partitioner: called as partitioner(shape=(d0, d1, ...), dtype=np.dtype) -> partitions per axis.
Partitioner = Callable[..., Sequence[int]]


def _element_size(dtype: Any, bytes_per_string_element: int) -> int:
    dt = np.dtype(dtype)
    return bytes_per_string_element if dt.kind in "USO" else dt.itemsize


def fixed_size_partitioner(num_shards: int, axis: int = 0) -> Partitioner:
    """`num_shards` parts along `axis` (fewer when the axis is shorter), as tf.compat.v1.fixed_size_partitioner.

    Args:
      num_shards: number of parts wanted (>= 1).
      axis: the axis to slice.

    Returns:
      A partitioner for get_variable(partitioner=...).
    """
    if int(num_shards) < 1:
        raise PartitionError(f"fixed_size_partitioner needs num_shards >= 1, got {num_shards}")

    def _partitioner(shape: Sequence[int], **unused: Any) -> list[int]:
        partitions = [1] * len(shape)
        partitions[axis] = min(int(num_shards), int(shape[axis]))
        return partitions

    return _partitioner


def variable_axis_size_partitioner(max_shard_bytes: int, axis: int = 0, bytes_per_string_element: int = 16,
                                   max_shards: int | None = None) -> Partitioner:
    """Parts of at most `max_shard_bytes` bytes along `axis`, as tf.compat.v1.variable_axis_size_partitioner.

    Each part holds floor(max_shard_bytes / bytes_per_slice) slices of `axis`
    (at least one); `max_shards` caps the count (then parts may be larger).

    Args:
      max_shard_bytes: bytes per part at most (>= 1).
      axis: the axis to slice.
      bytes_per_string_element: size assumed for a string element (bytes).
      max_shards: upper bound on the number of parts, or None.

    Raises:
      PartitionError: a non-positive byte count or max_shards.
    """
    if max_shard_bytes < 1 or bytes_per_string_element < 1:
        raise PartitionError(
            f"variable_axis_size_partitioner needs positive max_shard_bytes and bytes_per_string_element, "
            f"got {max_shard_bytes} and {bytes_per_string_element}")
    if max_shards is not None and max_shards < 1:
        raise PartitionError(f"variable_axis_size_partitioner needs max_shards >= 1, got {max_shards}")

    def _partitioner(shape: Sequence[int], dtype: Any) -> list[int]:
        element_size = _element_size(dtype, bytes_per_string_element)
        partitions = [1] * len(shape)
        bytes_per_slice = 1.0 * (math.prod(shape) / shape[axis]) * element_size
        slices_per_shard = max(1, math.floor(max_shard_bytes / bytes_per_slice))
        axis_shards = int(math.ceil(1.0 * shape[axis] / slices_per_shard))
        if max_shards:
            axis_shards = min(max_shards, axis_shards)
        partitions[axis] = axis_shards
        return partitions

    return _partitioner


def min_max_variable_partitioner(max_partitions: int = 1, axis: int = 0, min_slice_size: int = 256 << 10,
                                 bytes_per_string_element: int = 16) -> Partitioner:
    """Parts of at least `min_slice_size` bytes, at most `max_partitions` of them, as tf.compat.v1.min_max_variable_partitioner.

    parts = max(1, min(shape[axis], max_partitions, ceil(total_bytes / min_slice_size))).

    Args:
      max_partitions: upper bound on the number of parts.
      axis: the axis to slice.
      min_slice_size: bytes per part at least (256 KiB by default, as TF).
      bytes_per_string_element: size assumed for a string element (bytes).
    """

    def _partitioner(shape: Sequence[int], dtype: Any) -> list[int]:
        if axis >= len(shape):
            raise PartitionError(f"cannot partition a variable along axis {axis} when its shape is only {tuple(shape)}")
        total_size_bytes = math.prod(shape) * _element_size(dtype, bytes_per_string_element)
        partitions = total_size_bytes / min_slice_size
        partitions_list = [1] * len(shape)
        partitions_list[axis] = max(1, min(int(shape[axis]), max_partitions, int(math.ceil(partitions))))
        return partitions_list

    return _partitioner


def call_partitioner(partitioner: Partitioner, shape: tuple[int, ...], dtype: np.dtype, name: str) -> list[int]:
    """Calls `partitioner(shape=, dtype=)` and validates its answer, as TF's `_call_partitioner`.

    Raises:
      PartitionError: rank 0, not a sequence, wrong length, a count < 1,
        more than one sliced axis, or more parts than the axis has rows.
    """
    if len(shape) < 1:
        raise PartitionError(f"get_variable('{name}'): a partitioned variable must have rank at least 1, "
                             f"shape is {shape}; leave partitioner out for scalars")
    slicing = partitioner(shape=shape, dtype=dtype)
    if not isinstance(slicing, (list, tuple)):
        raise PartitionError(f"get_variable('{name}'): the partitioner must return a list, returned {slicing!r}")
    slicing = [int(p) for p in slicing]
    if len(slicing) != len(shape):
        raise PartitionError(f"get_variable('{name}'): the partitioner returned {slicing}, which does not match "
                             f"the variable's rank {len(shape)} (shape {shape})")
    if any(p < 1 for p in slicing):
        raise PartitionError(f"get_variable('{name}'): the partitioner returned zero parts for some axes: {slicing}")
    if sum(p > 1 for p in slicing) > 1:
        raise PartitionError(f"get_variable('{name}'): a variable can be sliced along one axis only: "
                             f"shape {shape}, partitions {slicing}")
    for axis, count in enumerate(slicing):
        if count > shape[axis]:
            raise PartitionError(f"get_variable('{name}'): cannot make {count} parts of axis {axis} of size "
                                 f"{shape[axis]} (shape {shape})")
    return slicing


def slice_dim_and_num_slices(partitions: Sequence[int]) -> tuple[int, int]:
    """(sliced axis, number of parts); (0, 1) when nothing is sliced, as TF's `_get_slice_dim_and_num_slices`."""
    for axis, count in enumerate(partitions):
        if count > 1:
            return axis, int(count)
    return 0, 1


def iter_slices(full_shape: Sequence[int], num_slices: int, slice_dim: int) -> Iterator[tuple[list[int], list[int]]]:
    """(offset, shape) of each part, the first `full_shape[slice_dim] % num_slices` parts one row longer, as TF's `_iter_slices`."""
    excess = full_shape[slice_dim] % num_slices
    offset = [0] * len(full_shape)
    base = full_shape[slice_dim] // num_slices
    for i in range(num_slices):
        shape = list(full_shape)
        shape[slice_dim] = base + (1 if i < excess else 0)
        yield offset[:], shape
        offset[slice_dim] += shape[slice_dim]

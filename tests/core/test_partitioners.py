"""Partitioners (varstore/store/partitioners.py): values worked out from TF's formulas, the validation and slicing rules."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.store.partitioners import call_partitioner, iter_slices, slice_dim_and_num_slices


def test_fixed_size_partitioner_caps_at_the_axis_length():
    assert vs.fixed_size_partitioner(4)(shape=(10, 3), dtype=np.float32) == [4, 1]
    assert vs.fixed_size_partitioner(4, axis=1)(shape=(10, 3), dtype=np.float32) == [1, 3]
    with pytest.raises(vs.PartitionError, match="num_shards"):
        vs.fixed_size_partitioner(0)


def test_variable_axis_size_partitioner_keeps_parts_under_max_bytes():
    # rows of 64 float32 = 256 bytes; 1000 bytes hold 3 rows -> ceil(10 / 3) = 4 parts
    assert vs.variable_axis_size_partitioner(1000)(shape=(10, 64), dtype=np.float32) == [4, 1]
    assert vs.variable_axis_size_partitioner(1000, max_shards=2)(shape=(10, 64), dtype=np.float32) == [2, 1]
    # a row larger than max_shard_bytes: one row per part
    assert vs.variable_axis_size_partitioner(100)(shape=(5, 64), dtype=np.float32) == [5, 1]
    # strings count bytes_per_string_element each
    assert vs.variable_axis_size_partitioner(64, bytes_per_string_element=16)(shape=(8, 2), dtype=np.str_) == [4, 1]
    with pytest.raises(vs.PartitionError, match="positive"):
        vs.variable_axis_size_partitioner(0)


def test_min_max_variable_partitioner_as_tf_docstring_example():
    # TF's docstring: float32 [1024, 1024], 256 KiB slices -> 16 parts, capped by max_partitions
    assert vs.min_max_variable_partitioner(max_partitions=32)(shape=(1024, 1024), dtype=np.float32) == [16, 1]
    assert vs.min_max_variable_partitioner(max_partitions=4)(shape=(1024, 1024), dtype=np.float32) == [4, 1]
    assert vs.min_max_variable_partitioner(max_partitions=8, min_slice_size=1)(shape=(3, 4), dtype=np.float32) == [3, 1]
    assert vs.min_max_variable_partitioner(max_partitions=8)(shape=(3, 4), dtype=np.float32) == [1, 1]
    with pytest.raises(vs.PartitionError, match="axis 2"):
        vs.min_max_variable_partitioner(axis=2)(shape=(3, 4), dtype=np.float32)


def test_partition_lists_are_validated_as_tf():
    with pytest.raises(vs.PartitionError, match="one axis only"):
        call_partitioner(lambda shape, dtype: [2, 2], (4, 4), np.dtype(np.float32), "x")
    with pytest.raises(vs.PartitionError, match="rank 2"):
        call_partitioner(lambda shape, dtype: [2], (4, 4), np.dtype(np.float32), "x")
    with pytest.raises(vs.PartitionError, match="zero parts"):
        call_partitioner(lambda shape, dtype: [0, 1], (4, 4), np.dtype(np.float32), "x")
    with pytest.raises(vs.PartitionError, match="cannot make 5 parts"):
        call_partitioner(lambda shape, dtype: [5, 1], (4, 4), np.dtype(np.float32), "x")


def test_slices_give_the_first_parts_the_extra_rows():
    assert list(iter_slices([10, 4], 3, 0)) == [([0, 0], [4, 4]), ([4, 0], [3, 4]), ([7, 0], [3, 4])]
    assert list(iter_slices([2, 5], 2, 1)) == [([0, 0], [2, 3]), ([0, 3], [2, 2])]
    assert slice_dim_and_num_slices([1, 3]) == (1, 3)
    assert slice_dim_and_num_slices([1, 1]) == (0, 1)

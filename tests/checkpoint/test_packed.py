"""The packed blob (checkpoint/format/packed.py): one run rule for packing and unpacking, views and checksums."""

from __future__ import annotations

import numpy as np
import pytest

from varstore.checkpoint.format.checksum import crc32c_of
from varstore.checkpoint.format.manifest import Record, assign_paths
from varstore.checkpoint.format.packed import pack_window, packed_checksum_failure, packed_views, regular_run
from varstore.errors import CorruptCheckpointError


def _records(shapes: list[tuple[int, ...]], dtype: str = "float32") -> list[Record]:
    itemsize = np.dtype(dtype).itemsize
    records = [Record(f"v{i}", shape, dtype, int(np.prod(shape)) * itemsize, True, (), None)
               for i, shape in enumerate(shapes)]
    assign_paths(records, 1 << 20)
    return records


def _columns(records: list[Record]) -> dict[str, list]:
    return {"shape": [list(r.shape) for r in records], "dtype": [r.dtype for r in records],
            "offset": [r.offset for r in records], "nbytes": [r.nbytes for r in records],
            "checksum": [r.checksum for r in records]}


def test_regular_run_groups_equal_shapes_at_a_regular_stride() -> None:
    offsets = [0, 64, 128, 192, 256, 320]
    shapes = [(4,), (4,), (4,), (2,), (2,), (4,)]
    dtypes = ["float32"] * 6
    positions = range(6)
    assert regular_run(offsets, shapes, dtypes, positions, 0, 16) == (3, 64)  # three (4,) at stride 64
    assert regular_run(offsets, shapes, dtypes, positions, 3, 8) == (5, 64)
    assert regular_run(offsets, shapes, dtypes, positions, 5, 16) == (6, 16)  # the last one: a run of one
    assert regular_run([0, 8], [(4,), (4,)], dtypes, range(2), 0, 16) == (1, 16)  # next one too close
    assert regular_run([0, 0], [(0,), (0,)], dtypes, range(2), 0, 0) == (1, 1)  # zero-size
    assert regular_run([0, 64, 160], [(4,)] * 3, dtypes, range(3), 0, 16) == (2, 64)  # stride breaks
    assert regular_run([0, 64, 128], [(4,)] * 3, ["float32", "int32", "float32"], range(3), 0, 16) == (1, 64)
    # positions pick a subset of manifest indices (the reader's batch of restorable variables)
    assert regular_run(offsets, shapes, dtypes, [0, 2, 5], 0, 16) == (2, 128)  # 0 and 128; 320 breaks it


def test_pack_window_and_packed_views_round_trip_with_checksums() -> None:
    shapes = [(4,), (4,), (4,), (3, 2), (3, 2), (), (0,), (5,)]
    records = _records(shapes)
    values = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) + 10 * i for i, s in enumerate(shapes)]
    data = pack_window(records, values, checksum=True)
    assert data is not None
    blob = bytearray(data)
    assert [r.checksum for r in records] == [crc32c_of(v) for v in values]
    views = packed_views(blob, _columns(records), [r.name for r in records], list(range(len(records))), "m.h5")
    for view, value in zip(views, values):
        assert view.shape == value.shape and view.dtype == value.dtype
        np.testing.assert_array_equal(view, value)
    assert views[0].base is views[1].base  # one strided block for the run of three
    subset = packed_views(blob, _columns(records), [r.name for r in records], [7, 3], "m.h5")
    np.testing.assert_array_equal(subset[0], values[7])
    np.testing.assert_array_equal(subset[1], values[3])


def test_pack_window_of_empty_records_is_none() -> None:
    records = _records([(0,), (0,)])
    assert pack_window(records, [np.zeros(0, np.float32)] * 2, checksum=True) is None
    assert [r.checksum for r in records] == [0, 0]


def test_packed_checksum_failure_names_the_first_bad_index() -> None:
    records = _records([(4,), (4,), (4,)])
    values = [np.full(4, i, np.float32) for i in range(3)]
    blob = bytearray(pack_window(records, values, checksum=True))
    columns = _columns(records)
    assert packed_checksum_failure(blob, columns, [0, 1, 2]) is None
    blob[records[1].offset] ^= 1
    index, found = packed_checksum_failure(blob, columns, [0, 1, 2])
    assert index == 1 and found == crc32c_of(bytes(blob[records[1].offset:records[1].offset + 16]))
    columns["offset"][2] = len(blob)  # past the end of the blob
    assert packed_checksum_failure(blob, columns, [2]) == (2, -1)


def test_packed_views_refuse_a_variable_outside_the_blob() -> None:
    records = _records([(4,), (4,)])
    blob = bytearray(pack_window(records, [np.ones(4, np.float32)] * 2, checksum=False))
    columns = _columns(records)
    columns["offset"][1] = 128  # a regular stride, but the second one would end past the blob
    with pytest.raises(CorruptCheckpointError, match=r"'v1' in 'm.h5' lies outside the packed blob"):
        packed_views(blob, columns, ["v0", "v1"], [0, 1], "m.h5")
    columns = _columns(records)
    columns["dtype"][0] = "float99"
    with pytest.raises(CorruptCheckpointError, match="'v0' in 'm.h5' has an unknown dtype 'float99'"):
        packed_views(blob, columns, ["v0", "v1"], [0, 1], "m.h5")


def _regular_run_one_by_one(offsets: list, shapes: list, dtypes: list, positions: list, first: int,
                            size: int) -> tuple[int, int]:
    """regular_run's rule, one variable at a time (what the block compares must agree with)."""
    end, count, start = first + 1, len(positions), offsets[positions[first]]
    if end >= count or not size or start is None:
        return end, size or 1
    stride = offsets[positions[end]] - start if offsets[positions[end]] is not None else 0
    if stride < size:
        return end, size
    while end < count and (offsets[positions[end]] == start + (end - first) * stride
                           and shapes[positions[end]] == shapes[positions[first]]
                           and dtypes[positions[end]] == dtypes[positions[first]]):
        end += 1
    return end, stride


@pytest.mark.parametrize("count", [1, 2, 17, 100, 1000])
@pytest.mark.parametrize("seed", range(6))
def test_regular_run_finds_the_same_run_ends_as_the_one_by_one_rule(count: int, seed: int) -> None:
    rng = np.random.default_rng(seed * 1000 + count)
    offsets = [64 * i for i in range(count)]
    shapes = [(4,)] * count
    dtypes = ["float32"] * count
    for _ in range(rng.integers(0, 4)):  # breaks anywhere, also deep inside a doubled block
        at = int(rng.integers(0, count))
        kind = rng.integers(0, 4)
        if kind == 0:
            shapes[at] = (2, 2)  # same bytes, other shape
        elif kind == 1:
            dtypes[at] = "int32"
        elif kind == 2:
            offsets[at:] = [o + 64 for o in offsets[at:]]  # a gap
        else:
            offsets[at] = None  # not packed
    positions = list(range(count)) if seed % 2 else [i for i in range(count) if offsets[i] is not None]
    k = 0
    while k < len(positions):
        expected = _regular_run_one_by_one(offsets, shapes, dtypes, positions, k, 16)
        assert regular_run(offsets, shapes, dtypes, positions, k, 16) == expected, (k, expected)
        k = expected[0]

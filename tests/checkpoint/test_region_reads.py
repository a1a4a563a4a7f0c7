"""checkpoint/read/regions.py read_regions: several regions of one array in one pass, each stored byte read and checked once."""

from __future__ import annotations

import numpy as np
import pytest

from varstore.checkpoint.read.reader import open_varstore
from varstore.checkpoint.read.regions import RegionTarget, read_region, read_regions
from varstore.distributed import SingleProcess, save_collective
from varstore.distributed.shards import LocalShard, sharded_state
from varstore.errors import ChecksumError

FULL = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)


def _save(path, boxes: list[tuple[slice, slice]]) -> None:
    """A collective save (one process) of FULL written as `boxes`: each a recorded write with its crc32c."""
    shards = [LocalShard("w", FULL.shape, (rows.start, cols.start), FULL[rows, cols].copy()) for rows, cols in boxes]
    save_collective(path, sharded_state(shards, SingleProcess()))


ROWS = [(slice(r, r + 4), slice(0, 24)) for r in range(0, 16, 4)]  # 4 row blocks, as P("x") writes
COLUMNS = [(slice(0, 16), slice(c, c + 3)) for c in range(0, 24, 3)]  # 8 column blocks, as P(None, "x")


class Counted:
    """Counts the reads and bytes through a reader's Storage."""

    def __init__(self, reader, monkeypatch) -> None:
        self.calls, self.bytes = 0, 0
        original = reader.storage.read_range

        def read_range(key, offset, length, out=None):
            self.calls += 1
            self.bytes += length
            return original(key, offset, length, out)

        monkeypatch.setattr(reader.storage, "read_range", read_range)


def _targets(boxes, dtype=np.float32) -> list[RegionTarget]:
    return [RegionTarget((r.start, c.start), (r.stop - r.start, c.stop - c.start),
                         np.zeros((r.stop - r.start, c.stop - c.start), dtype=dtype)) for r, c in boxes]


@pytest.mark.parametrize("buffer_bytes", [1, 1 << 20])
def test_column_regions_of_row_writes_read_each_byte_once(tmp_path, monkeypatch, buffer_bytes):
    _save(tmp_path / "c.h5", ROWS)
    with open_varstore(tmp_path / "c.h5") as reader:
        counted = Counted(reader, monkeypatch)
        targets = _targets(COLUMNS)
        read_regions(reader, "w", targets, verify=True, buffer_bytes=buffer_bytes)
    for (rows, cols), target in zip(COLUMNS, targets):
        np.testing.assert_array_equal(target.out, FULL[rows, cols])
    assert counted.bytes == FULL.nbytes  # every row write read whole once, checked, scattered into 8 columns
    assert counted.calls == (16 if buffer_bytes == 1 else 4)  # one row per slab, or one read per write


def test_row_regions_of_column_writes_read_whole_rows_once(tmp_path, monkeypatch):
    _save(tmp_path / "c.h5", COLUMNS)
    with open_varstore(tmp_path / "c.h5") as reader:
        counted = Counted(reader, monkeypatch)
        targets = _targets(ROWS)
        read_regions(reader, "w", targets)
    for (rows, cols), target in zip(ROWS, targets):
        np.testing.assert_array_equal(target.out, FULL[rows, cols])
    assert (counted.bytes, counted.calls) == (FULL.nbytes, 1)  # the 8 column writes share rows: one read


def test_a_narrow_write_is_read_by_its_own_runs_not_as_whole_rows(tmp_path, monkeypatch):
    wide = [(slice(0, 16), slice(c, c + 1)) for c in range(24)]  # 24 one-column writes: each 1/24 of a row
    _save(tmp_path / "c.h5", wide)
    with open_varstore(tmp_path / "c.h5") as reader:
        counted = Counted(reader, monkeypatch)
        targets = _targets([(slice(2, 9), slice(5, 6))])
        read_regions(reader, "w", targets)
    np.testing.assert_array_equal(targets[0].out, FULL[2:9, 5:6])
    assert counted.bytes == 16 * 4  # the one write the region meets, read whole (16 rows of 4 bytes) to check it


def test_regions_that_hold_their_writes_are_read_in_place_and_cast(tmp_path, monkeypatch):
    _save(tmp_path / "c.h5", ROWS)
    with open_varstore(tmp_path / "c.h5") as reader:
        counted = Counted(reader, monkeypatch)
        halves = [(slice(0, 8), slice(0, 24)), (slice(8, 16), slice(0, 24))]
        targets = _targets(halves)
        read_regions(reader, "w", targets)
        assert (counted.bytes, counted.calls) == (FULL.nbytes, 4)  # each write straight into its half
        wide = _targets(halves, dtype=np.float64)
        read_regions(reader, "w", wide)
    for (rows, cols), target, cast in zip(halves, targets, wide):
        np.testing.assert_array_equal(target.out, FULL[rows, cols])
        assert cast.out.dtype == np.float64
        np.testing.assert_array_equal(cast.out, FULL[rows, cols])


def test_a_corrupt_write_fails_the_batch_unless_verify_is_off(tmp_path, monkeypatch):
    import h5py

    _save(tmp_path / "c.h5", ROWS)
    with h5py.File(tmp_path / "c.h5", "r") as f:
        offset = f["w"].id.get_offset()
    with open(tmp_path / "c.h5", "r+b") as f:  # one float of the third row write (rows 8..11)
        f.seek(offset + (9 * 24 + 7) * 4)
        f.write(np.float32(-1).tobytes())
    with open_varstore(tmp_path / "c.h5") as reader:
        with pytest.raises(ChecksumError, match=r"'w' in .*region at \[8, 0\] of shape \[4, 24\]"):
            read_regions(reader, "w", _targets(COLUMNS))
        out = np.zeros((16, 3), dtype=np.float32)
        with pytest.raises(ChecksumError, match=r"region at \[8, 0\]"):
            read_region(reader, "w", (0, 6), (16, 3), out)
        counted = Counted(reader, monkeypatch)
        targets = _targets(COLUMNS)
        read_regions(reader, "w", targets, verify=False)
    assert targets[2].out[9, 1] == -1 and targets[0].out[9, 0] == FULL[9, 0]
    assert (counted.bytes, counted.calls) == (FULL.nbytes, 1)  # unchecked: the 8 columns' rows in one read


def test_the_whole_array_and_empty_regions(tmp_path):
    _save(tmp_path / "c.h5", ROWS)
    with open_varstore(tmp_path / "c.h5") as reader:
        whole = RegionTarget((0, 0), (16, 24), np.zeros((16, 24), dtype=np.float32))
        empty = RegionTarget((3, 0), (0, 24), np.zeros((0, 24), dtype=np.float32))
        read_regions(reader, "w", [whole, empty])
    np.testing.assert_array_equal(whole.out, FULL)

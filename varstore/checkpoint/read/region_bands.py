"""The byte layer of region reads: a box's C-order byte runs, and bands of units read once through one bounded buffer.

regions.py decides what to read (the regions a process asked for, the
recorded writes that check them); this module reads a contiguous extent of
one array. Units (recorded writes with their crc32c, or the regions
themselves) of the same rows (axis 0) form a band, read in slabs of rows
through one reused buffer: one positional read per slab when the band's
columns are whole rows of the array, or dense enough that reading whole rows
beats one read per row; else one read per byte run. Each slab feeds the
crc32c of every unit in it and is scattered into every region it meets, so
each stored byte is read and checked once. A unit lying wholly inside the
one region that needs it is read straight into that region's memory. Knows
no manifest, reader or file format: it gets a Storage, a key and a base offset.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.format.checksum import crc32c_of
from varstore.store.values import check_fits

__all__ = ["byte_runs", "RegionTarget", "Unit", "BandReader", "overlap", "DEFAULT_BUFFER_BYTES"]

#: Bytes of the one staging buffer a batched read uses (at least one row of a band is read at a time).
DEFAULT_BUFFER_BYTES = 32 << 20
#: Byte runs at least this long are read one by one; shorter ones of a dense band are read as whole rows.
_LONG_RUN = 64 << 10
#: A band whose columns are at least this fraction of a row is read as whole rows when its runs are short.
_DENSE = 1 / 8
#: A unit of at most this many byte runs (or of long runs) is read straight into the region that holds it.
_DIRECT_RUNS = 64

Box = tuple[tuple[int, ...], tuple[int, ...]]


def byte_runs(array_shape: Sequence[int], offset: Sequence[int], shape: Sequence[int],
              itemsize: int) -> list[tuple[int, int]]:
    """(start, length) in bytes of the C-order runs of region [offset, offset + shape) in an array of `array_shape`.

    One run when the region is whole rows of the outermost sliced axis (the
    usual axis-0 part); prod(shape[:axis]) runs for a part sliced along `axis`.
    """
    ndim = len(array_shape)
    if ndim == 0:
        return [(0, itemsize)]
    if any(n == 0 for n in shape):
        return []
    # the innermost axes that the region covers fully form one contiguous block
    k = ndim
    while k > 0 and offset[k - 1] == 0 and shape[k - 1] == array_shape[k - 1]:
        k -= 1
    if k == 0:
        return [(0, math.prod(array_shape) * itemsize)]
    inner = math.prod(array_shape[k:])
    run = shape[k - 1] * inner * itemsize
    strides = [math.prod(array_shape[a + 1:]) for a in range(ndim)]
    runs = []
    for index in np.ndindex(*shape[:k - 1]):
        start = sum((offset[a] + index[a]) * strides[a] for a in range(k - 1)) + offset[k - 1] * strides[k - 1]
        runs.append((start * itemsize, run))
    return runs


@dataclasses.dataclass(frozen=True)
class RegionTarget:
    """Fill `out` with `array[offset : offset + shape]`.

    Attributes:
      offset: where the region starts in the stored array, per axis.
      shape: the region's shape.
      out: host array of `shape`, writeable, any layout; cast ("unsafe", as
        RegionSource.read_into) when its dtype is not the stored one.
    """

    offset: tuple[int, ...]
    shape: tuple[int, ...]
    out: npt.NDArray[Any]


@dataclasses.dataclass
class Unit:
    """A box read whole: a recorded write (`crc` its recorded crc32c) or a requested region (`crc` None: unchecked).

    `found` is the crc32c of the bytes read so far, in the unit's C order.
    """

    offset: tuple[int, ...]
    shape: tuple[int, ...]
    crc: int | None
    found: int = 0


def overlap(a_offset: Sequence[int], a_shape: Sequence[int], b_offset: Sequence[int],
            b_shape: Sequence[int]) -> Box | None:
    """(offset, shape) where two boxes meet, None when they do not (empty boxes never meet)."""
    lows = tuple(max(x, y) for x, y in zip(a_offset, b_offset))
    highs = tuple(min(x + n, y + m) for x, n, y, m in zip(a_offset, a_shape, b_offset, b_shape))
    if any(lo >= hi for lo, hi in zip(lows, highs)):
        return None
    return lows, tuple(hi - lo for lo, hi in zip(lows, highs))


def _local(box: Box, origin: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(o - p, o - p + n) for o, n, p in zip(box[0], box[1], origin))


class BandReader:
    """Reads bands of units of one array stored C-order at `base` of `key` through one reused buffer.

    Args:
      storage: the Storage holding the bytes (read_range only).
      key, base: where the array's first byte lies (bytes).
      array_shape, dtype: the stored array (ndim >= 1).
      buffer_bytes: size of the staging buffer (bytes; at least one row of a band is staged).
    """

    def __init__(self, storage: Any, key: str, base: int, array_shape: tuple[int, ...], dtype: np.dtype,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self._storage = storage
        self._key = key
        self._base = base
        self._shape = array_shape
        self._dtype = dtype
        self._itemsize = dtype.itemsize
        self._buffer_bytes = max(1, buffer_bytes)
        self._buffer: npt.NDArray[np.uint8] | None = None

    def _scratch(self, nbytes: int) -> npt.NDArray[np.uint8]:
        if self._buffer is None or self._buffer.nbytes < nbytes:
            self._buffer = np.empty(nbytes, dtype=np.uint8)
        return self._buffer[:nbytes]

    def _read_runs(self, offset: tuple[int, ...], shape: tuple[int, ...], flat: npt.NDArray[np.uint8]) -> None:
        position = 0
        for start, length in byte_runs(self._shape, offset, shape, self._itemsize):
            self._storage.read_range(self._key, self._base + start, length, flat[position:position + length])
            position += length

    def read(self, units: Sequence[Unit], targets: Sequence[RegionTarget]) -> None:
        """Reads `units` (one band: the same rows) whole, updating their `found` crc32c, into every target they meet."""
        if len(units) == 1 and self._direct(units[0], targets):
            return
        first, rows = units[0].offset[0], units[0].shape[0]
        lows = tuple(min(u.offset[j] for u in units) for j in range(1, len(self._shape)))
        highs = tuple(max(u.offset[j] + u.shape[j] for u in units) for j in range(1, len(self._shape)))
        columns = tuple(h - lo for lo, h in zip(lows, highs))
        row_items = math.prod(self._shape[1:])
        runs = byte_runs(self._shape, (first,) + lows, (1,) + columns, self._itemsize)
        whole_rows = columns == self._shape[1:] or (
            runs[0][1] < _LONG_RUN and math.prod(columns) >= _DENSE * row_items)
        row_bytes = (row_items if whole_rows else math.prod(columns)) * self._itemsize
        step = max(1, self._buffer_bytes // max(1, row_bytes))
        for start in range(first, first + rows, step):
            count = min(step, first + rows - start)
            flat = self._scratch(count * row_bytes)
            if whole_rows:  # one read of whole rows; the columns no unit has are read and left
                offset: tuple[int, ...] = (start,) + (0,) * len(lows)
                self._storage.read_range(self._key, self._base + start * row_items * self._itemsize,
                                         flat.nbytes, flat)
                slab = flat.view(self._dtype).reshape((count,) + self._shape[1:])
            else:
                offset = (start,) + lows
                self._read_runs(offset, (count,) + columns, flat)
                slab = flat.view(self._dtype).reshape((count,) + columns)
            self._scatter(units, targets, offset, slab)

    def _scatter(self, units: Sequence[Unit], targets: Sequence[RegionTarget], offset: tuple[int, ...],
                 slab: npt.NDArray[Any]) -> None:
        for unit in units:
            piece = overlap(unit.offset, unit.shape, offset, slab.shape)
            if piece is None:
                continue
            if unit.crc is not None:  # the slab's rows of the unit continue the unit's C-order bytes
                unit.found = crc32c_of(np.ascontiguousarray(slab[_local(piece, offset)]), unit.found)
            for target in targets:
                common = overlap(piece[0], piece[1], target.offset, target.shape)
                if common is not None:
                    if target.out.dtype != slab.dtype:
                        check_fits(slab[_local(common, offset)], target.out.dtype,
                                   f"restore a region of a stored {slab.dtype.name} array")
                    np.copyto(target.out[_local(common, target.offset)], slab[_local(common, offset)],
                              casting="unsafe")

    def _direct(self, unit: Unit, targets: Sequence[RegionTarget]) -> bool:
        """Reads a unit straight into the one target that contains it, when its bytes are contiguous there."""
        meeting = [t for t in targets if overlap(unit.offset, unit.shape, t.offset, t.shape)]
        if len(meeting) != 1:
            return False
        target = meeting[0]
        inside = all(t <= u and u + n <= t + m
                     for u, n, t, m in zip(unit.offset, unit.shape, target.offset, target.shape))
        if not inside or target.out.dtype != self._dtype or not target.out.flags.writeable:
            return False
        piece = target.out[_local((unit.offset, unit.shape), target.offset)]
        if not piece.flags.c_contiguous:
            return False
        runs = byte_runs(self._shape, unit.offset, unit.shape, self._itemsize)
        if len(runs) > _DIRECT_RUNS and runs[0][1] < _LONG_RUN:
            return False  # many short runs: the buffered path reads them as whole rows
        flat = piece.reshape(-1).view(np.uint8)
        self._read_runs(unit.offset, unit.shape, flat)
        if unit.crc is not None:
            unit.found = crc32c_of(flat)
        return True

"""Region reads: hyperslabs of a stored global array into callers' buffers, and a region as a ValueSource.

A rank restoring parts (or row blocks) of a global array reads only those
regions. `read_regions` fills several regions of one array at once: where
the array's bytes lie in one extent (HDF5 datasets, single-chunk Zarr
arrays) it hands region_bands.py the units to read: with verify, every
write the collective save recorded (the manifest's "distributed" section:
each write's region and crc32c) that a region meets, each read whole and
checked once and scattered into every region it meets; without, the
regions themselves. A region that is the whole array is read and checked as
one variable. A chunked Zarr array is read through the backend and a packed
(small) variable whole and sliced, one region at a time (`read_region`).
Never writes; never decides which rank reads what (varstore.distributed's
plan does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.format.checksum import crc32c_of
from varstore.checkpoint.format.manifest import Record, storage_layout
from varstore.checkpoint.read.reader import VarstoreReader
from varstore.checkpoint.read.region_bands import (
    DEFAULT_BUFFER_BYTES,
    BandReader,
    RegionTarget,
    Unit,
    byte_runs,
    overlap,
)
from varstore.dtypes import dtype_name
from varstore.errors import ChecksumError
from varstore.store.values import check_fits

__all__ = ["byte_runs", "read_region", "read_regions", "RegionSource", "RegionTarget", "recorded_writes"]


def recorded_writes(reader: VarstoreReader, array: str) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """(offset, shape, crc32c) of every write of `array` a collective save recorded (empty otherwise)."""
    entry = ((reader.distributed or {}).get("arrays") or {}).get(array) or {}
    found = []
    for write in entry.get("writes") or []:
        crc = write.get("crc32c")
        if isinstance(crc, str) and crc.startswith("crc32c:"):
            found.append((tuple(write["offset"]), tuple(write["shape"]), int(crc[7:], 16)))
    return found


def read_region(reader: VarstoreReader, name: str, offset: tuple[int, ...], shape: tuple[int, ...],
                out: npt.NDArray[Any], verify: bool = True) -> None:
    """Fills `out` (C-contiguous, `shape`, the stored logical dtype) with `name[offset : offset + shape]`.

    Raises:
      ChecksumError: a checked region's bytes differ from the recorded crc32c (names variable and file).
      CorruptCheckpointError: truncated or damaged storage.
    """
    read_regions(reader, name, [RegionTarget(tuple(offset), tuple(shape), out)], verify)


def read_regions(reader: VarstoreReader, name: str, targets: Sequence[RegionTarget], verify: bool = True,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
    """Fills every target's `out` with its region of stored array `name`, reading each stored byte at most once.

    Args:
      reader: an open own checkpoint.
      name: the stored array's name.
      targets: the regions (inside the array's shape; they may overlap).
      verify: check crc32c: every recorded write (see module doc) a region
        meets is read whole and checked once, a region that is the whole
        array against the array's checksum. Partial regions of an array
        without recorded writes are not checked.
      buffer_bytes: size of the one staging buffer (bytes; at least one row is staged).

    Raises:
      ChecksumError: a write's bytes differ from the recorded crc32c (names the array, the region and the
        file); the regions it met may already hold its bytes.
      CorruptCheckpointError: truncated or damaged storage.
    """
    record = reader.record(name)
    array_shape = tuple(record.shape)
    todo = []
    for target in targets:
        if not target.out.size:
            continue
        if tuple(target.offset) == (0,) * len(array_shape) and tuple(target.shape) == array_shape:
            _fill_cast(target.out, record.numpy_dtype, lambda out: reader.fill(record, out, verify),
                       f"'{name}' in '{reader.path}'")
        else:
            todo.append(target)
    if not todo:
        return
    extent = reader.record_extent(record)
    writes = recorded_writes(reader, name) if verify else []
    if extent is None or (writes and not _tiles(writes, array_shape)):
        for target in todo:  # packed, chunked Zarr, or writes that do not tile: one region at a time
            _fill_cast(target.out, record.numpy_dtype,
                       lambda out, t=target: _read_alone(reader, record, t.offset, t.shape, out, verify),
                       f"'{name}' in '{reader.path}'")
        return
    if writes:
        units = [Unit(o, n, crc) for o, n, crc in writes]
    else:
        units = list({(t.offset, t.shape): Unit(t.offset, t.shape, None) for t in todo}.values())
    bands: dict[tuple[int, int], list[Unit]] = {}
    for unit in units:
        if any(overlap(unit.offset, unit.shape, t.offset, t.shape) for t in todo):
            bands.setdefault((unit.offset[0], unit.shape[0]), []).append(unit)
    band_reader = BandReader(reader.storage, str(extent.file), extent.offset, array_shape, record.numpy_dtype,
                             buffer_bytes)
    for band in sorted(bands):
        band_reader.read(bands[band], todo)
    for unit in (u for band in bands.values() for u in band):
        if unit.crc is not None and unit.found != unit.crc:
            raise ChecksumError(
                f"variable '{name}' in '{reader.path}' is corrupt: its region at {list(unit.offset)} of shape "
                f"{list(unit.shape)} has crc32c {unit.found:08x}, the checkpoint recorded {unit.crc:08x}; "
                f"restore from another checkpoint")


def _tiles(writes: Sequence[tuple[tuple[int, ...], tuple[int, ...], int]], shape: tuple[int, ...]) -> bool:
    """Whether recorded writes lie inside `shape` and hold as many elements as it (a collective save's do)."""
    for offset, size, _ in writes:
        if len(offset) != len(shape) or len(size) != len(shape) or any(
                o < 0 or n < 0 or o + n > s for o, n, s in zip(offset, size, shape)):
            return False
    return sum(math.prod(size) for _, size, _ in writes) == math.prod(shape)


def _fill_cast(out: npt.NDArray[Any], stored: np.dtype, fill: Any, what: str) -> None:
    """fill(buffer) into `out` itself when it is C-contiguous, writeable and of the stored dtype, else cast after
    (refused when a value would change: values.check_fits; `what` names the stored array)."""
    if out.dtype == stored and out.flags.c_contiguous and out.flags.writeable:
        fill(out)
        return
    value = np.empty(out.shape, dtype=stored)
    fill(value)
    check_fits(value, out.dtype, f"restore {what} into {dtype_name(out.dtype)}")
    np.copyto(out, value, casting="unsafe")


def _read_alone(reader: VarstoreReader, record: Record, offset: tuple[int, ...], shape: tuple[int, ...],
                out: npt.NDArray[Any], verify: bool) -> None:
    """One region without a contiguous extent: a packed variable read whole and sliced, a chunked Zarr array
    through the backend (each recorded write it meets checked by _check_writes)."""
    index = tuple(slice(o, o + n) for o, n in zip(offset, shape))
    if record.path is None:
        whole = np.empty(record.shape, dtype=record.numpy_dtype)
        reader.fill(record, whole, verify)
        out[...] = whole[index]
        return
    extent = reader.record_extent(record)
    if extent is None:
        storage_dtype, storage_shape = storage_layout(record.numpy_dtype, tuple(shape),
                                                      reader.native_bytes_strings)
        stored_index = index + tuple(slice(0, n) for n in storage_shape[len(shape):])
        reader.read_stored_region(record, stored_index, out.reshape(-1).view(storage_dtype).reshape(storage_shape))
    else:  # writes recorded that do not tile the array: read the runs, check what overlaps
        itemsize = record.numpy_dtype.itemsize
        flat = out.reshape(-1).view(np.uint8)
        position = 0
        for start, length in byte_runs(record.shape, offset, shape, itemsize):
            reader.storage.read_range(str(extent.file), extent.offset + start, length,
                                      flat[position:position + length])
            position += length
    if verify:
        _check_writes(reader, record, offset, shape, out)


def _check_writes(reader: VarstoreReader, record: Record, offset: tuple[int, ...], shape: tuple[int, ...],
                  out: npt.NDArray[Any]) -> None:
    """Checks every recorded write that overlaps the region; one only partly inside is read whole to check it."""
    for w_offset, w_shape, crc in recorded_writes(reader, record.name):
        lows = [max(o, wo) for o, wo in zip(offset, w_offset)]
        highs = [min(o + n, wo + wn) for o, n, wo, wn in zip(offset, shape, w_offset, w_shape)]
        if any(lo >= hi for lo, hi in zip(lows, highs)) and shape:
            continue  # no overlap
        inside = all(o <= wo and wo + wn <= o + n for o, n, wo, wn in zip(offset, shape, w_offset, w_shape))
        if inside:
            local = tuple(slice(wo - o, wo - o + wn) for o, wo, wn in zip(offset, w_offset, w_shape))
            found = crc32c_of(np.ascontiguousarray(out[local]))
        else:  # e.g. 3 parts restored from 2 written ones: read the whole write, check it, copy the overlap
            written = np.empty(w_shape, dtype=out.dtype)
            _read_alone(reader, record, w_offset, w_shape, written, verify=False)
            found = crc32c_of(written)
            if found == crc:
                out[tuple(slice(lo - o, hi - o) for lo, hi, o in zip(lows, highs, offset))] = \
                    written[tuple(slice(lo - wo, hi - wo) for lo, hi, wo in zip(lows, highs, w_offset))]
        if found != crc:
            raise ChecksumError(
                f"variable '{record.name}' in '{reader.path}' is corrupt: its region at {list(w_offset)} of shape "
                f"{list(w_shape)} has crc32c {found:08x}, the checkpoint recorded {crc:08x}; restore from "
                f"another checkpoint")


class RegionSource:
    """A region of a stored array as a ValueSource (see varstore.value_sources): deferred and lazy restores.

    Attributes:
      origin: "'<array>'[region] in '<file>'" for error messages.
      name: the stored array's name.
      offset: where the region starts in the stored array, per axis.
      shape: the region's shape.
      dtype: the stored logical dtype.
    """

    __slots__ = ("_reader", "_array", "offset", "_verify", "shape", "dtype", "name")

    def __init__(self, reader: VarstoreReader, array: str, offset: tuple[int, ...], shape: tuple[int, ...],
                 verify: bool = True) -> None:
        record = reader.record(array)
        self._reader = reader
        self._array = array
        self.offset = tuple(offset)
        self._verify = verify
        self.name = array
        self.shape = tuple(shape)
        self.dtype = record.numpy_dtype

    @property
    def origin(self) -> str:
        region = ", ".join(f"{o}:{o + n}" for o, n in zip(self.offset, self.shape))
        return f"'{self._array}'[{region}] in '{self._reader.path}'"

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (the region's shape; cast from the stored dtype when it differs)."""
        if out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable:
            read_region(self._reader, self._array, self.offset, self.shape, out, self._verify)
            return
        value = np.empty(self.shape, dtype=self.dtype)
        read_region(self._reader, self._array, self.offset, self.shape, value, self._verify)
        check_fits(value, out.dtype, f"restore {self.origin} into {dtype_name(out.dtype)}")
        np.copyto(out, value, casting="unsafe")

    def __repr__(self) -> str:
        return f"<RegionSource {self.origin} {self.shape} {self.dtype}>"

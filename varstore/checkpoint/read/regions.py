"""Region reads: a hyperslab of a stored global array into a caller's buffer, and its ValueSource.

A rank restoring a part (or a row block) of a global array reads only that
region: the C-order byte runs of the region (plan.byte_runs) by positional
reads through the reader's Storage where the array's bytes lie in one
extent (HDF5 datasets, single-chunk Zarr arrays); through the backend for a
chunked Zarr array; a packed (small) variable is read whole and sliced.
Checks crc32c where it can: the whole array's when the region is all of it,
and each recorded write region (the manifest's "distributed" section) that
the region overlaps: from the bytes read when the write lies wholly inside
the region, else by reading that write whole (a region cut across writes,
e.g. 3 parts restored from 2 written ones, costs the extra bytes of the
writes it cuts; verify=False reads only the region). Never writes; never decides which rank
reads what (varstore.distributed's plan does).
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
from varstore.errors import ChecksumError

__all__ = ["byte_runs", "read_region", "RegionSource", "recorded_writes"]


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
    record = reader.record(name)
    if tuple(offset) == (0,) * len(record.shape) and tuple(shape) == tuple(record.shape):
        reader.fill(record, out, verify)
        return
    index = tuple(slice(o, o + n) for o, n in zip(offset, shape))
    if out.size == 0:
        return
    extent = reader.record_extent(record)
    if record.path is None:
        whole = np.empty(record.shape, dtype=record.numpy_dtype)
        reader.fill(record, whole, verify)
        out[...] = whole[index]
        return
    if extent is None:
        storage_dtype, storage_shape = storage_layout(record.numpy_dtype, tuple(shape),
                                                      reader.native_bytes_strings)
        stored_index = index + tuple(slice(0, n) for n in storage_shape[len(shape):])
        reader.read_stored_region(record, stored_index, out.reshape(-1).view(storage_dtype).reshape(storage_shape))
    else:
        itemsize = record.numpy_dtype.itemsize
        flat = out.reshape(-1).view(np.uint8)
        position = 0
        key = str(extent.file)
        for start, length in byte_runs(record.shape, offset, shape, itemsize):
            reader.storage.read_range(key, extent.offset + start, length, flat[position:position + length])
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
            read_region(reader, record.name, w_offset, w_shape, written, verify=False)
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
      shape: the region's shape.
      dtype: the stored logical dtype.
    """

    __slots__ = ("_reader", "_array", "_offset", "_verify", "shape", "dtype", "name")

    def __init__(self, reader: VarstoreReader, array: str, offset: tuple[int, ...], shape: tuple[int, ...],
                 verify: bool = True) -> None:
        record = reader.record(array)
        self._reader = reader
        self._array = array
        self._offset = tuple(offset)
        self._verify = verify
        self.name = array
        self.shape = tuple(shape)
        self.dtype = record.numpy_dtype

    @property
    def origin(self) -> str:
        region = ", ".join(f"{o}:{o + n}" for o, n in zip(self._offset, self.shape))
        return f"'{self._array}'[{region}] in '{self._reader.path}'"

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (the region's shape; cast from the stored dtype when it differs)."""
        if out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable:
            read_region(self._reader, self._array, self._offset, self.shape, out, self._verify)
            return
        value = np.empty(self.shape, dtype=self.dtype)
        read_region(self._reader, self._array, self._offset, self.shape, value, self._verify)
        np.copyto(out, value, casting="unsafe")

    def __repr__(self) -> str:
        return f"<RegionSource {self.origin} {self.shape} {self.dtype}>"

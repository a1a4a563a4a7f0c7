"""A variable's values chunk by chunk for the report: region reads of own checkpoints, slices of one read otherwise.

`value_chunks(reader, name, chunk_elements)` yields flat arrays of at most
`chunk_elements` elements (one row of the innermost axes is never split below
an element; see `chunk_boxes`). For varstore's own HDF5/Zarr checkpoints each
chunk is a hyperslab read on its own (varstore.checkpoint.read.regions), so
the memory a variable costs is one chunk, not the variable. Foreign readers
read a variable whole (their formats give no region reads); the chunks are
then views of that one array, so the extra memory is still one chunk. Reads
only; computes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.dtypes import as_dtype

__all__ = ["chunk_boxes", "value_chunks", "fits_one_chunk"]


def chunk_boxes(shape: tuple[int, ...], chunk_elements: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(offset, shape) boxes covering an array of `shape` in C order, each of at most `chunk_elements` elements.

    The box steps along the outermost axis whose inner axes fit in `chunk_elements` (taking as
    many of its indices as fit), with index 1 on every axis outside it. A scalar is one box ((), ());
    a zero-size array none.
    """
    if not shape:
        yield (), ()
        return
    if 0 in shape:
        return
    budget = max(1, int(chunk_elements))
    suffix = [1] * (len(shape) + 1)
    for axis in reversed(range(len(shape))):
        suffix[axis] = suffix[axis + 1] * shape[axis]
    axis = next(a for a in range(len(shape)) if suffix[a + 1] <= budget)
    step = max(1, budget // suffix[axis + 1])
    rest = len(shape) - axis - 1
    for outer in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], step):
            count = min(step, shape[axis] - start)
            yield (tuple(int(i) for i in outer) + (start,) + (0,) * rest,
                   (1,) * axis + (count,) + tuple(shape[axis + 1:]))


def fits_one_chunk(shape: tuple[int, ...], chunk_elements: int) -> bool:
    """True when a value of `shape` is at most `chunk_elements` elements (it is read whole, once)."""
    return math.prod(shape) <= max(1, int(chunk_elements))


def value_chunks(reader: CheckpointReader, name: str, chunk_elements: int) -> Iterator[npt.NDArray[Any]]:
    """Flat chunks (1-D arrays of the stored logical dtype) of variable `name`, in C order.

    Raises:
      what `reader.read` raises (UnknownVariableError, ChecksumError, CorruptCheckpointError, ...).
    """
    info = reader.info(name)
    shape = tuple(int(n) for n in info.shape)
    if fits_one_chunk(shape, chunk_elements) or not _reads_regions(reader):
        flat = np.asarray(reader.read(name)).reshape(-1)
        step = max(1, int(chunk_elements))
        for start in range(0, flat.size, step):
            yield flat[start:start + step]
        return
    from varstore.checkpoint.read.regions import read_region

    dtype = as_dtype(info.dtype)
    for offset, box in chunk_boxes(shape, chunk_elements):
        out = np.empty(box, dtype=dtype)
        read_region(reader, name, offset, box, out)  # type: ignore[arg-type]  # _reads_regions checked the type
        yield out.reshape(-1)


def _reads_regions(reader: CheckpointReader) -> bool:
    from varstore.checkpoint.read.reader import VarstoreReader

    return isinstance(reader, VarstoreReader)

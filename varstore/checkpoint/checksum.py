"""crc32c (Castagnoli) of array bytes, the checksum every varstore checkpoint records.

crc32c is computed over a variable's C-order little-endian bytes, the same
buffer that is written or was just read, so checking costs one pass at
memory speed (the crc32c package releases the GIL). Does no I/O (positional
reads and writes are varstore/storage/'s) and knows nothing about layouts.
"""

from __future__ import annotations

from typing import Any

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt

__all__ = ["byte_view", "crc32c_of", "crc32c_raw"]

#: crc32c of a bytes-like object (the C function itself: no per-call Python wrapper).
crc32c_raw = _crc32c.crc32c


def byte_view(array: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """A flat uint8 view of a C-contiguous array's bytes (no copy; works for 0-d and bfloat16)."""
    return array.reshape(-1).view(np.uint8)


def crc32c_of(data: Any, value: int = 0) -> int:
    """crc32c (Castagnoli) of a bytes-like object or a C-contiguous array, continuing from `value`."""
    if isinstance(data, np.ndarray):
        data = byte_view(data)
    return _crc32c.crc32c(data, value)  # type: ignore[no-any-return]

"""crc32c (Castagnoli) of array bytes, the checksum every varstore checkpoint records.

crc32c is computed over a variable's C-order little-endian bytes, the same
buffer that is written or was just read, so checking costs one pass at
memory speed (the crc32c package releases the GIL). Does no I/O (positional
reads and writes are varstore/storage/'s) and knows nothing about layouts.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

__all__ = ["byte_view", "crc32c_of", "crc32c_raw"]


def _crc32c_extension() -> ModuleType:
    """The crc32c package's C extension, loaded without the package's __init__ (~1 ms instead of ~25 ms:
    that imports importlib.metadata, argparse and hashlib for its command line and version); the
    package itself where that fails."""
    module = sys.modules.get("crc32c._crc32c")
    if module is not None:
        return module
    try:
        spec = importlib.util.find_spec("crc32c")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        for directory in locations:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                file = os.path.join(directory, "_crc32c" + suffix)
                if os.path.isfile(file):
                    loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", file)
                    extension = importlib.util.spec_from_file_location("crc32c._crc32c", file, loader=loader)
                    if extension is not None:
                        module = importlib.util.module_from_spec(extension)
                        loader.exec_module(module)
                        if callable(getattr(module, "crc32c", None)):
                            sys.modules["crc32c._crc32c"] = module  # the package reuses it, never loads it twice
                            return module
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    import crc32c

    return crc32c


_crc32c = _crc32c_extension()

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

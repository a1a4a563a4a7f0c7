"""crc32c (Castagnoli) of array bytes, the checksum every varstore checkpoint records.

crc32c is computed over a variable's C-order little-endian bytes, the same
buffer that is written or was just read, so checking costs one pass at
memory speed. Computed by crc32c-rs (PyPI `crc32c-rs`: crc-fast-rust's
kernels, folding with carry-less multiplies, AVX-512 where the CPU has it)
when it imports and agrees with the crc32c package on the self-check below,
else by the crc32c package (Intel's SSE4.2 path); both release the GIL. On
this project's machine: 318 MiB in 13.5 ms against 21.3 ms, i.e. 5-8 ms less
CPU per W1 restore or save (docs/benchmarks/README.md, issue 39). Does no I/O
(positional reads and writes are varstore/storage/'s) and knows nothing
about layouts.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

__all__ = ["byte_view", "crc32c_of", "crc32c_raw", "IMPLEMENTATION"]


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


#: RFC 3720's test vectors (32 zero bytes, 32 0xFF bytes, "123456789") with their crc32c.
_RFC_VECTORS = ((bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43), (b"123456789", 0xE3069283))


def _self_check_data() -> bytes:
    """20,011 bytes cycling through 0..250 (a prime period, so no 64-byte block repeats its neighbour): long
    enough for every folding kernel, odd enough to leave a tail."""
    return (bytes(range(251)) * 80)[:20_011]


def _fast_crc32c(reference: Callable[..., int]) -> Callable[..., int] | None:
    """crc32c-rs's crc32c, when it imports and matches `reference` (the crc32c package) on RFC 3720's vectors
    and on a 20 KB buffer at four offsets, whole and continued from a crc; else None (the reference is used)."""
    try:
        import crc32c_rs
    except ImportError:
        return None
    fast: Callable[..., int] = crc32c_rs.crc32c
    try:
        if any(fast(data) != expected for data, expected in _RFC_VECTORS):
            return None
        data = memoryview(_self_check_data())
        for start in range(4):
            piece = data[start:]
            if fast(piece) != reference(piece) or fast(piece[4099:], fast(piece[:4099])) != reference(piece):
                return None
    except (TypeError, ValueError):
        return None
    return fast


_crc32c = _crc32c_extension()
_fast = _fast_crc32c(_crc32c.crc32c)

#: crc32c of a bytes-like object, continuing from an optional crc (the C/Rust function itself: no per-call
#: Python wrapper). Which library computes it: IMPLEMENTATION.
crc32c_raw: Callable[..., int] = _fast if _fast is not None else _crc32c.crc32c
#: "crc32c-rs" or "crc32c" (the package computing crc32c_raw).
IMPLEMENTATION = "crc32c-rs" if _fast is not None else "crc32c"


def byte_view(array: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """A flat uint8 view of a C-contiguous array's bytes (no copy; works for 0-d and bfloat16)."""
    return array.reshape(-1).view(np.uint8)


def crc32c_of(data: Any, value: int = 0) -> int:
    """crc32c (Castagnoli) of a bytes-like object or a C-contiguous array, continuing from `value`."""
    if isinstance(data, np.ndarray):
        data = byte_view(data)
    return crc32c_raw(data, value)

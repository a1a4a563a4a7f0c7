"""Dequantizing GGUF tensor blocks with the gguf package's reference code (llama.cpp's own); the only importer of gguf.

convert/gguf.py parses the file itself (it needs no gguf package to list or
copy tensors); only `dequantize=True` asks here whether a quantized type can
be turned into float32 and, if so, does it with `gguf.quants.dequantize`
(Q4_0 ... Q8_0, the K-quants, the IQ types, whatever the installed gguf
knows). Without gguf installed, nothing is dequantizable here (gguf.py keeps
its own Q8_0/Q4_0/Q4_1). Reads no file.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["supports", "dequantize"]


def _quants() -> Any:
    try:
        import gguf.quants
    except ImportError:
        return None
    return gguf.quants


@lru_cache(maxsize=None)
def supports(ggml: str, block_bytes: int) -> bool:
    """True when the installed gguf package dequantizes blocks of type `ggml` ("Q5_0", "Q6_K", ...)."""
    quants = _quants()
    if quants is None:
        return False
    try:
        kind = quants.GGMLQuantizationType[ggml]
        values = quants.dequantize(np.zeros(block_bytes, dtype=np.uint8), kind)
    except (KeyError, NotImplementedError, ValueError, TypeError, AttributeError):
        return False
    return bool(np.asarray(values).size)


def dequantize(ggml: str, raw: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """The float32 values of `raw` (whole blocks of type `ggml`), flat, in the blocks' order.

    Raises:
      NotImplementedError: gguf does not dequantize `ggml` (ask `supports` first).
    """
    quants = _quants()
    if quants is None:
        raise NotImplementedError(f"dequantizing {ggml} needs the gguf package")
    values = quants.dequantize(raw.reshape(1, -1), quants.GGMLQuantizationType[ggml])
    return np.asarray(values, dtype=np.float32).reshape(-1)

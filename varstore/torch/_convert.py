"""torch.Tensor <-> NumPy without copies: dtype mapping, host views, alias keys.

CPU tensors become NumPy views of the same memory (tensor.numpy(), the same
buffer DLPack would hand over); dtypes NumPy lacks (bfloat16, float8_e4m3fn,
float8_e5m2) go through a same-size integer view and then a view as the
ml_dtypes type from varstore.dtypes. Knows nothing about checkpoints or
files; varstore.torch does the saving and restoring. Imports torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from varstore import dtypes as _dtypes
from varstore.errors import UnsupportedDtypeError

__all__ = ["dtype_name_of", "torch_dtype", "host_view", "empty_host", "alias_key", "is_tensor"]

_NAMES: dict[torch.dtype, str] = {
    torch.bool: "bool",
    torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
    torch.uint8: "uint8", torch.uint16: "uint16", torch.uint32: "uint32", torch.uint64: "uint64",
    torch.float16: "float16", torch.float32: "float32", torch.float64: "float64",
    torch.complex64: "complex64", torch.complex128: "complex128",
    torch.bfloat16: "bfloat16", torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
}
_DTYPES: dict[str, torch.dtype] = {name: dtype for dtype, name in _NAMES.items()}
# same-size integer dtypes used to view the ml_dtypes ones
_BITS: dict[str, torch.dtype] = {"bfloat16": torch.int16, "float8_e4m3fn": torch.uint8, "float8_e5m2": torch.uint8}


def is_tensor(value: Any) -> bool:
    """True for torch.Tensor and nn.Parameter."""
    return isinstance(value, torch.Tensor)


def dtype_name_of(tensor: torch.Tensor, name: str) -> str:
    """The logical dtype name ("bfloat16") of a tensor.

    Raises:
      UnsupportedDtypeError: a dtype with no NumPy/ml_dtypes counterpart
        (complex32, float8_*fnuz, quantized, sub-byte), naming the tensor.
    """
    found = _NAMES.get(tensor.dtype)
    if found is None:
        raise UnsupportedDtypeError(
            f"cannot store tensor '{name}' of dtype {tensor.dtype}: varstore stores "
            f"{', '.join(sorted(_DTYPES))}; convert it with .to(...) first")
    if tensor.layout != torch.strided or tensor.is_quantized:
        raise UnsupportedDtypeError(
            f"cannot store tensor '{name}': layout {tensor.layout} is not a dense strided tensor; "
            f"call .to_dense() first")
    return found


def torch_dtype(name: str, variable: str, where: str) -> torch.dtype:
    """The torch dtype of a logical dtype name.

    Raises:
      UnsupportedDtypeError: no torch counterpart (strings "S5"/"U3"), naming the variable and file.
    """
    found = _DTYPES.get(name)
    if found is None:
        raise UnsupportedDtypeError(
            f"cannot load '{variable}' from '{where}' as a torch tensor: torch has no dtype {name}; "
            f"read it with vs.open_checkpoint(...)[{variable!r}] (a NumPy array)")
    return found


def host_view(tensor: torch.Tensor, name: str) -> npt.NDArray[Any]:
    """A NumPy array for a tensor's value: a view of the same memory on the CPU, a host copy otherwise.

    The array keeps the tensor's shape and strides (non-contiguous stays
    non-contiguous) and has the logical dtype (ml_dtypes bfloat16 for torch.bfloat16).
    """
    logical = dtype_name_of(tensor, name)
    value = tensor.detach()
    if value.device.type != "cpu":
        value = value.cpu()
    value = value.resolve_conj().resolve_neg()
    bits = _BITS.get(logical)
    if bits is None:
        return value.numpy()
    return value.view(bits).numpy().view(_dtypes.as_dtype(logical))


def empty_host(shape: tuple[int, ...], logical: str, variable: str, where: str,
               pin_memory: bool = False) -> tuple[torch.Tensor, npt.NDArray[Any]]:
    """A new C-contiguous CPU tensor and a NumPy view of it (logical dtype) to read into."""
    dtype = torch_dtype(logical, variable, where)
    tensor = torch.empty(shape, dtype=dtype, pin_memory=pin_memory)
    bits = _BITS.get(logical)
    array = tensor.numpy() if bits is None else tensor.view(bits).numpy().view(_dtypes.as_dtype(logical))
    return tensor, array


def from_host(array: npt.NDArray[Any]) -> torch.Tensor:
    """A CPU tensor sharing `array`'s memory (any dtype of _NAMES, ml_dtypes ones included)."""
    name = _dtypes.dtype_name(array.dtype)
    bits = _BITS.get(name)
    if bits is None:
        return torch.from_numpy(np.ascontiguousarray(array))
    raw = np.ascontiguousarray(array).view(np.dtype(str(bits).replace("torch.", "")))
    return torch.from_numpy(raw).view(_DTYPES[name])


def alias_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    """A key equal for tensors that are exactly the same memory (tied weights), None for empty tensors."""
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return None
    return (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype)

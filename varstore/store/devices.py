"""Devices: parse device names, place arrays on the host or a CuPy GPU, soft placement, placement log.

The only module that imports cupy (lazily, so everything works without it).
Knows nothing about variables, scopes or files: other modules hand it arrays,
dtypes and device labels and get arrays and labels back.

Device labels are "cpu:N" and "gpu:N". "cpu:1".."cpu:N" are placement labels
(parameter-server stand-ins for `replica_device_setter`); all of them live in
host memory. The `device(...)` context stack and placement functions live in
`varstore.placement`.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from types import ModuleType
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from varstore.errors import DeviceError
from varstore.store.host_arrays import host_empty

__all__ = [
    "device_copies",
    "parse_device",
    "is_gpu",
    "gpu_count",
    "gpu_supports",
    "place",
    "array_module",
    "is_device_array",
    "gpu_in_use",
    "cupy_if_loaded",
    "device_of_array",
    "to_host",
    "to_device",
    "empty",
    "copy_into",
    "function_for",
    "set_soft_device_placement",
    "get_soft_device_placement",
    "set_log_device_placement",
    "get_log_device_placement",
    "log_placement",
    "PLACEMENT_LOGGER",
]

#: Logger that receives "<name> -> <device>" for each placement when logging is on.
PLACEMENT_LOGGER = logging.getLogger("varstore.placement")

_DEVICE_RE = re.compile(r"^/?(?:device:)?(cpu|gpu)(?::(\d+))?$", re.IGNORECASE)

# dtypes CuPy computes with (no bfloat16 / float8 / strings).
_GPU_KINDS = frozenset("biufc")

_state_lock = threading.Lock()
_soft_placement = True
_log_placement = False
#: NumPy's casting rules (the `casting=` argument of np.copyto / np.can_cast).
Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]

_cupy_module: ModuleType | None = None
_cupy_probed = False
_gpu_count_override: int | None = None


def parse_device(spec: str) -> str:
    """Normalizes a device name to "cpu:N" or "gpu:N".

    Accepts TF spellings: "cpu:0", "/cpu:0", "CPU:0", "/device:GPU:1", "gpu"
    (index 0 when omitted).

    Raises:
      DeviceError: not a string, or not a CPU/GPU device name.
    """
    if not isinstance(spec, str):
        raise DeviceError(f"a device name must be a string like 'cpu:0' or 'gpu:0', got {spec!r}")
    match = _DEVICE_RE.match(spec.strip())
    if match is None:
        raise DeviceError(
            f"cannot parse device {spec!r}: expected 'cpu:N' or 'gpu:N' "
            f"(also accepted: '/cpu:0', '/device:GPU:0', 'CPU:0')")
    return f"{match.group(1).lower()}:{int(match.group(2) or 0)}"


def is_gpu(label: str) -> bool:
    """True when a normalized label names a GPU ("gpu:N")."""
    return label.startswith("gpu:")


def _cupy() -> ModuleType | None:
    """Imports cupy once; None when it is missing, unusable, or VARSTORE_DISABLE_GPU=1."""
    global _cupy_module, _cupy_probed
    if _cupy_probed:
        return _cupy_module
    with _state_lock:
        if not _cupy_probed:
            module = None
            if os.environ.get("VARSTORE_DISABLE_GPU") != "1":
                try:
                    import cupy  # the only cupy import in varstore

                    if cupy.cuda.runtime.getDeviceCount() > 0:
                        module = cupy
                except Exception:  # ImportError, CUDA driver errors: no GPU
                    module = None
            _cupy_module = module
            _cupy_probed = True
    return _cupy_module


def gpu_count() -> int:
    """Number of CUDA devices CuPy sees (0 without cupy or a driver)."""
    if _gpu_count_override is not None:
        return _gpu_count_override
    cp = _cupy()
    return 0 if cp is None else int(cp.cuda.runtime.getDeviceCount())


def _set_gpu_count_override(count: int | None) -> None:
    """Test hook: pretend `count` GPUs exist (only 0 is meaningful without cupy); None undoes it."""
    global _gpu_count_override
    _gpu_count_override = count


def gpu_supports(dtype: npt.DTypeLike) -> bool:
    """True when CuPy can hold and compute with `dtype` (bool, ints, floats, complex; not bfloat16/float8/strings)."""
    dt = np.dtype(dtype)
    return dt.kind in _GPU_KINDS and dt.type.__module__ == "numpy"


def set_soft_device_placement(enabled: bool) -> None:
    """Turns soft placement on (default) or off, as tf.config.set_soft_device_placement.

    With it on, a GPU request that cannot be met (no GPU, index out of range,
    dtype CuPy cannot hold) falls back to "cpu:0"; with it off it raises DeviceError.
    """
    global _soft_placement
    _soft_placement = bool(enabled)


def get_soft_device_placement() -> bool:
    """Whether soft placement is on."""
    return _soft_placement


def set_log_device_placement(enabled: bool) -> None:
    """Logs "<name> -> <device>" at INFO on logger "varstore.placement" for each placement, as tf.debugging.set_log_device_placement."""
    global _log_placement
    _log_placement = bool(enabled)


def get_log_device_placement() -> bool:
    """Whether placement logging is on."""
    return _log_placement


def log_placement(name: str, label: str) -> None:
    """Emits "<name> -> <label>" when placement logging is on."""
    if _log_placement:
        PLACEMENT_LOGGER.info("%s -> %s", name, label)


def place(requested: str | None, dtype: npt.DTypeLike, *, what: str = "a variable") -> str:
    """Chooses the device for a new array.

    Args:
      requested: a device name, or None for the default placement: "gpu:0"
        when CuPy sees a GPU and supports `dtype`, else "cpu:0" (TF places on
        the fastest device that has a kernel for the dtype).
      dtype: the array's dtype.
      what: how to name the array in errors ("variable 'conv1/w'").

    Returns:
      A normalized label. "cpu:N" labels are kept as given (host memory).

    Raises:
      DeviceError: malformed name; or a GPU request that cannot be met while
        soft placement is off.
    """
    if requested is None:
        return "gpu:0" if gpu_count() > 0 and gpu_supports(dtype) else "cpu:0"
    label = parse_device(requested)
    if not is_gpu(label):
        return label
    index = int(label.split(":")[1])
    count = gpu_count()
    if index < count and gpu_supports(dtype):
        return label
    if index >= count:
        reason = "no GPU is available" if count == 0 else f"only {count} GPU(s) are available"
    else:
        reason = f"CuPy cannot hold dtype {np.dtype(dtype).name}"
    if _soft_placement:
        return "cpu:0"
    raise DeviceError(
        f"cannot place {what} on {label}: {reason}; soft placement is off "
        f"(call set_soft_device_placement(True) to fall back to cpu:0)")


def array_module(label: str) -> ModuleType:
    """numpy for "cpu:N" labels, cupy for "gpu:N"."""
    if is_gpu(label):
        cp = _cupy()
        if cp is None:
            raise DeviceError(f"device {label} needs CuPy and a CUDA device: pip install 'varstore[gpu]'")
        return cp
    return np


def is_device_array(obj: Any) -> bool:
    """True for a CuPy ndarray (without importing cupy unless `obj` came from it).

    A CuPy array made before varstore first looked for a GPU probes CuPy
    here (its class lives in a `cupy` module); anything else never does.
    """
    cp = _cupy_module
    if cp is None:
        if _cupy_probed or not type(obj).__module__.startswith("cupy"):
            return False
        cp = _cupy()
        if cp is None:
            return False
    return isinstance(obj, cp.ndarray)


def gpu_in_use() -> bool:
    """True once CuPy was loaded with a device (GPU arrays may exist); never probes for one itself."""
    return cupy_if_loaded() is not None


def cupy_if_loaded() -> ModuleType | None:
    """The cupy module once varstore loaded it with a device, else None (never probes)."""
    return _cupy_module


def device_of_array(array: Any) -> str:
    """"gpu:N" for a CuPy array, "cpu:0" for anything else."""
    if is_device_array(array):
        return f"gpu:{int(array.device.id)}"
    return "cpu:0"


def to_host(array: Any) -> npt.NDArray[Any]:
    """A NumPy array for `array`: CuPy arrays are copied to the host, NumPy arrays returned as they are."""
    if is_device_array(array):
        host: npt.NDArray[Any] = array.get()
        return host
    return np.asarray(array)


def to_device(array: Any, label: str, *, copy: bool = False) -> Any:
    """`array` on device `label` (a host NumPy array for "cpu:N"; a CuPy array for "gpu:N").

    Args:
      array: NumPy or CuPy array (or anything np.asarray accepts).
      label: normalized device label.
      copy: always return a new C-contiguous buffer (never a view of `array`).
    """
    if is_gpu(label):
        cp = array_module(label)
        with cp.cuda.Device(int(label.split(":")[1])):
            if copy:
                return cp.array(array, order="C", copy=True)
            return cp.asarray(array)
    host = to_host(array)
    if copy:
        return np.array(host, order="C", copy=True)
    return host


def empty(shape: tuple[int, ...], dtype: npt.DTypeLike, label: str) -> Any:
    """An uninitialized C-contiguous array of `shape` and `dtype` on device `label`."""
    if is_gpu(label):
        cp = array_module(label)
        with cp.cuda.Device(int(label.split(":")[1])):
            return cp.empty(shape, dtype=dtype)
    return host_empty(shape, dtype)  # page-aligned from 256 KiB: restores into it copy aligned


def copy_into(destination: Any, source: Any, *, casting: Casting = "same_kind") -> None:
    """Copies `source` into `destination` in place (same buffer), moving it to the destination's device.

    Raises:
      TypeError: the cast breaks `casting` (NumPy's rules).
    """
    if is_device_array(destination):
        cp = _cupy_module
        assert cp is not None
        with cp.cuda.Device(destination.device.id):
            src = cp.asarray(source)
            if not np.can_cast(src.dtype, destination.dtype, casting):
                raise TypeError(f"cannot cast {src.dtype} to {destination.dtype} with casting={casting!r}")
            cp.copyto(destination, src, casting=casting)
        return
    np.copyto(destination, to_host(source), casting=casting)


def function_for(func: Any, label: str) -> Any:
    """The CuPy counterpart of a NumPy function or ufunc (same name and submodule) for "gpu:N"; `func` itself for the host.

    Raises:
      DeviceError: CuPy has no function of that name.
    """
    if not is_gpu(label):
        return func
    cp = array_module(label)
    module_name = getattr(func, "__module__", None) or "numpy"
    target: Any = cp
    for part in module_name.split(".")[1:]:
        if part.startswith("_"):
            break
        target = getattr(target, part, None)
        if target is None:
            target = cp
            break
    result = getattr(target, func.__name__, None) or getattr(cp, func.__name__, None)
    if result is None:
        raise DeviceError(f"numpy.{func.__name__} has no CuPy counterpart; compute on cpu:0 instead")
    return result


def device_copies(values: Sequence[Any], label: str) -> list[Any]:
    """New CuPy arrays equal to `values` (CuPy arrays on device `label`), sharing one new device allocation.

    Each contiguous value is one device-to-device `cudaMemcpyAsync` on the
    current stream of `label` (after the kernels queued there); others are
    copied by CuPy on that stream. `device_transfers.queued_work_done(label)`
    called afterwards waits for all of them.
    """
    cp = array_module(label)
    sizes = [-(-int(value.nbytes) // 512) * 512 for value in values]  # each copy 512-byte aligned
    with cp.cuda.Device(int(label.split(":")[1])):
        block = cp.empty(sum(sizes), np.uint8)
        stream = cp.cuda.get_current_stream().ptr
        memcpy, kind = cp.cuda.runtime.memcpyAsync, getattr(cp.cuda.runtime, "memcpyDeviceToDevice", 3)
        copies = []
        offset = 0
        for value, size in zip(values, sizes):
            copy = cp.ndarray(value.shape, value.dtype, memptr=block.data + offset)
            if value.flags.c_contiguous:
                if value.nbytes:
                    memcpy(copy.data.ptr, value.data.ptr, value.nbytes, kind, stream)
            else:
                copy[...] = value
            copies.append(copy)
            offset += size
    return copies

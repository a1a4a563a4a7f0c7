"""PyTorch Distributed Checkpoint (DCP) directories written through torch.distributed.checkpoint itself.

One process saves with `torch.distributed.checkpoint.save` (no process group: DCP's single-process
mode) and a planner whose state dict holds only `meta` tensors (shape and dtype, no memory): DCP asks
the planner for each tensor's data when it writes it, so the entry's value is fetched then, one tensor
at a time, each into a `.distcp` file of its own (DCP keeps every tensor of one file alive until the
file is written). `torch.distributed.checkpoint.load` fills a state dict of the same names from it.
The only module of `convert/` that imports torch; without it, MissingDependencyError names the extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from varstore import dtypes as _dtypes
from varstore.errors import (CheckpointExistsError, ConversionError, MissingDependencyError, UnsupportedDtypeError,
                             VarstoreError)

if TYPE_CHECKING:
    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.formats.format_entry import WriteRequest

__all__ = ["write_dcp", "write_checkpoint"]

# logical dtype -> (torch dtype name, the NumPy dtype a host view goes through when NumPy lacks the type)
_TORCH_DTYPES = {
    "bool": ("bool", None), "int8": ("int8", None), "int16": ("int16", None), "int32": ("int32", None),
    "int64": ("int64", None), "uint8": ("uint8", None), "uint16": ("uint16", None), "uint32": ("uint32", None),
    "uint64": ("uint64", None), "float16": ("float16", None), "float32": ("float32", None),
    "float64": ("float64", None), "complex64": ("complex64", None), "complex128": ("complex128", None),
    "bfloat16": ("bfloat16", "uint16"), "float8_e4m3fn": ("float8_e4m3fn", "uint8"),
    "float8_e5m2": ("float8_e5m2", "uint8"),
}


def _torch() -> Any:
    try:
        import torch
        import torch.distributed.checkpoint  # noqa: F401 - the DCP package itself
    except ImportError as err:
        raise MissingDependencyError("writing a DCP checkpoint needs PyTorch: pip install 'varstore[torch]'") from err
    return torch


def holds(dtype: np.dtype) -> str | None:
    """None when a torch tensor (what DCP stores) holds `dtype`, else why not (convert skips such a variable)."""
    name = _dtypes.dtype_name(dtype)
    return None if name in _TORCH_DTYPES else f"dtype {name}, which a torch tensor (DCP) cannot hold"


def _torch_dtype(torch: Any, entry: SaveEntry) -> tuple[Any, str | None]:
    name = _dtypes.dtype_name(entry.dtype)
    if name not in _TORCH_DTYPES:
        raise UnsupportedDtypeError(f"variable '{entry.name}' has dtype {name}, which a torch tensor cannot hold; "
                                    f"a DCP checkpoint stores tensors")
    torch_name, via = _TORCH_DTYPES[name]
    return getattr(torch, torch_name), via


def _tensor(torch: Any, value: np.ndarray, dtype: Any, via: str | None) -> Any:
    value = np.asarray(value, order="C")  # (ascontiguousarray would make a 0-d value 1-d)
    if value.dtype.byteorder == ">":
        value = value.astype(value.dtype.newbyteorder("<"))
    if via is None:
        return torch.from_numpy(value)
    return torch.from_numpy(value.view(via)).view(dtype)


def write_dcp(path: Path, entries: Sequence[SaveEntry], *, overwrite: bool = False) -> int:
    """Writes `entries` as a DCP directory that torch.distributed.checkpoint.load reads in one process.

    Args:
      path: the directory to create (`.metadata` and `__0_<n>.distcp` files); replaced atomically.
      entries: the variables; each becomes one state-dict key, named exactly as the variable.
      overwrite: replace an existing directory that holds a DCP checkpoint; never anything else.

    Returns:
      Bytes of tensor data written.

    Raises:
      MissingDependencyError: torch is not installed.
      UnsupportedDtypeError: strings or a dtype torch lacks; nothing is written.
      ConversionError: two entries with one name.
      CheckpointExistsError: `path` exists (without `overwrite`), or is not a DCP directory.
      VarstoreError: what reading a variable raised (a damaged source), unwrapped from torch's
        CheckpointException; ConversionError for any other failure torch reports. Nothing is written.
    """
    torch = _torch()
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    from varstore.checkpoint.publish.atomic import atomic_path

    entries = list(entries)
    if len({e.name for e in entries}) != len(entries):
        raise ConversionError("two variables share one name; a DCP state dict holds each key once")
    plan = {e.name: (e, *_torch_dtype(torch, e)) for e in entries}
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise CheckpointExistsError(f"'{path}' exists; pass overwrite=True (--force) to replace it", str(path))
        if path.is_symlink() or not path.is_dir() or not (path / ".metadata").is_file():
            raise CheckpointExistsError(f"'{path}' is not a DCP checkpoint directory; it is left as it is", str(path))
    written = [0]

    class _FetchingPlanner(DefaultSavePlanner):  # type: ignore[misc]
        """The state dict holds meta tensors; the data is fetched when DCP writes each one."""

        def resolve_data(self, write_item: Any) -> Any:
            entry, dtype, via = plan[write_item.index.fqn]
            tensor = _tensor(torch, entry.fetch(), dtype, via)
            written[0] += tensor.numel() * tensor.element_size()
            return tensor

    state = {name: torch.empty(tuple(e.shape), dtype=dtype, device="meta") for name, (e, dtype, _) in plan.items()}
    with atomic_path(path) as tmp:
        writer = dcp.FileSystemWriter(str(tmp), single_file_per_rank=False, sync_files=True, thread_count=1)
        import warnings

        with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            try:
                dcp.save(state, storage_writer=writer, planner=_FetchingPlanner(), no_dist=True)
            except CheckpointException as err:  # a BaseException: never let it reach the CLI as a traceback
                raise _typed(err, path) from None
    return written[0]


def _typed(err: BaseException, path: Path) -> VarstoreError:
    """The error a DCP CheckpointException wraps, when varstore raised it (a damaged source: it names the file and
    the variable); else a ConversionError naming the destination and what torch reported."""
    failures = getattr(err, "failures", None) or {}
    for wrapped in failures.values():
        cause = wrapped[0] if isinstance(wrapped, tuple) and wrapped else wrapped
        if isinstance(cause, VarstoreError):
            return cause
    causes = [w[0] if isinstance(w, tuple) and w else w for w in failures.values()]
    detail = "; ".join(f"{type(c).__name__}: {c}" for c in causes) or type(err).__name__
    return ConversionError(f"torch.distributed.checkpoint failed writing '{path}' (nothing was written): {detail}")


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "dcp": write_dcp; takes no options."""
    if request.options:
        raise ConversionError(f"the DCP writer takes no options, got {', '.join(sorted(request.options))}")
    write_dcp(path, entries, overwrite=request.overwrite)
    return ()

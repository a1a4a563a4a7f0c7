"""varstore.load: one call from any checkpoint file to a dict of NumPy arrays.

The equivalent of safetensors.numpy.load_file / np.load for every format
open_checkpoint reads. varstore's own files go through restore's bulk path
(varstore/checkpoint/read/load.py: no per-variable open, read-ahead, every
checksum checked); foreign formats are read variable by variable through
their reader (which checks what the format records, e.g. TF bundle crc32c).
Never writes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy.typing as npt

from varstore.checkpoint.read.load import load_varstore, select_names
from varstore.checkpoint.read.reader import VarstoreReader

__all__ = ["load"]


def load(path: os.PathLike[str] | str, names: list[str] | None = None, filter: str | None = None, *,
         format: str | None = None, **options: Any) -> dict[str, npt.NDArray[Any]]:
    """Reads a checkpoint's variables into NumPy arrays, as safetensors.numpy.load_file.

    Args:
      path: anything open_checkpoint accepts (varstore .h5/.zarr, TF bundle,
        Keras, safetensors, npz, plain HDF5/Zarr).
      names: the variables to load, in this order (None: all, in checkpoint order).
      filter: shell glob on names ("encoder/*"), as CheckpointReader.filter;
        applied after `names`.
      format: skip detection (see open_checkpoint).
      **options: passed to open_checkpoint (strip_attributes, skip_object_arrays, and
        `max_bytes`: the most bytes one variable may declare; `max_expansion`: the most times its stored
        bytes a variable may decode or fill to, plus 64 MiB; see docs/reliability.md).

    Returns:
      {name: array} with each variable's stored shape and logical dtype
      (bfloat16/float8 as ml_dtypes), each writable and sharing memory with no
      other. Memory: the arrays plus, for varstore files in the packed layout,
      the packed blob (at most 256 MiB) while loading; when the loaded small
      variables hold at least half of that blob, they are views of it (no
      copy each, as safetensors' arrays are views of its buffers), so it lives
      as long as one of them does. From a varstore checkpoint on Linux 5.14+,
      a helper thread faults the arrays in ahead of the reads; arrays of
      4 MiB and more are on 4 KiB pages when the bytes come from a disk or
      object storage, on transparent huge pages when they are in memory
      already (varstore/checkpoint/read/residency.py). The arrays read from a
      varstore checkpoint start on a page (256 KiB and more) or a 64-byte
      line (4 KiB and more), so the kernel copies into them aligned: each is
      then a view of a private buffer up to 4 KiB larger (`.base` is that
      buffer, `flags.owndata` is False; varstore/store/host_arrays.py).

    Raises:
      UnknownVariableError: a name in `names` that the checkpoint lacks.
      ChecksumError: a variable's bytes do not match its recorded checksum.
      ValueTooLargeError: a variable declares more bytes than the read limit (nothing allocated for it).
      UnsafeCheckpointError: a varstore manifest whose variables' byte ranges overlap.
      Everything open_checkpoint raises.
    """
    from varstore.formats import open_any

    reader = open_any(path, format, **options)
    try:
        if isinstance(reader, VarstoreReader):
            return load_varstore(reader, names, filter)
        return {name: reader.read(name) for name in select_names(reader.keys(), names, filter, reader)}
    finally:
        reader.close()

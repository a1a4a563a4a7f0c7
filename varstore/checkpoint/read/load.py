"""Loading a varstore checkpoint into a dict of NumPy arrays through restore's bulk path.

`load_varstore` allocates one array per selected variable (after checking
that the file really holds the bytes its manifest claims) and fills them all
with one `restore` into that mapping: the packed blob is read once, values
are read with preadv straight into the arrays in file order with read-ahead,
and every checksum is checked before it returns, while a helper thread
faults the new arrays in ahead of the reads (residency.py). Packed variables that hold
at least half of the blob's bytes are returned as views of it (no copy
each). Memory: the arrays, plus the packed blob (at most 256 MiB, packed
layout only) while it runs. The
public entry point for every format is varstore.load (varstore/formats/load.py).
Never writes.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.format.packed import packed_views
from varstore.checkpoint.read.read_engine import PACKED_CACHE_BYTES, check_packed
from varstore.checkpoint.read.reader import VarstoreReader, open_varstore
from varstore.checkpoint.read.residency import populated
from varstore.checkpoint.read.restoration import restore
from varstore.store.host_arrays import host_empty

__all__ = ["load_varstore", "select_names"]


def select_names(keys: list[str], names: list[str] | None, filter: str | None, reader: Any) -> list[str]:
    """`names` (all keys when None) in their given order, narrowed to those matching the glob `filter`.

    Raises:
      UnknownVariableError: a name that is not in the checkpoint (from `reader.info`).
    """
    import fnmatch

    if names is None:
        selected = list(keys)
    else:
        selected = []
        for name in names:
            reader.info(name)  # raises UnknownVariableError naming the name and the file
            selected.append(name)
    if filter is not None:
        selected = [name for name in selected if fnmatch.fnmatchcase(name, filter)]
    return selected


def _load_packed(reader: VarstoreReader, selected: list[str], verify: bool) -> dict[str, npt.NDArray[Any]]:
    """The selected packed variables as arrays: the blob read once, every checksum checked on it first,
    then one view per variable out of its run's block (W2: 50,000 variables at safetensors' pace).

    The blob is this call's own, so when the selected variables hold at least half of its bytes the
    arrays are views of it (writable, disjoint; no copy each); otherwise each is copied out, so that
    a few small arrays never keep a large blob alive. Empty when there are none or the blob is
    larger than the bulk engine reads whole.
    """
    columns = reader.manifest.columns
    paths = columns["path"]
    indices = list(map(reader.manifest.index.__getitem__, selected))  # select_names checked every name
    packed_flags = list(map(operator.is_, map(paths.__getitem__, indices), itertools.repeat(None)))
    if not packed_flags.count(True):
        return {}
    if packed_flags.count(True) != len(indices):
        selected = list(itertools.compress(selected, packed_flags))
        indices = list(itertools.compress(indices, packed_flags))
    blob = reader.packed_blob(PACKED_CACHE_BYTES)
    if blob is None:
        return {}
    if verify:
        check_packed(reader, blob, indices)
    views = packed_views(blob, columns, reader.manifest.names, indices, str(reader.path))
    if 2 * sum(map(columns["nbytes"].__getitem__, set(indices))) >= len(blob):
        return dict(zip(selected, views))
    return {name: view.copy() for name, view in zip(selected, views)}


def load_varstore(path: os.PathLike[str] | str | VarstoreReader, names: list[str] | None = None,
                  filter: str | None = None, *, format: str | None = None,
                  verify: bool = True) -> dict[str, npt.NDArray[Any]]:
    """{name: array} of a varstore checkpoint, every checksum checked (see varstore.load).

    Raises:
      UnknownVariableError: a name in `names` that the checkpoint lacks.
      ChecksumError: damaged bytes (names the variable and the file).
      CorruptCheckpointError: a value the file does not hold (truncated).
    """
    reader = path if isinstance(path, VarstoreReader) else open_varstore(path, format)
    try:
        selected = select_names(reader.keys(), names, filter, reader)
        packed = _load_packed(reader, selected, verify)
        out: dict[str, npt.NDArray[Any]] = {}
        rest = [name for name in selected if name not in packed] if packed else selected
        reader.locate(rest)  # Zarr: metadata read in parallel
        for name in rest:
            record = reader.record(name)
            reader.check_stored(record)  # before allocating what the manifest claims
            out[name] = host_empty(record.shape, record.numpy_dtype)  # page-aligned: the kernel's copy runs aligned
        if out:
            # in restore's read order: page faults overlap the disk; huge pages when no disk is read
            with populated(list(out.values()), functools.partial(reader.resident, list(out))):
                restore(reader, out, verify=verify)  # names not selected are merely "unexpected" there
        if not packed or not out:
            return out or packed  # one kind only: already in the order selected
        return {name: packed[name] if name in packed else out[name] for name in selected}
    finally:
        if reader is not path:
            reader.close()

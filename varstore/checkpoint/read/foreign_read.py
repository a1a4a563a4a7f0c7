"""Restoring from a CheckpointReader of another format (TF bundle, safetensors, PyTorch, npz, ...): sources and fills.

varstore's own checkpoints go through read_engine (packed blobs, checksum
threads, regions). Every other registered format is read here through the
reader's public `keys / info / read`: each entry is a ValueSource
(`ReaderSource`), values are read whole, checked against the shape the
reader declared, and assigned only once every target was validated and read
(all-or-nothing). Deferred restores (`ReaderResolver`) keep the reader and
read at the new variable's first use, as for varstore's own lazy path.
Decides nothing about names (restore.py does); never opens or writes files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes
from varstore.dtypes import dtype_name
from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.errors import CorruptCheckpointError, ShapeMismatchError
from varstore.store.value_sources import SliceInfo, ValueSource
from varstore.store.values import check_fits

__all__ = ["ReaderSource", "ReaderResolver", "fill_from_reader"]


class ReaderSource:
    """One entry of an open CheckpointReader as a ValueSource, or a region of it (a part of a partitioned variable).

    Attributes:
      origin: "'<name>' in '<checkpoint>'" for error messages.
      shape: the shape read_into fills (the region's, for a part).
      dtype: the stored dtype (as the reader declares it).
    """

    def __init__(self, reader: CheckpointReader, name: str,
                 region: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> None:
        info = reader.info(name)
        self._reader = reader
        self._name = name
        self.stored_shape = tuple(int(d) for d in info.shape)
        self.dtype = dtypes.as_dtype(info.dtype)
        self._region = region
        self.shape = self.stored_shape if region is None else tuple(region[1])
        self.origin = f"'{name}' in '{reader.location}'"

    def read_whole(self) -> npt.NDArray[Any]:
        """The whole stored array, checked against the shape the reader declared."""
        # a reader that can lend a read-only view of bytes it already holds saves a copy (restore copies
        # the value into its target anyway): SnapshotReader.read_view
        view = getattr(self._reader, "read_view", None)
        value = np.asarray(view(self._name) if view is not None else self._reader.read(self._name))
        if tuple(value.shape) != self.stored_shape:
            raise CorruptCheckpointError(
                f"cannot restore {self.origin}: its {self._reader.format} metadata declares shape "
                f"{self.stored_shape}, reading it gave {tuple(value.shape)}; the file is damaged")
        return value

    def region_of(self, whole: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """This source's value within `whole` (the stored array): all of it, or a part's region."""
        if self._region is None:
            return whole
        offset, shape = self._region
        return whole[tuple(slice(o, o + s) for o, s in zip(offset, shape))]

    def read(self) -> npt.NDArray[Any]:
        """The value (the region of it for a part), as stored; checked against the declared shape."""
        return self.region_of(self.read_whole())

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (this source's shape), cast from the stored dtype by NumPy's 'same_kind' rule."""
        value = self.read()
        check_fits(value, out.dtype, f"restore {self.origin} into {dtype_name(out.dtype)}")
        np.copyto(out, value, casting="same_kind")


class ReaderResolver:
    """A deferred restore from a CheckpointReader (a varstore.value_sources.Resolver).

    `waiting` maps target names (after the assignment_map) to stored names.
    A variable takes the value of its name once; a part of a partitioned
    variable whose full name waits takes its region of the stored array
    (read whole at the part's first use).
    """

    def __init__(self, reader: CheckpointReader, waiting: dict[str, str]) -> None:
        self.reader = reader
        self.waiting = waiting
        self._taken: set[str] = set()  # full names of partitioned variables some part took a region of

    def __call__(self, name: str, slice_info: SliceInfo | None) -> ValueSource | None:
        """The source of new variable `name` (a part when `slice_info` is given), or None.

        Raises:
          ShapeMismatchError: a part's whole variable has another shape than the stored array.
        """
        if slice_info is not None and slice_info.full_name in self.waiting:
            stored_name = self.waiting[slice_info.full_name]
            source = ReaderSource(self.reader, stored_name,
                                  (tuple(slice_info.var_offset), tuple(slice_info.var_shape)))
            if source.stored_shape != tuple(slice_info.full_shape):
                raise ShapeMismatchError(
                    f"cannot restore partitioned variable '{slice_info.full_name}' (part '{name}') from "
                    f"{source.origin}: it has shape {source.stored_shape}, the variable was created with "
                    f"{tuple(slice_info.full_shape)}; create it with the stored shape")
            self._taken.add(slice_info.full_name)
            return source
        if name not in self.waiting:
            return None
        return ReaderSource(self.reader, self.waiting.pop(name))

    def unconsumed(self) -> list[str]:
        """The stored names no variable has taken yet."""
        return [stored for target, stored in self.waiting.items() if target not in self._taken]


def _check_region(name: str, target: Any, source: ReaderSource) -> None:
    info = getattr(target, "save_slice_info", None)
    if info is not None and tuple(info.full_shape) != source.stored_shape:
        raise ShapeMismatchError(
            f"cannot restore partitioned variable '{info.full_name}' (part '{name}') from {source.origin}: it "
            f"has shape {source.stored_shape}, the variable was created with {tuple(info.full_shape)}; "
            f"create it with the stored shape")


def fill_from_reader(reader: CheckpointReader, items: Sequence[tuple[str, str, Any]], *, lazy: bool,
                     validate: Callable[[str, Any, ReaderSource], None],
                     regions: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None) -> None:
    """Fills every target from `reader`: all validated, then (eagerly) all read, then all assigned.

    Args:
      reader: the open checkpoint (any format).
      items: (checkpoint name, target name, target) triples; a target is a
        Variable (anything with `restore_from`) or a writeable NumPy array.
      lazy: Variables get a source read at first use (the reader stays open);
        arrays are filled now either way.
      validate: called for every item before anything is read or changed; raises to refuse.
      regions: {target name: (offset, shape)} for parts of a partitioned variable, which take that
        region of the stored whole array (each stored array is read once for all its parts).

    Raises:
      Whatever `validate` raises, and the reader's errors (CorruptCheckpointError,
      ChecksumError, ...), before any target changed.
    """
    from varstore.store.variables import restore_many

    regions = regions or {}
    sources = [ReaderSource(reader, stored, regions.get(name)) for stored, name, _ in items]
    for (_, name, target), source in zip(items, sources):
        if name in regions:
            _check_region(name, target, source)
        validate(name, target, source)
    variables, values, arrays = [], [], []
    whole: dict[str, npt.NDArray[Any]] = {}  # stored arrays read once for all their parts
    for (stored, name, target), source in zip(items, sources):
        if hasattr(target, "restore_from") and lazy:
            continue
        if stored not in whole:
            whole[stored] = source.read_whole()
        value = source.region_of(whole[stored])
        check_fits(value, target.dtype, f"restore '{name}' from {source.origin}")  # before any target changes
        if hasattr(target, "restore_from"):
            variables.append(target)
            values.append(value)
        else:
            arrays.append((target, value))
    restore_many(variables, values)
    for array, value in arrays:
        np.copyto(array, value, casting="same_kind")
    if lazy:
        for (_, _, target), source in zip(items, sources):
            if hasattr(target, "restore_from"):
                target.restore_from(source, lazy=True)

"""Reads plain HDF5 files and Zarr v2/v3 groups that no checkpoint tool wrote.

Every plain numeric (or fixed-length string) dataset is a variable, named by
its path without the leading "/"; everything else (compound, variable-length
and reference datasets, soft, dangling and external links) is listed in
`skipped` with the reason (also datasets of a type NumPy lacks, or needing an HDF5 filter
that is not installed, and further hard links to one dataset). Declared
sizes are checked against the read limit before a value is allocated
(varstore/_limits.py). The walkers in varstore.backends do the h5py/zarr
work; this module only maps their entries to variables. Also hosts
WalkerReader, the base the Keras readers share.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import check_value_size
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry, VariableInfo, checked_out
from varstore.errors import UnknownVariableError

if TYPE_CHECKING:
    from varstore.backends.hdf5.walker import HDF5Walker
    from varstore.formats.probe import Probe

__all__ = ["WalkerReader", "GenericHDF5Reader", "GenericZarrReader", "open_hdf5", "open_zarr"]


class _Entry(Protocol):
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[str, Any]


class _Walker(Protocol):
    label: str

    def entry(self, path: str) -> _Entry: ...

    def read(self, path: str, out: npt.NDArray[Any] | None = None,
             max_expansion: float | None = None) -> npt.NDArray[Any]: ...

    def stored(self, path: str) -> tuple[int | None, bool]: ...

    def close(self) -> None: ...


class WalkerReader(CheckpointReader):
    """A CheckpointReader over a walker (HDF5Walker or ZarrWalker) and a name -> path map.

    `trainable` is taken from a boolean "trainable" attribute of the dataset
    when present, else from `trainable` given per name, else None.
    """

    def __init__(self, path: Path, walker: _Walker, names: dict[str, str],
                 trainable: dict[str, bool] | None = None) -> None:
        super().__init__(path)
        self._walker = walker
        self._names = dict(names)
        self._trainable = dict(trainable or {})

    def keys(self) -> list[str]:
        return list(self._names)

    def _path(self, name: str) -> str:
        path = self._names.get(name)
        if path is None:
            reason = next((s.reason for s in self.skipped if s.name == name), None)
            why = "" if reason is None else f" ('{name}' is skipped: {reason})"
            raise UnknownVariableError(f"no variable '{name}' in {self.format} file '{self.path}'{why}")
        return path

    def info(self, name: str) -> VariableInfo:
        path = self._path(name)
        entry = self._walker.entry(path)
        trainable = entry.attrs.get("trainable")
        if not isinstance(trainable, bool):
            trainable = self._trainable.get(name)
        attributes = dict(entry.attrs)
        if path != name:
            attributes["path"] = path
        dtype = _dtypes.as_dtype(entry.dtype)
        return VariableInfo(name=name, shape=entry.shape, dtype=_dtypes.dtype_name(dtype),
                            nbytes=int(np.prod(entry.shape, dtype=object)) * dtype.itemsize,
                            trainable=trainable, attributes=attributes)

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one variable through the walker (see HDF5Walker.read / ZarrWalker.read).

        Without `out`, the declared size is checked first against the read
        limit (`max_bytes`), which by default also bounds it by what the file
        stores for the value (an HDF5 dataset whose chunks were never written
        stores 0 bytes): see varstore/_limits.py.

        Raises:
          ValueTooLargeError: naming the variable, its declared and stored bytes and the limit.
        """
        path = self._path(name)
        entry = self._walker.entry(path)
        if out is None:
            declared = int(np.prod(entry.shape, dtype=object)) * np.dtype(entry.dtype).itemsize
            stored, filtered = self._walker.stored(path)
            check_value_size(name, self.location, declared, self.max_bytes, stored=stored, filtered=filtered,
                             expansion=self.max_expansion)
        result = checked_out(name, entry.shape, entry.dtype, out)
        return self._walker.read(path, result, self.max_expansion)

    def close(self) -> None:
        self._walker.close()


class GenericHDF5Reader(WalkerReader):
    """Any HDF5 file: datasets are variables named by path ("experiment/run_01/measurements").

    `metadata` holds the root group's attributes; `skipped` the objects that
    are not plain arrays, with reasons.
    """

    format = "hdf5"

    def __init__(self, path: os.PathLike[str] | str, walker: HDF5Walker | None = None) -> None:
        """Opens and walks the file, or takes over `walker` (already walked; closed by close()).

        Raises CorruptCheckpointError when h5py cannot open or walk the file.
        """
        if walker is None:
            from varstore.backends.hdf5.walker import HDF5Walker

            walker = HDF5Walker(path)
        super().__init__(Path(path), walker, {d.path: d.path for d in walker.datasets})
        self.metadata = dict(walker.root_attrs)
        self.skipped = [SkippedEntry(s.path, s.reason) for s in walker.skipped]


class GenericZarrReader(WalkerReader):
    """Any Zarr v2 or v3 hierarchy: arrays are variables named by path ("encoder/block_0/kernel").

    A hierarchy whose root is a single array gives one variable named after
    the directory without its ".zarr" suffix. `metadata` holds the root's
    attributes; `format_version` is "zarr-v2" or "zarr-v3".
    """

    format = "zarr"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Raises CorruptCheckpointError when zarr cannot open or walk the hierarchy."""
        from varstore.backends.zarr3.walker import ZarrWalker

        walker = ZarrWalker(path)
        root_name = Path(path).name.removesuffix(".zarr") or "array"
        names = {(a.path or root_name): a.path for a in walker.arrays}
        super().__init__(Path(path), walker, names)
        self.metadata = dict(walker.root_attrs)
        self.format_version = f"zarr-v{walker.zarr_format}"
        self.skipped = [SkippedEntry(s.path, s.reason) for s in walker.skipped]


# ------------------------------------------------------------------ the registry's entry points
def open_hdf5(path: Path, *, probe: Probe | None = None, **options: Any) -> GenericHDF5Reader:
    """The registry's open for "hdf5": reuses the probe's HDF5 walk when detection made one."""
    return GenericHDF5Reader(path, probe.take_hdf5() if probe is not None else None)


def open_zarr(path: Path, *, probe: Probe | None = None, **options: Any) -> GenericZarrReader:
    """The registry's open for "zarr": a GenericZarrReader (options are ignored)."""
    return GenericZarrReader(path)


_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")


def sniff_hdf5(probe: Probe) -> Path | None:
    """Any other HDF5 file (signature at byte 0, 512, 1024, ...)."""
    return probe.path if probe.is_file and probe.is_hdf5 else None


def sniff_zarr(probe: Probe) -> Path | None:
    """A Zarr v2 or v3 hierarchy: a directory with zarr.json, .zgroup, .zarray or .zmetadata."""
    if probe.is_dir and any((probe.path / marker).is_file() for marker in _ZARR_MARKERS):
        return probe.path
    return None

"""Storage backends: the Protocol every backend implements, and the registry by name and suffix.

A backend stores named arrays (dtype, shape, C-order little-endian bytes)
and JSON-compatible attributes in one HDF5 file or one Zarr v3 directory.
It knows nothing about variables, manifests, checksums or atomic renames:
the checkpoint layer decides what to write and where the bytes go.

For speed a backend hands out a `RawExtent` (file, byte offset, byte count)
where an array's bytes live uncompressed and contiguous, so the checkpoint
layer can write and read them with single pwrite/preadv calls straight from
and into the variables' buffers. Arrays without such an extent are written
and read through the backend's library.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from varstore.errors import UnsupportedFormatError

__all__ = [
    "RawExtent",
    "BackendWriter",
    "BackendReader",
    "Backend",
    "FORMATS",
    "get_backend",
    "format_for_path",
]


@dataclasses.dataclass(frozen=True)
class RawExtent:
    """Where an array's raw bytes live: `nbytes` bytes at byte `offset` of `file`.

    The bytes are the array's C-order, little-endian values, uncompressed.
    """

    file: Path
    offset: int
    nbytes: int


class BackendWriter(Protocol):
    """Writes one new checkpoint container (a file or directory that does not exist yet)."""

    #: True when the backend stores fixed-length bytes ("S<n>") natively.
    native_bytes_strings: bool

    def create_array(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                     attrs: dict[str, Any]) -> RawExtent | None:
        """Creates an array at `path` ("a/b/c"; parent groups are created).

        Returns the extent where the caller must write its bytes, or None when
        the caller must call `write_array` instead (scalars, zero-size arrays).
        """

    def write_array(self, path: str, value: npt.NDArray[Any]) -> None:
        """Writes a whole array created with `create_array` through the library."""

    def set_root_attrs(self, attrs: dict[str, Any]) -> None:
        """Sets attributes of the root group."""

    def close(self) -> list[Path]:
        """Finishes the container; returns every file and directory to fsync."""


class BackendReader(Protocol):
    """Reads one existing checkpoint container, read-only."""

    def root_attrs(self) -> dict[str, Any]:
        """Attributes of the root group."""

    def raw_extent(self, path: str, dtype: np.dtype, shape: tuple[int, ...]) -> RawExtent | None:
        """The extent holding the array's bytes, or None when it is stored otherwise."""

    def read_bytes(self, path: str) -> bytes:
        """All bytes of a 1-D uint8 array (used for the manifest)."""

    def read_array(self, path: str, out: npt.NDArray[Any]) -> None:
        """Reads the array at `path` through the library into `out` (its storage dtype and shape)."""

    def array_attrs(self, path: str) -> dict[str, Any]:
        """Attributes of the array at `path`."""

    def close(self) -> None:
        """Releases handles."""


class Backend(Protocol):
    """A storage format: how to sniff, open for writing, open for reading."""

    #: Short name ("h5", "zarr").
    name: str
    #: What a container is, for messages ("HDF5 file", "Zarr v3 directory").
    description: str
    suffixes: tuple[str, ...]
    #: True when a container is a directory of files, False for one file.
    is_directory: bool
    #: True when fixed-length bytes ("S<n>") are stored natively (as BackendWriter.native_bytes_strings).
    native_bytes_strings: bool

    def sniff(self, path: Path) -> bool:
        """True when `path` looks like this backend's container (magic bytes / zarr.json)."""

    def open_writer(self, path: Path, header_bytes: int = 0) -> BackendWriter:
        """Creates a new container at `path`.

        `header_bytes` (bytes) reserves room at the start of a single-file
        container that the format ignores (HDF5's user block), for the caller
        to fill; directory backends ignore it.
        """

    def open_reader(self, path: Path) -> BackendReader:
        """Opens an existing container read-only."""


#: format name -> suffixes; "h5" is HDF5, "zarr" is a Zarr v3 directory.
FORMATS = {"h5": (".h5", ".hdf5"), "zarr": (".zarr",)}
_ALIASES = {"h5": "h5", "hdf5": "h5", "varstore-hdf5": "h5", "zarr": "zarr", "zarr3": "zarr",
            "varstore-zarr": "zarr"}


def get_backend(name: str) -> Backend:
    """Returns the backend for a format name ("h5"/"hdf5" or "zarr"/"zarr3").

    Raises:
      UnsupportedFormatError: unknown name.
      MissingDependencyError: the backend's library is not installed.
    """
    key = _ALIASES.get(str(name).lower())
    if key == "h5":
        from varstore.backends.hdf5 import BACKEND
        return BACKEND
    if key == "zarr":
        from varstore.backends.zarr3 import BACKEND as ZARR_BACKEND
        return ZARR_BACKEND
    raise UnsupportedFormatError(
        f"unknown checkpoint format {name!r}: use 'h5' (HDF5 file) or 'zarr' (Zarr v3 directory)")


def format_for_path(path: Path | str, format: str | None = None) -> str:
    """The format name ("h5" or "zarr") from `format`, else from the path's suffix.

    Raises:
      UnsupportedFormatError: no `format` and the suffix is neither .h5/.hdf5 nor .zarr.
    """
    if format is not None:
        key = _ALIASES.get(str(format).lower())
        if key is None:
            raise UnsupportedFormatError(
                f"unknown checkpoint format {format!r} for '{path}': use 'h5' or 'zarr'")
        return key
    suffix = Path(path).suffix.lower()
    for key, suffixes in FORMATS.items():
        if suffix in suffixes:
            return key
    raise UnsupportedFormatError(
        f"cannot tell the checkpoint format of '{path}' from its suffix {suffix!r}: "
        f"name it .h5/.hdf5 or .zarr, or pass format='h5' or format='zarr'")

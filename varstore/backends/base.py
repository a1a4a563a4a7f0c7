"""The storage backend contract: RawExtent and the Protocols every backend (HDF5, Zarr v3) implements.

A backend stores named arrays (dtype, shape, C-order little-endian bytes)
and JSON-compatible attributes in one HDF5 file or one Zarr v3 directory.
For speed it hands out a `RawExtent` (file, byte offset, byte count) where an
array's bytes live uncompressed and contiguous. Types only: no backend is
imported here and nothing is registered (varstore.backends does that), so a
backend can import its contract without importing the registry that loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

    from varstore.storage.protocol import Storage

__all__ = ["RawExtent", "BackendWriter", "BackendReader", "Backend"]


class RawExtent:
    """Where an array's raw bytes live: `nbytes` bytes at byte `offset` of `file`.

    The bytes are the array's C-order, little-endian values, uncompressed.
    Immutable, compared and hashed by its three fields (what a frozen dataclass
    gives; a plain slotted class, so that reading a checkpoint does not import
    `dataclasses` or run its class generation).
    """

    __slots__ = ("file", "offset", "nbytes")
    __match_args__ = ("file", "offset", "nbytes")

    file: Path
    offset: int
    nbytes: int

    def __init__(self, file: Path, offset: int, nbytes: int) -> None:
        _set = object.__setattr__
        _set(self, "file", file)
        _set(self, "offset", offset)
        _set(self, "nbytes", nbytes)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: RawExtent is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: RawExtent is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, RawExtent)
        return (self.file, self.offset, self.nbytes) == (other.file, other.offset, other.nbytes)

    def __hash__(self) -> int:
        return hash((self.file, self.offset, self.nbytes))

    def __repr__(self) -> str:
        return f"RawExtent(file={self.file!r}, offset={self.offset!r}, nbytes={self.nbytes!r})"

    def __reduce__(self) -> tuple[type[RawExtent], tuple[Path, int, int]]:
        return (RawExtent, (self.file, self.offset, self.nbytes))


class BackendWriter(Protocol):
    """Writes one new checkpoint container (a file or directory that does not exist yet)."""

    #: True when the backend stores fixed-length bytes ("S<n>") natively.
    native_bytes_strings: bool

    def create_array(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                     attrs: dict[str, Any], *, hold_attrs: bool = False) -> RawExtent | None:
        """Creates an array at `path` ("a/b/c"; parent groups are created).

        Returns the extent where the caller must write its bytes, or None when
        the caller must call `write_array` instead (scalars, zero-size arrays).
        `hold_attrs`: the caller will call `add_attrs` for this array (a backend
        that writes an array's attributes in one document may wait for them).
        """

    def add_attrs(self, path: str, attrs: dict[str, Any]) -> None:
        """Adds attributes to an array created with `create_array` (with `hold_attrs` where it matters)."""

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

    def check_groups(self, paths: list[str]) -> None:
        """Checks the metadata of every group above the arrays at `paths` (for `verify`; the arrays' own
        metadata is checked when they are read); raises CorruptCheckpointError naming the damaged file."""

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

    def open_writer(self, path: Path, header_bytes: int = 0, storage: Storage | None = None) -> BackendWriter:
        """Creates a new container at `path`.

        `header_bytes` (bytes) reserves room at the start of a single-file
        container that the format ignores (HDF5's user block), for the caller
        to fill; directory backends ignore it. `storage`, when given, is where
        a directory backend writes its metadata documents other than the
        root's (Zarr: every array's and group's zarr.json, each in one whole
        write), so a storage that uploads whole files sends them as they are
        made; None writes them as local files. Single-file backends ignore it.
        """

    def open_reader(self, path: Path, source: BinaryIO | Mapping[str, bytes] | None = None) -> BackendReader:
        """Opens an existing container read-only; `source` (single-file containers only) is a seekable
        binary file to read instead of `path` (an object read with ranged GETs), `path` then names it;
        for a directory container, a mapping {path under `path`: bytes} of the small files read whole
        (metadata, the manifest) held in memory instead (a checkpoint on an object store)."""

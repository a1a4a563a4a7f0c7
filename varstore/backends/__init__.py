"""Storage backends: the registry by name and suffix (get_backend, format_for_path).

Maps "h5"/"hdf5" and "zarr"/"zarr3" (and file suffixes) to the HDF5 and
Zarr v3 backends, importing a backend only when asked for. The contract the
backends implement (RawExtent, BackendWriter, BackendReader, Backend) is in
varstore/backends/base.py and re-exported here; this module knows no layout.
"""

from __future__ import annotations

from pathlib import Path

from varstore.backends.base import Backend, BackendReader, BackendWriter, RawExtent
from varstore.errors import UnsupportedFormatError

__all__ = [
    "RawExtent",
    "BackendWriter",
    "BackendReader",
    "Backend",
    "FORMATS",
    "get_backend",
    "format_for_path",
    "container_names",
]


#: format name -> suffixes; "h5" is HDF5, "zarr" is a Zarr v3 directory.
FORMATS = {"h5": (".h5", ".hdf5"), "zarr": (".zarr",)}
_ALIASES = {"h5": "h5", "hdf5": "h5", "varstore-hdf5": "h5", "zarr": "zarr", "zarr3": "zarr",
            "varstore-zarr": "zarr"}


def container_names(container: str) -> tuple[str, ...]:
    """Every name of varstore's container `container` ("h5" or "zarr"), the container's own first
    ("h5", "hdf5", "varstore-hdf5"): what format= / --to accept for it (the format registry reads this)."""
    return tuple(name for name, key in _ALIASES.items() if key == container)


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

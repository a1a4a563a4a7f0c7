"""Read-only walker for Zarr v2 / v3 hierarchies that varstore did not write.

Lists every array with its shape, dtype, chunking and attributes, and every
array that is not a plain fixed-size array (variable-length strings,
structured or object dtypes) with the reason it is not read. Reads one array
at a time. Symbolic links leading outside the hierarchy are listed as
skipped and never followed. Codecs are allow-listed before zarr opens the
hierarchy, Zarr v2 arrays are read by v2_array (bounded decoders, the chunk
files present only) and Zarr v3 chunks are checked by chunk_check before
zarr decodes them; a grid far larger than its chunk files is refused. The
importer varstore.formats.plain.generic uses it so it never imports zarr itself;
it knows nothing about variables or checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr

from varstore._limits import check_grid, load_json
from varstore.backends.zarr3.chunk_check import check_codecs, check_v2_chunks, check_v3_chunks, chunk_files
from varstore.backends.zarr3.v2_array import open_v2_array, read_v2_array
from varstore.errors import CorruptCheckpointError, UnknownVariableError, UnsupportedFormatError, VarstoreError
from varstore.storage.links import links_leading_out
from varstore.storage._local_errors import is_permission_error, permission_denied
from varstore.storage.special_files import check_tree

__all__ = ["ArrayEntry", "SkippedObject", "ZarrWalker"]


@dataclasses.dataclass(frozen=True)
class ArrayEntry:
    """One readable array.

    Attributes:
      path: path inside the hierarchy without a leading "/" ("encoder/block_0/kernel");
        "" when the root itself is an array.
      shape: dimension sizes; () for a 0-d array.
      dtype: NumPy dtype (native byte order).
      attrs: the array's attributes (JSON values as stored).
      chunks: chunk shape (inner chunks when sharded).
      shards: shard shape for sharded Zarr v3 arrays, else None.
      filtered: whether its stored bytes pass through compressors or filters on read.
    """

    path: str
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[str, Any]
    chunks: tuple[int, ...] | None = None
    shards: tuple[int, ...] | None = None
    filtered: bool = True


_METADATA_FILES = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}


def _stored_nbytes(directory: Path) -> int | None:
    """Bytes of the chunk files under an array's directory (symlinks not followed), or None when unreadable."""
    total = 0
    try:
        for folder, _, files in os.walk(directory):
            for name in files:
                if name not in _METADATA_FILES:
                    total += os.lstat(os.path.join(folder, name)).st_size
    except OSError:
        return None
    return total


@dataclasses.dataclass(frozen=True)
class SkippedObject:
    """An array that is not read, with the reason."""

    path: str
    reason: str


_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, AttributeError, IndexError)


def _skip_reason(dtype: Any) -> str | None:
    if not isinstance(dtype, np.dtype):
        return f"dtype {dtype} has no fixed-size NumPy equivalent"
    if dtype.names:
        return f"structured dtype {dtype}; only plain numeric arrays are variables"
    if dtype.subdtype is not None:
        return f"array-of-arrays dtype {dtype}; only plain numeric arrays are variables"
    if dtype.kind == "O" or dtype.kind == "T":
        return "variable-length data (strings or objects)"
    if dtype.kind not in "biufcSU" or (dtype.kind in "SU" and dtype.itemsize == 0):
        return f"dtype {dtype} is not a plain numeric array"
    return None


class ZarrWalker:
    """Opens a Zarr v2 or v3 group (or single array) read-only and lists its arrays.

    Attributes:
      label: the path used in messages.
      zarr_format: 2 or 3.
      arrays: readable arrays, depth-first in name order.
      groups: group paths ("" for the root) and their attributes.
      skipped: arrays that are not read, with reasons.
      root_attrs: the root's attributes.
    """

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Opens the hierarchy at `path` and walks its metadata.

        Raises:
          CorruptCheckpointError: zarr cannot open or walk it.
          CheckpointPermissionError: a metadata file (zarr.json, .zgroup ...) may not be read; names it.
          SpecialFileError: a FIFO, socket, device or symlink loop in the directory (checked first).
        """
        self.label = str(path)
        self.arrays: list[ArrayEntry] = []
        self.groups: list[tuple[str, dict[str, Any]]] = []
        self.skipped: list[SkippedObject] = []
        self._nodes: dict[str, Any] = {}
        self._reasons: dict[str, str] = {}
        check_tree(path, "Zarr directory")  # zarr opens chunk files itself: none may be a FIFO or a loop
        check_codecs(Path(path))  # before zarr instantiates a codec from the file's metadata
        self._escapes = links_leading_out(Path(path))
        self._root = Path(path)
        try:
            root: Any = zarr.open(store=str(Path(path)), mode="r")
            self.zarr_format = int(root.metadata.zarr_format)
            self.root_attrs = dict(root.attrs)
            if isinstance(root, zarr.Group):
                self._walk(root, "")
            else:
                self._add_array(root, "")
        except _ERRORS as err:
            if is_permission_error(err):  # an unreadable zarr.json: typed as for every format and storage
                raise permission_denied(getattr(err, "filename", None) or path) from err
            raise CorruptCheckpointError(f"cannot open Zarr hierarchy '{self.label}': {err}") from err

    def _walk(self, group: Any, prefix: str) -> None:
        self.groups.append((prefix, dict(group.attrs)))
        for name, member in sorted(group.members(), key=lambda item: item[0]):
            path = f"{prefix}/{name}" if prefix else name
            escape = self._escape_under(path)
            if escape is not None:
                reason = (f"'{escape}' is a symbolic link leading outside '{self.label}'; "
                          f"varstore never reads outside the hierarchy it opens")
                self.skipped.append(SkippedObject(path, reason))
                self._reasons[path] = reason
                continue
            if isinstance(member, zarr.Group):
                self._walk(member, path)
            else:
                self._add_array(member, path)

    def _escape_under(self, path: str) -> str | None:
        """The first link leading outside that is `path`, lies under it or above it, else None."""
        for escape in self._escapes:
            if escape == path or escape.startswith(path + "/") or path.startswith(escape + "/"):
                return escape
        return None

    def _add_array(self, array: Any, path: str) -> None:
        dtype = array.dtype
        reason = _skip_reason(dtype)
        if reason is not None:
            self.skipped.append(SkippedObject(path, reason))
            self._reasons[path] = reason
            return
        if dtype.byteorder not in ("=", "|"):
            dtype = dtype.newbyteorder("=")
        shards = getattr(array, "shards", None)
        try:
            filtered = bool(array.compressors) or bool(array.filters)
        except _ERRORS:
            filtered = True
        entry = ArrayEntry(path=path, shape=tuple(int(d) for d in array.shape), dtype=dtype,
                           attrs=dict(array.attrs), chunks=tuple(array.chunks),
                           shards=tuple(shards) if shards else None, filtered=filtered)
        self.arrays.append(entry)
        self._nodes[path] = (entry, array)

    def array(self, path: str) -> ArrayEntry:
        """The entry of one readable array.

        Raises:
          UnsupportedFormatError: `path` is a skipped array (says why).
          UnknownVariableError: no readable array at `path`.
        """
        node = self._nodes.get(path)
        if node is None:
            if path in self._reasons:
                raise UnsupportedFormatError(f"cannot read '{path}' in '{self.label}': {self._reasons[path]}")
            raise UnknownVariableError(f"no array '{path}' in Zarr hierarchy '{self.label}'")
        return node[0]

    entry = array  # the name generic readers use for both walkers

    def stored(self, path: str) -> tuple[int | None, bool]:
        """(bytes of the chunk files under the array's directory, symlinks not followed; 0 when no chunk was
        written; None when unknown), whether they are compressed or filtered), walked when asked.

        Raises:
          UnsupportedFormatError / UnknownVariableError: as `array`.
        """
        entry = self.array(path)
        return _stored_nbytes(self._root / path), entry.filtered

    def _checked(self, path: str, entry: ArrayEntry, max_expansion: float | None) -> Path | None:
        """Bounds the grid by the chunk files present, and checks v3 chunks with bounded decoders; the
        array's directory when v2_array reads it (plain numeric Zarr v2), else None (zarr reads it)."""
        directory = self._root / path
        outer = entry.shards or entry.chunks or entry.shape
        grid = 1
        for size, chunk in zip(entry.shape, outer):
            grid *= -(-size // max(int(chunk), 1))
        check_grid(path or self._root.name, self.label, grid, len(chunk_files(directory)), max_expansion)
        name = path or self._root.name
        if self.zarr_format == 2:
            if not (directory / ".zarray").is_file():
                return None  # consolidated metadata only: zarr reads it (codecs checked at open)
            if entry.dtype.kind in "biufc":
                return directory
            meta = load_json((directory / ".zarray").read_bytes(), f"'{directory / '.zarray'}'")
            check_v2_chunks(directory, meta, entry.dtype.itemsize, name)
            return None
        meta = load_json((directory / "zarr.json").read_bytes(), f"'{directory / 'zarr.json'}'")
        check_v3_chunks(directory, meta, entry.dtype.itemsize, name)
        return None

    def read(self, path: str, out: npt.NDArray[Any] | None = None,
             max_expansion: float | None = None) -> npt.NDArray[Any]:
        """Reads one whole array (unwritten chunks read as the fill value), into `out` when given.

        `max_expansion` (None: VARSTORE_MAX_EXPANSION or the default) bounds the chunk grid by the chunk
        files present (varstore._limits.check_grid).

        Raises:
          UnsupportedFormatError / UnknownVariableError: as `array`.
          ValueTooLargeError: a grid far larger than the chunk files present.
          CorruptCheckpointError: a chunk cannot be read or decoded, or decodes past its size; the message
            names the array and the hierarchy.
        """
        entry = self.array(path)
        array = self._nodes[path][1]
        try:
            v2_directory = self._checked(path, entry, max_expansion)
            if v2_directory is not None:
                result = out if out is not None else np.empty(entry.shape, dtype=entry.dtype)
                name = path or self._root.name
                return read_v2_array(open_v2_array(v2_directory, name), result, name)
            value = np.asarray(array[...])
        except VarstoreError:
            raise
        except Exception as err:  # codecs raise their own types (zlib.error, blosc, zstd errors)
            raise CorruptCheckpointError(
                f"cannot read array '{path}' from Zarr hierarchy '{self.label}': {err}") from err
        if value.shape != entry.shape:
            raise CorruptCheckpointError(
                f"array '{path}' in '{self.label}' read back with shape {value.shape}, expected {entry.shape}")
        if out is None:
            return np.asarray(value, dtype=entry.dtype, order="C")
        out[...] = value
        return out

    def close(self) -> None:
        """Drops the references to the hierarchy (zarr holds no open files)."""
        self._nodes.clear()

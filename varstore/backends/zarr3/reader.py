"""Zarr3Reader: one Zarr v3 directory read read-only (metadata, raw chunk extents, values), symlinks kept inside.

Parses the zarr.json documents itself (Zarr v3 core specification), follows
either chunk key encoding, and hands the checkpoint layer raw extents of
uncompressed chunks; values of other arrays are read through zarr. Never
writes. Split from store.py (the writer and the backend) by job.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from varstore._limits import check_manifest_size, load_json
from varstore.backends.base import RawExtent
from varstore.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    MissingDependencyError,
    NotACheckpointError,
    SpecialFileError,
)
from varstore.storage._fs_types import path_in_memory
from varstore.storage._local_errors import permission_denied
from varstore.storage.special_files import check_regular_file, open_for_reading, read_regular_file

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy.typing as npt

__all__ = ["Zarr3Reader", "PARALLEL_METADATA_ARRAYS", "METADATA_THREADS", "CACHED_METADATA_S"]

#: `raw_extents` reads the metadata of at least this many arrays with several threads at once.
PARALLEL_METADATA_ARRAYS = 16
#: Threads reading array metadata at once: a cold directory tree costs one small random read per
#: directory, zarr.json and inode; several in flight keep the disk's queue busy (W1 cold: ~2x faster).
METADATA_THREADS = 8
#: Seconds per array under which the first PARALLEL_METADATA_ARRAYS arrays' metadata counts as cached, and the
#: rest is read without threads: W1's 384 arrays, page cache warm, take 16-24 ms serially and 66-73 ms with
#: 8 threads contending for the GIL (~50 us an array); cold, ~350 us an array serially.
CACHED_METADATA_S = 150e-6


def _chunk_key(encoding: Any, index: tuple[int, ...]) -> str | None:
    """The key of chunk `index` under a zarr.json's chunk_key_encoding (Zarr v3 core spec), or None
    for an encoding this reader does not know."""
    if not isinstance(encoding, dict):
        return None
    separator = (encoding.get("configuration") or {}).get("separator")
    if encoding.get("name") == "default":
        separator = "/" if separator is None else separator
        return "c" + "".join(separator + str(i) for i in index) if separator in ("/", ".") else None
    if encoding.get("name") == "v2":
        separator = "." if separator is None else separator
        return separator.join(str(i) for i in index) or "0" if separator in ("/", ".") else None
    return None


#: A file name as the reader checks it: a string (its own joins) or a Path (the callers').
_FileName = TypeVar("_FileName", str, Path)


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: np.dtype) -> str:
    """dtype.name, cached: NumPy computes it in Python (~3 us), once per array of a restore."""
    return dtype.name


class Zarr3Reader:
    """Reads one Zarr v3 directory read-only; see BackendReader."""

    def __init__(self, path: Path, files: Mapping[str, bytes] | None = None) -> None:
        self.path = Path(path)
        # small files held in memory instead of under `path` ({"zarr.json": ..., "w/zarr.json": ...}):
        # the metadata and manifest of a checkpoint on an object store, its chunks read through the storage
        self._files = files
        if files is None and not self.path.exists():
            raise CheckpointNotFoundError(f"no checkpoint at '{self.path}'")
        if not ("zarr.json" in files if files is not None else (self.path / "zarr.json").is_file()):
            raise NotACheckpointError(f"'{self.path}' is not a Zarr v3 directory (no zarr.json)")
        self._root_path = os.fspath(self.path)  # file names are joined as strings (no Path per file)
        self._real_root = os.path.realpath(self.path) + os.sep
        self._resolved: dict[str, str] = {self._root_path: self._real_root[:-1]}
        self._root = self._document("")
        if self._root.get("node_type") != "group":
            raise NotACheckpointError(f"'{self.path}' is a Zarr array, not a checkpoint group")

    def _inside(self, path: str, file: _FileName) -> _FileName:
        """`file`, after checking that it resolves (symlinks followed) to a place under the store's root.

        Called once per file opened, so a group, array directory or chunk file
        that is a symlink leading out of the store is never read.

        Raises:
          CorruptCheckpointError: naming the array/group path and the file.
        """
        real = self._resolve(os.fspath(file))
        if not real.startswith(self._real_root):
            raise CorruptCheckpointError(
                f"'{path or '/'}' of '{self.path}' leads outside it: '{file}' resolves to '{real}' "
                f"(a symlink?); refusing to read it")
        return file

    def _resolve(self, file: str) -> str:
        """os.path.realpath of `file`, its directories resolved once per reader (one lstat per new name).

        A name that is a symlink is resolved by os.path.realpath, and so is
        anything outside the root; the cache only skips re-checking the same
        directories for every array of the store.
        """
        parent, _, name = file.rpartition(os.sep)
        real_parent = self._resolved.get(parent)
        if real_parent is None:
            if not parent or not parent.startswith(self._root_path) or name in ("", ".", ".."):
                return os.path.realpath(file)
            real_parent = self._resolve(parent)
            self._resolved[parent] = real_parent
        if name in ("", ".", ".."):
            return os.path.realpath(file)
        # os.path.join, inlined (`name` holds no separator): twice per array of a restore
        candidate = real_parent + name if real_parent.endswith(os.sep) else real_parent + os.sep + name
        return os.path.realpath(candidate) if os.path.islink(candidate) else candidate

    def _held(self, key: str) -> bytes | None:
        """The bytes of file `key` (relative to the root) when the reader holds its files in memory."""
        return None if self._files is None else self._files.get(key)

    def _document(self, path: str) -> dict[str, Any]:
        file = self._inside(path, os.path.join(self._root_path, path, "zarr.json") if path
                            else os.path.join(self._root_path, "zarr.json"))
        if self._files is not None:
            data = self._held(f"{path}/zarr.json" if path else "zarr.json")
            if data is None:
                raise CorruptCheckpointError(f"'{path}' is missing from '{self.path}' (no {file})")
            document = load_json(data, f"'{file}'")
            if not isinstance(document, dict) or document.get("zarr_format") != 3:
                raise NotACheckpointError(f"'{file}' is not Zarr v3 metadata")
            return document
        try:  # never blocks on a FIFO; one descriptor, no file object (issue 39: one zarr.json per array)
            document = load_json(read_regular_file(file, "Zarr metadata"), f"'{file}'")
        except FileNotFoundError as err:
            raise CorruptCheckpointError(f"'{path}' is missing from '{self.path}' (no {file})") from err
        except PermissionError as err:
            raise permission_denied(file) from err
        except (CorruptCheckpointError, SpecialFileError):
            raise
        except (OSError, ValueError) as err:
            raise CorruptCheckpointError(f"cannot read '{file}' (truncated or damaged?): {err}") from err
        if not isinstance(document, dict) or document.get("zarr_format") != 3:
            raise NotACheckpointError(f"'{file}' is not Zarr v3 metadata")
        return document

    def root_attrs(self) -> dict[str, Any]:
        return dict(self._root.get("attributes") or {})

    def array_attrs(self, path: str) -> dict[str, Any]:
        return dict(self._document(path).get("attributes") or {})

    def check_groups(self, paths: list[str]) -> None:
        """Parses the zarr.json of every group above the arrays at `paths` (each once): plain zarr opens
        them on the way to an array, so a truncated intermediate group breaks the checkpoint for it.

        Raises:
          CorruptCheckpointError: a group's zarr.json is missing, not JSON, or not a Zarr v3 group (naming the file).
        """
        checked: set[str] = {""}
        for path in paths:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                group = "/".join(parts[:depth])
                if group in checked:
                    continue
                checked.add(group)
                try:
                    document = self._document(group)
                except NotACheckpointError as err:
                    raise CorruptCheckpointError(f"group '{group}' of '{self.path}' is damaged: {err}") from err
                if document.get("node_type") != "group":
                    raise CorruptCheckpointError(
                        f"'{self.path / group / 'zarr.json'}' says node_type {document.get('node_type')!r}, "
                        f"expected 'group' (arrays lie below it); restore from another checkpoint")

    def raw_extent(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                   document: dict[str, Any] | None = None) -> RawExtent | None:
        """The single raw chunk file holding the array at `path`, or None when it is stored otherwise.

        `document`: its zarr.json, when the caller has just read it (read once, not twice).
        """
        document = self._document(path) if document is None else document
        if document.get("node_type") != "array":
            raise CorruptCheckpointError(f"'{path}' in '{self.path}' is a group, expected an array")
        if tuple(document.get("shape", ())) != tuple(shape) or document.get("data_type") != _dtype_name(dtype):
            raise CorruptCheckpointError(
                f"array '{path}' of '{self.path}' has shape {document.get('shape')} and data type "
                f"{document.get('data_type')}, its index says {list(shape)} and {dtype.name}")
        codecs = document.get("codecs") or []
        grid = (document.get("chunk_grid") or {}).get("configuration", {}).get("chunk_shape")
        key = _chunk_key(document.get("chunk_key_encoding"), (0,) * len(shape))
        simple = (len(codecs) == 1 and isinstance(codecs[0], dict) and codecs[0].get("name") == "bytes"
                  and (codecs[0].get("configuration") or {}).get("endian", "little") == "little"
                  and grid == [max(1, n) for n in shape] and key is not None
                  and not document.get("storage_transformers"))
        if not simple:
            return None
        nbytes = math.prod(shape) * dtype.itemsize
        assert key is not None
        return RawExtent(Path(self._inside(path, os.path.join(self._root_path, path, *key.split("/")))), 0, nbytes)

    def raw_extents(self, requests: Sequence[tuple[str, np.dtype, tuple[int, ...]]]
                    ) -> dict[str, RawExtent | None]:
        """`raw_extent` of many arrays at once, their metadata read by several threads; best effort.

        Each array's zarr.json is read and checked, every directory and file on
        the way is checked for symlinks leading out, and the chunk file's inode
        is looked up (os.stat), as `raw_extent` does, with up to
        METADATA_THREADS arrays in flight: on a cold cache each of those is a
        small random read, so a serial walk of W1's 384 arrays waits on the disk
        about 1,500 times in a row (on a tmpfs or ramfs nothing waits: one thread,
        and no inode look-up ahead of the reads). The first
        PARALLEL_METADATA_ARRAYS arrays are read serially; when they took under
        CACHED_METADATA_S each (the page cache held them), so is the rest.
        Arrays whose metadata fails any check are left
        out of the result: the caller's own `raw_extent` call then raises the
        error for that array alone. A chunk file that is missing is not checked
        here (the read reports it).

        Args:
          requests: (array path, stored dtype, stored shape) triples.

        Returns:
          {array path: its RawExtent, or None when the array is stored otherwise}.
        """
        # on a tmpfs nothing waits: the threads, and the stat warming each inode, would cost only CPU
        in_memory = self._files is None and path_in_memory(self._real_root)

        def one(request: tuple[str, np.dtype, tuple[int, ...]]) -> tuple[str, RawExtent | None, bool]:
            path, dtype, shape = request
            try:
                extent = self.raw_extent(path, dtype, shape)
            except (OSError, CorruptCheckpointError, NotACheckpointError):
                return path, None, False
            if extent is not None and not in_memory:
                try:
                    os.stat(extent.file)  # warms its inode for the reader's size check
                except OSError:
                    pass  # missing here (or kept elsewhere: a staged remote copy); the read reports it
            return path, extent, True

        if len(requests) < PARALLEL_METADATA_ARRAYS or in_memory:
            results = [one(request) for request in requests]
        else:  # the first arrays serially: when nothing waited on the disk, the threads would only contend for the GIL
            head = PARALLEL_METADATA_ARRAYS
            started = time.perf_counter()
            results = [one(request) for request in requests[:head]]
            if time.perf_counter() - started < head * CACHED_METADATA_S:
                results += [one(request) for request in requests[head:]]
            else:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(METADATA_THREADS, thread_name_prefix="varstore-zarr-meta") as pool:
                    results += pool.map(one, requests[head:])
        return {path: extent for path, extent, ok in results if ok}

    def read_bytes(self, path: str) -> bytes:
        """The bytes of a 1-D uint8 single-chunk array (the manifest).

        An array stored any other way (compressed, several chunks) is read
        through zarr only after its declared size is checked against the
        bytes of its files (varstore._limits.check_manifest_size).

        Raises:
          CorruptCheckpointError: missing, unreadable, or declaring more than its stored bytes can back.
        """
        document = self._document(path)
        shape = tuple(document.get("shape", ()))
        if not all(type(n) is int and n >= 0 for n in shape):
            raise CorruptCheckpointError(f"array '{path}' of '{self.path}' has a bad shape {list(shape)}")
        extent = self.raw_extent(path, np.dtype("u1"), shape, document) if len(shape) == 1 else None
        if extent is None:
            stored = 0
            for directory, _, files in os.walk(self._inside(path, self.path / path)):
                for name in files:
                    if name != "zarr.json":
                        stored += os.lstat(os.path.join(directory, name)).st_size
            check_manifest_size(f"array '{path}' of '{self.path}'", math.prod(shape), stored)
            out = np.empty(shape, dtype=np.uint8)
            self.read_array(path, out)
            return out.tobytes()
        held = self._held(os.path.relpath(extent.file, self.path).replace(os.sep, "/"))
        try:
            if held is not None:
                data = held
            else:
                with os.fdopen(open_for_reading(extent.file, f"chunk of '{path}'"), "rb") as handle:
                    data = handle.read()
        except SpecialFileError:
            raise
        except PermissionError as err:
            raise permission_denied(extent.file) from err
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read '{extent.file}': {err}") from err
        if len(data) != extent.nbytes:
            raise CorruptCheckpointError(
                f"'{extent.file}' holds {len(data)} bytes, expected {extent.nbytes} (truncated?)")
        return data

    def read_array(self, path: str, out: npt.NDArray[Any],
                   index: tuple[slice, ...] | None = None) -> None:
        """Fills `out` with the array at `path` (stored dtype and shape), or with its region `index`."""
        try:
            import zarr
        except ImportError as err:  # pragma: no cover - zarr is a core dependency
            raise MissingDependencyError("Zarr v3 checkpoints need zarr: pip install zarr") from err
        document = self._document(path)  # refuses an array (or its zarr.json) outside the store
        for directory, subdirectories, files in os.walk(self.path / path):  # zarr opens any chunk file
            for name in subdirectories + files:
                self._inside(path, Path(directory) / name)
                check_regular_file(Path(directory) / name, f"chunk of '{path}'")  # never a FIFO
        self._check_before_zarr(path, document, out)
        try:
            array = zarr.open_array(str(self.path / path), mode="r")
            out[...] = array[...] if index is None else array[index]
        except Exception as err:  # noqa: BLE001 - zarr raises many unrelated types
            raise CorruptCheckpointError(
                f"cannot read array '{path}' of '{self.path}' through zarr: {err}") from err

    def _check_before_zarr(self, path: str, document: dict[str, Any], out: npt.NDArray[Any]) -> None:
        """What zarr must not meet (issue 36): codecs off the allow-list, a grid far larger than its chunk
        files, more bytes than its files store x the expansion factor, a chunk inflating past its size.

        Raises:
          UnsafeCheckpointError / ValueTooLargeError / CorruptCheckpointError: naming the array and the store.
        """
        from varstore._limits import check_expansion, check_grid
        from varstore.backends.codecs import check_v3_codecs
        from varstore.backends.zarr3.chunk_check import check_v3_chunks, chunk_files

        where = str(self.path)
        check_v3_codecs(document.get("codecs") or [], where, path)
        files = chunk_files(self.path / path)
        shape = [int(n) for n in document.get("shape") or []]
        chunk_shape = (document.get("chunk_grid") or {}).get("configuration", {}).get("chunk_shape") or shape
        grid = math.prod(-(-n // max(int(c), 1)) for n, c in zip(shape, chunk_shape))
        check_grid(path, where, grid, len(files))
        check_expansion(path, where, out.nbytes, sum(os.lstat(f).st_size for f in files))
        check_v3_chunks(self.path / path, document, out.dtype.itemsize, path)

    def stored_nbytes(self, path: str) -> int | None:
        """Bytes of the chunk files of the uncompressed array at `path` (what its manifest entry must not
        exceed: a missing chunk is a damaged checkpoint, never a fill); None when stored compressed."""
        from varstore.backends.zarr3.chunk_check import chunk_files

        if self._files is not None:
            return None  # a staged copy of an object-store checkpoint: its chunks are not all here
        codecs = self._document(path).get("codecs") or []
        if any((c.get("name") if isinstance(c, dict) else c) not in ("bytes", "transpose") for c in codecs):
            return None
        return sum(os.lstat(f).st_size for f in chunk_files(self._inside(path, self.path / path)))

    def close(self) -> None:
        """Nothing to release: files are opened per read."""

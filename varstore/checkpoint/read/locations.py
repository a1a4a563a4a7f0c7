"""Where an open checkpoint's variable bytes are, and whether its storage really holds them.

A variable's bytes are at the file offset the manifest records (a
single-file checkpoint opened through its index header, whose offsets are
trusted), at the extent the backend reports (the HDF5 dataset's offset, the
Zarr chunk file), in the packed blob, or only readable through the backend
(stored some other way). Claims are compared with real sizes before
anything is allocated. Reads through the Storage protocol; knows nothing
about checksums, sessions or targets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from varstore.backends import Backend, BackendReader, RawExtent
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import MANIFEST_PATH, ManifestColumns, Record, storage_layout
from varstore.errors import CorruptCheckpointError
from varstore.storage import Storage

__all__ = ["VariableBytes"]


class VariableBytes:
    """The byte locations of one open checkpoint's variables (see the module docstring).

    Args:
      path: the checkpoint, for messages.
      key: the checkpoint's key in `storage` (its single file, or its directory).
      backend: the container's backend.
      backend_reader: returns the backend reader (opened on first need).
      storage: where the bytes are read from.
      direct: True when the manifest's file offsets are trusted (index header matched).
      packed: the manifest's "packed" header ({"path", "nbytes", "file_offset"?}).
    """

    def __init__(self, path: Path, key: str, backend: Backend, backend_reader: Callable[[], BackendReader],
                 storage: Storage, direct: bool, packed: dict[str, Any]) -> None:
        self._path = path
        self._key = key
        self._backend = backend
        self._store = backend_reader
        self._storage = storage
        self._direct = direct
        self._packed = packed
        self._extents: dict[str, RawExtent | None] = {}
        self._sizes: dict[str, int] = {}

    def direct_extents(self, manifest: ManifestColumns, names: list[str]) -> tuple[str, list[tuple[int, int]]] | None:
        """(storage key, [(offset, nbytes)...]) of the named own-array variables with trusted file offsets."""
        file_offsets = manifest.columns.get("file_offset")
        if not self._direct or file_offsets is None:
            return None
        index, columns = manifest.index, manifest.columns
        offsets, sizes = columns["offset"], columns["nbytes"]
        extents = []
        for name in names:
            i = index.get(name)
            if i is not None and offsets[i] is None and file_offsets[i] is not None and sizes[i]:
                extents.append((file_offsets[i], sizes[i]))
        return self._key, extents

    def locate(self, manifest: ManifestColumns, names: list[str]) -> None:
        """Finds the extents of the named own-array variables at once, where the backend can (Zarr:
        `raw_extents` reads every array's metadata with several threads); a cache warm-up only.

        Variables whose metadata fails a check are left to `record_extent`,
        which raises the error naming that variable.
        """
        many = getattr(self._store(), "raw_extents", None) if self._backend.is_directory else None
        if many is None:
            return
        index, paths = manifest.index, manifest.columns["path"]
        requests = []
        for name in names:
            i = index.get(name)
            if i is None or paths[i] is None or paths[i] in self._extents:
                continue
            record = manifest.record(i)
            if not record.nbytes:
                continue
            storage_dtype, storage_shape = storage_layout(
                record.numpy_dtype, record.shape, self._backend.native_bytes_strings)
            requests.append((str(paths[i]), storage_dtype, storage_shape))
        if len(requests) > 1:
            self._extents.update(many(requests))

    def hint_files(self, manifest: ManifestColumns, names: list[str]) -> list[tuple[str, int]]:
        """(file, bytes) to read ahead for the named own-array variables of a Zarr directory, in order.

        A variable whose extent is known gives its chunk file; any other gives
        its zarr.json (0: the whole small file) and the chunk file where
        varstore writes it (`chunk_file`), so the read-ahead warms the
        metadata the reader checks before its read. A hint only: nothing is
        checked here (the reads check metadata, sizes and checksums).
        """
        if not self._backend.is_directory or self._backend.name != "zarr":
            return []
        from varstore.backends.zarr3.store import chunk_file

        index, columns = manifest.index, manifest.columns
        paths, sizes = columns["path"], columns["nbytes"]
        if paths.count(None) == len(paths):  # every variable packed (W2): no file of its own to hint
            return []
        root = self._path
        files = []
        for name in names:
            i = index.get(name)
            if i is None or paths[i] is None or not sizes[i]:
                continue
            path = str(paths[i])
            if path in self._extents:
                extent = self._extents[path]
                if extent is not None:  # else read through the backend
                    files.append((str(extent.file), extent.offset + extent.nbytes))
                continue
            record = manifest.record(i)
            _, storage_shape = storage_layout(record.numpy_dtype, record.shape, self._backend.native_bytes_strings)
            directory = root / path
            files += [(str(directory / "zarr.json"), 0),
                      (str(chunk_file(directory, len(storage_shape))), int(sizes[i]))]
        return files

    def check_groups(self, manifest: ManifestColumns) -> None:
        """Checks the metadata of every group above the checkpoint's arrays (a Zarr directory: each
        group's zarr.json parses; plain zarr opens them on the way), as `verify` does first.

        Raises:
          CorruptCheckpointError: naming the damaged file.
        """
        paths = [path for path in manifest.columns["path"] if path is not None]
        if self._packed.get("path"):
            paths.append(str(self._packed["path"]))
        self._store().check_groups(paths + [MANIFEST_PATH])

    def packed_nbytes(self) -> int:
        """Bytes of the packed blob (0 when there is none)."""
        return int(self._packed.get("nbytes") or 0)

    def packed_extent(self) -> RawExtent | None:
        """Where the packed blob's bytes are, or None when only the backend can read it."""
        nbytes = self.packed_nbytes()
        file_offset = self._packed.get("file_offset")
        if self._direct and type(file_offset) is int and file_offset >= 0:
            return RawExtent(self._path, file_offset, nbytes)
        return self.extent_of(self._packed["path"], np.dtype("u1"), (nbytes,))

    def packed_blob(self, limit: int) -> bytearray | None:
        """The whole packed blob, or None when there is none or it has more than `limit` bytes.

        Raises:
          CorruptCheckpointError: the file holds fewer bytes than the blob claims.
        """
        nbytes = self.packed_nbytes()
        if not nbytes or nbytes > limit:
            return None
        extent = self.packed_extent()
        if extent is not None and self.file_size(extent.file) < extent.offset + nbytes:
            raise CorruptCheckpointError(
                f"the packed blob of '{self._path}' claims {nbytes} bytes at byte {extent.offset} of "
                f"'{extent.file}', which has only {self.file_size(extent.file)} bytes (truncated?)")
        blob = bytearray(nbytes)
        if extent is None:
            self._store().read_array(self._packed["path"], np.frombuffer(blob, dtype=np.uint8))
        else:
            self.read_extent(extent, 0, blob, f"'{self._path}' (packed variables)")
        return blob

    def read_extent(self, extent: RawExtent, skip: int, out: Any, where: str, check_size: bool = False,
                    checksum: bool = False) -> int | None:
        """Fills `out` (an array or bytearray) from `extent`, starting `skip` bytes into it. With `checksum`,
        returns the crc32c of the bytes read when the storage took it on the way, piece by piece while in
        cache (LocalStorage.read_range_digest: bytes in memory); None otherwise (the caller checksums `out`).

        Raises:
          CorruptCheckpointError: the file is missing or too short (with `check_size`, before reading).
        """
        if check_size:
            size = self.file_size(extent.file)
            if size < extent.offset + extent.nbytes:
                raise CorruptCheckpointError(
                    f"'{extent.file}' of checkpoint '{self._path}' is truncated: it has {size} bytes, "
                    f"needs at least {extent.offset + extent.nbytes}")
        nbytes = out.nbytes if isinstance(out, np.ndarray) else len(out)
        digest = getattr(self._storage, "read_range_digest", None) if checksum else None
        try:
            if digest is not None:
                found = digest(str(extent.file), extent.offset + skip, nbytes, out, crc32c_raw)
                return None if found is None else int(found)
            self._storage.read_range(str(extent.file), extent.offset + skip, nbytes, out)
            return None
        except FileNotFoundError as err:
            raise CorruptCheckpointError(
                f"'{extent.file}' of checkpoint '{self._path}' is missing (truncated checkpoint?)") from err
        except CorruptCheckpointError as err:
            raise CorruptCheckpointError(f"{where}: {err}") from err

    def extent_of(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                  name: str | None = None) -> RawExtent | None:
        """The backend's extent of the array at `path` (cached), or None when it is stored otherwise."""
        if path not in self._extents:
            try:
                self._extents[path] = self._store().raw_extent(path, dtype, shape)
            except CorruptCheckpointError as err:
                if name is None:
                    raise
                raise CorruptCheckpointError(f"cannot read variable '{name}' in '{self._path}': {err}") from err
        return self._extents[path]

    def record_extent(self, record: Record) -> RawExtent | None:
        """Where an own-array variable's bytes are, or None when only the backend can read them."""
        if self._direct and record.file_offset is not None:
            return RawExtent(self._path, record.file_offset, record.nbytes)
        assert record.path is not None
        if record.path in self._extents:  # located already (locate, the Zarr metadata of a bulk read)
            return self._extents[record.path]
        storage_dtype, storage_shape = storage_layout(
            record.numpy_dtype, record.shape, self._backend.native_bytes_strings)
        return self.extent_of(record.path, storage_dtype, storage_shape, record.name)

    def file_size(self, file: Path) -> int:
        """Bytes in `file` (cached: an HDF5 checkpoint is one file; a Zarr chunk is asked once)."""
        key = str(file)
        size = self._sizes.get(key)
        if size is None:
            try:
                size = self._sizes[key] = self._storage.size(key)
            except FileNotFoundError as err:
                raise CorruptCheckpointError(
                    f"'{file}' of checkpoint '{self._path}' is missing (truncated checkpoint?)") from err
        return size

    def check_stored(self, record: Record) -> None:
        """Refuses a variable whose manifest claims more bytes than its storage holds, before allocating.

        Compares the claim with the real stored size: the file's (or Zarr
        chunk file's) size past the value's offset, the packed blob's length,
        or the backend's storage size when it is read through the backend. A
        manifest claiming 10**15 bytes is refused here instead of failing in
        numpy's allocator. Arrays stored compressed (never written by varstore)
        have no such bound and are left to their library.

        Raises:
          CorruptCheckpointError: naming the variable, the file and both sizes.
        """
        if not record.nbytes:
            return
        where = f"variable '{record.name}' in '{self._path}'"
        if record.path is None:
            start, total = int(record.offset or 0), self.packed_nbytes()
            if start + record.nbytes > total:
                raise CorruptCheckpointError(
                    f"{where} lies outside the packed blob: it claims bytes {start}..{start + record.nbytes}, "
                    f"the blob has {total}")
            try:
                extent, path, claimed = self.packed_extent(), self._packed["path"], total
            except CorruptCheckpointError as err:
                raise CorruptCheckpointError(f"cannot read {where}: {err}") from err
        else:
            path, claimed = record.path, record.nbytes
            extent = self.record_extent(record)
        if extent is not None:
            try:
                size = self.file_size(extent.file)
            except CorruptCheckpointError as err:
                raise CorruptCheckpointError(
                    f"{where} claims {claimed} bytes in '{extent.file}', which is missing (truncated "
                    f"checkpoint or damaged manifest)") from err
            if size < extent.offset + extent.nbytes:
                raise CorruptCheckpointError(
                    f"{where} claims {claimed} bytes at byte {extent.offset} of '{extent.file}', which has "
                    f"only {size} bytes (truncated or damaged manifest)")
            return
        stored = getattr(self._store(), "stored_nbytes", lambda _: None)(path)
        if stored is not None and stored < claimed:
            raise CorruptCheckpointError(
                f"{where} claims {claimed} bytes, but its storage '{path}' in '{self._path}' holds {stored} "
                f"(truncated or damaged manifest)")

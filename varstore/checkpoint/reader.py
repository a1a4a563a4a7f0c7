"""Reading varstore's own checkpoints: open_varstore, the lazy reader, and per-variable value sources.

Opening reads the root attributes and the JSON manifest only. Reading a
variable reads only its bytes, with one preadv straight into the caller's
buffer at the offset the backend reports (the HDF5 dataset's offset or the
Zarr chunk file), then checks its crc32c on that buffer; arrays stored some
other way are read through h5py/zarr. `CheckpointValue` implements the
core's ValueSource protocol, so deferred and lazy restores read from here.
Never runs initializers, never writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.backends import RawExtent, get_backend
from varstore.checkpoint.checksum import crc32c_of, pread_into
from varstore.checkpoint.info import CheckpointReader, VariableInfo, checked_out
from varstore.checkpoint.manifest import (
    FORMAT_NAMES,
    MANIFEST_PATH,
    Record,
    decode_manifest,
    format_checksum,
    storage_layout,
)
from varstore.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ChecksumError,
    CorruptCheckpointError,
    NotACheckpointError,
    UnknownVariableError,
    VarstoreError,
)

__all__ = ["VarstoreReader", "CheckpointValue", "open_varstore", "is_varstore_checkpoint"]

#: The packed blob is read whole for bulk restores when at most this many bytes.
_PACKED_CACHE_BYTES = 256 << 20


def _detect(path: Path) -> str:
    if not path.exists():
        raise CheckpointNotFoundError(f"no checkpoint at '{path}'")
    if path.is_dir():
        if get_backend("zarr").sniff(path):
            return "zarr"
        raise NotACheckpointError(f"'{path}' is a directory without a Zarr v3 zarr.json")
    if get_backend("h5").sniff(path):
        return "h5"
    raise NotACheckpointError(f"'{path}' is neither an HDF5 file nor a Zarr v3 directory")


def is_varstore_checkpoint(path: os.PathLike[str] | str) -> bool:
    """True when `path` is a varstore HDF5 file or Zarr v3 directory (checks magic and root attributes)."""
    path = Path(path)
    try:
        fmt = _detect(path)
        backend_reader = get_backend(fmt).open_reader(path)
        try:
            return backend_reader.root_attrs().get("varstore_format") == FORMAT_NAMES[fmt]
        finally:
            backend_reader.close()
    except (VarstoreError, OSError):
        return False


class CheckpointValue:
    """One variable of an open checkpoint as a ValueSource (see varstore.variables).

    Attributes:
      origin: "'<name>' in '<file>'" for error messages.
      shape: stored shape.
      dtype: stored logical dtype.
    """

    def __init__(self, reader: VarstoreReader, record: Record, verify: bool) -> None:
        self._reader = reader
        self._record = record
        self._verify = verify
        self.name = record.name
        self.origin = f"'{record.name}' in '{reader.path}'"
        self.shape = record.shape
        self.dtype = record.numpy_dtype

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (the variable's shape; its dtype, cast from the stored one when they differ)."""
        if out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable:
            self._reader._fill(self._record, out, self._verify)
            return
        value = np.empty(self.shape, dtype=self.dtype)
        self._reader._fill(self._record, value, self._verify)
        np.copyto(out, value, casting="unsafe")

    def __repr__(self) -> str:
        return f"<CheckpointValue {self.origin} {self.shape} {self.dtype}>"


class VarstoreReader(CheckpointReader):
    """A read-only, lazy view of one varstore checkpoint (format "varstore-hdf5" or "varstore-zarr")."""

    def __init__(self, path: Path, fmt: str) -> None:
        super().__init__(path)
        self.format = FORMAT_NAMES[fmt]
        self._fmt = fmt
        self._backend = get_backend(fmt)
        self._store = self._backend.open_reader(path)
        self._fds: dict[Path, int] = {}
        self._extents: dict[str, RawExtent | None] = {}
        self._packed_cache: bytearray | None = None
        self._closed = False
        try:
            root = self._store.root_attrs()
            if root.get("varstore_format") != self.format:
                kind = "Zarr v3 directory" if fmt == "zarr" else "HDF5 file"
                raise NotACheckpointError(
                    f"'{path}' is a {kind} but not a varstore checkpoint (no varstore_format "
                    f"attribute); open it with varstore.convert.open_checkpoint")
            header, records = decode_manifest(self._store.read_bytes(MANIFEST_PATH), str(path))
        except BaseException:
            self.close()
            raise
        self.step = header.get("step")
        self.metadata = dict(header.get("metadata") or {})
        self.format_version = header.get("format_version")
        self.library_version = header.get("library_version")
        self.created_utc = header.get("created_utc")
        self._packed = header.get("packed") or {}
        self._records = records
        self._by_name = {record.name: record for record in records}
        self._names = [record.name for record in records]

    # -- CheckpointReader
    def keys(self) -> list[str]:
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._names)

    def record(self, name: str) -> Record:
        """The manifest record of `name`.

        Raises:
          UnknownVariableError: naming the variable and the file.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownVariableError(f"no variable '{name}' in '{self.path}'") from None

    def info(self, name: str) -> VariableInfo:
        record = self.record(name)
        attributes: dict[str, Any] = {"storage": "packed" if record.path is None else record.path}
        return VariableInfo(record.name, record.shape, record.dtype, record.nbytes, record.trainable,
                            record.collections, format_checksum(record.checksum), record.device,
                            attributes)

    def read(self, name: str, out: npt.NDArray[Any] | None = None, *,
             verify: bool = True) -> npt.NDArray[Any]:
        record = self.record(name)
        out = checked_out(name, record.shape, record.numpy_dtype, out)
        self._fill(record, out, verify)
        return out

    def source(self, name: str, *, verify: bool = True) -> CheckpointValue:
        """The ValueSource of one variable (reads happen when the core asks)."""
        return CheckpointValue(self, self.record(name), verify)

    def verify(self) -> None:
        """Reads every variable and checks its crc32c; raises ChecksumError naming the first bad one."""
        self.prefetch_packed()
        try:
            for record in self._records:
                self._fill(record, np.empty(record.shape, dtype=record.numpy_dtype), True)
        finally:
            self._packed_cache = None

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._packed_cache = None
        if not self._closed:
            self._closed = True
            self._store.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- bytes
    def prefetch_packed(self) -> None:
        """Reads the packed blob of small variables in one go (bulk restores and verify)."""
        nbytes = int(self._packed.get("nbytes") or 0)
        if not nbytes or nbytes > _PACKED_CACHE_BYTES or self._packed_cache is not None:
            return
        extent = self._extent_of(self._packed["path"], np.dtype("u1"), (nbytes,))
        cache = bytearray(nbytes)
        if extent is None:
            array = np.frombuffer(cache, dtype=np.uint8)
            self._store.read_array(self._packed["path"], array)
        else:
            pread_into(self._fd(extent.file, extent), cache, extent.offset,
                       f"'{self.path}' (packed variables)")
        self._packed_cache = cache

    def release_packed(self) -> None:
        """Drops the blob read by prefetch_packed."""
        self._packed_cache = None

    def _fd(self, file: Path, extent: RawExtent) -> int:
        fd = self._fds.get(file)
        if fd is None:
            if self._closed:
                raise CheckpointError(f"checkpoint '{self.path}' is closed")
            try:
                fd = os.open(file, os.O_RDONLY)
            except FileNotFoundError as err:
                raise CorruptCheckpointError(
                    f"'{file}' of checkpoint '{self.path}' is missing (truncated checkpoint?)") from err
            size = os.fstat(fd).st_size
            if size < extent.offset + extent.nbytes:
                os.close(fd)
                raise CorruptCheckpointError(
                    f"'{file}' of checkpoint '{self.path}' is truncated: it has {size} bytes, "
                    f"needs at least {extent.offset + extent.nbytes}")
            if self._fmt == "h5":
                self._fds[file] = fd
        return fd

    def _release(self, file: Path, fd: int) -> None:
        if self._fds.get(file) != fd:
            os.close(fd)

    def _extent_of(self, path: str, dtype: np.dtype, shape: tuple[int, ...]) -> RawExtent | None:
        if path not in self._extents:
            self._extents[path] = self._store.raw_extent(path, dtype, shape)
        return self._extents[path]

    def _fill(self, record: Record, out: npt.NDArray[Any], verify: bool) -> None:
        """Fills `out` (C-contiguous, the record's logical dtype and shape) and checks the checksum."""
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed; cannot read '{record.name}'")
        where = f"variable '{record.name}' in '{self.path}'"
        if record.nbytes:
            if record.path is None:
                self._fill_packed(record, out, where)
            else:
                storage_dtype, storage_shape = storage_layout(
                    record.numpy_dtype, record.shape, self._fmt == "h5")
                extent = self._extent_of(record.path, storage_dtype, storage_shape)
                if extent is None:
                    self._store.read_array(
                        record.path, out.reshape(-1).view(storage_dtype).reshape(storage_shape))
                else:
                    fd = self._fd(extent.file, extent)
                    try:
                        pread_into(fd, out, extent.offset, where)
                    finally:
                        self._release(extent.file, fd)
        if verify and record.checksum is not None:
            found = crc32c_of(out) if record.nbytes else 0
            if found != record.checksum:
                raise ChecksumError(
                    f"{where} is corrupt: its bytes have crc32c {found:08x}, the checkpoint "
                    f"recorded {record.checksum:08x}; restore from another checkpoint")

    def _fill_packed(self, record: Record, out: npt.NDArray[Any], where: str) -> None:
        start = int(record.offset or 0)
        if self._packed_cache is not None:
            if start + record.nbytes > len(self._packed_cache):
                raise CorruptCheckpointError(f"{where} lies outside the packed blob")
            out.reshape(-1).view(np.uint8)[...] = np.frombuffer(
                self._packed_cache, dtype=np.uint8, count=record.nbytes, offset=start)
            return
        total = int(self._packed.get("nbytes") or 0)
        if start + record.nbytes > total:
            raise CorruptCheckpointError(f"{where} lies outside the packed blob")
        extent = self._extent_of(self._packed["path"], np.dtype("u1"), (total,))
        if extent is None:
            blob = np.empty((total,), dtype=np.uint8)
            self._store.read_array(self._packed["path"], blob)
            out.reshape(-1).view(np.uint8)[...] = blob[start:start + record.nbytes]
            return
        fd = self._fd(extent.file, extent)
        try:
            pread_into(fd, out, extent.offset + start, where)
        finally:
            self._release(extent.file, fd)


def open_varstore(path: os.PathLike[str] | str, format: str | None = None) -> VarstoreReader:
    """Opens a varstore HDF5 file or Zarr v3 directory read-only; reads metadata only.

    Args:
      path: the checkpoint.
      format: "h5" or "zarr"; None detects it from the contents.

    Raises:
      CheckpointNotFoundError: nothing at `path`.
      NotACheckpointError: not HDF5/Zarr, or not written by varstore.
      CorruptCheckpointError: truncated or damaged metadata.
    """
    path = Path(path)
    fmt = _detect(path) if format is None else get_backend(format).name
    try:
        return VarstoreReader(path, fmt)
    except VarstoreError:
        raise
    except OSError as err:
        raise CorruptCheckpointError(f"cannot read checkpoint '{path}': {err}") from err

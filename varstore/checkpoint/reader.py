"""Reading varstore's own checkpoints: open_varstore, the lazy reader, and per-variable value sources.

Opening reads the root attributes and the JSON manifest only; an HDF5 file
that has varstore's index header is opened without the HDF5 library (its
user block says where the manifest is, and the manifest where each value
is), so opening and reading one variable costs three small reads. Reading a
variable reads only its bytes, with one preadv straight into the caller's
buffer at the recorded offset (or the one the backend reports: the HDF5
dataset's offset or the Zarr chunk file), then checks its crc32c on that
buffer; arrays stored some other way are read through h5py/zarr. Bulk
restores check checksums in a helper thread while the next value is read. `CheckpointValue` implements the
core's ValueSource protocol, so deferred and lazy restores read from here.
Never runs initializers, never writes.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.backends import RawExtent, get_backend
from concurrent.futures import Future, ThreadPoolExecutor

from varstore.checkpoint.checksum import crc32c_of, crc32c_raw, pread_into
from varstore.checkpoint.info import CheckpointReader, VariableInfo, checked_out
from varstore.checkpoint.manifest import (
    c_strides,
    FORMAT_NAMES,
    INDEX_HEADER_BYTES,
    MANIFEST_PATH,
    ManifestColumns,
    Record,
    decode_index_header,
    decode_manifest_columns,
    format_checksum,
    logical_dtype,
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
#: Bulk restores announce values to the kernel (POSIX_FADV_WILLNEED) this many bytes ahead.
_READ_AHEAD_BYTES = 64 << 20
#: In bulk restores, values of at least this many bytes are checksummed in a helper thread.
_THREADED_CHECK_BYTES = 1 << 20


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


def _has_index_header(path: Path) -> bool:
    """True when an HDF5 file starts with a varstore index header whose manifest checksum matches."""
    try:
        with open(path, "rb") as handle:
            where = decode_index_header(handle.read(INDEX_HEADER_BYTES))
            if where is None:
                return False
            handle.seek(where[0])
            data = handle.read(where[1])
    except OSError:
        return False
    return len(data) == where[1] and crc32c_raw(data) == where[2]


def is_varstore_checkpoint(path: os.PathLike[str] | str) -> bool:
    """True when `path` is a varstore HDF5 file or Zarr v3 directory.

    Checks the magic bytes, then the HDF5 index header or the root attribute
    varstore_format; a file whose attribute is damaged but which holds
    `_varstore/manifest` counts too (open_varstore then raises CorruptCheckpointError).
    """
    path = Path(path)
    try:
        fmt = _detect(path)
        if fmt == "h5" and _has_index_header(path):
            return True
        backend_reader = get_backend(fmt).open_reader(path)
        try:
            if backend_reader.root_attrs().get("varstore_format") == FORMAT_NAMES[fmt]:
                return True
            try:  # a damaged varstore_format: still varstore (open_varstore says it is corrupt)
                backend_reader.array_attrs(MANIFEST_PATH)
            except VarstoreError:
                return False
            return True
        finally:
            backend_reader.close()
    except (VarstoreError, OSError):
        return False


class _ReadAhead:
    """A thread announcing planned extents to the kernel (POSIX_FADV_WILLNEED), at most `window` bytes ahead.

    `done(offset)` is called after each read of a planned extent; `stop()`
    ends the thread and waits for it (before the descriptor is closed).
    """

    def __init__(self, fd: int, extents: list[tuple[int, int]], window: int) -> None:
        self._pending = dict(extents)  # file offset -> nbytes, planned and not yet read
        self._consumed = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(fd, extents, window),
                                        name="varstore-readahead", daemon=True)
        self._thread.start()

    def _run(self, fd: int, extents: list[tuple[int, int]], window: int) -> None:
        issued = 0
        for offset, nbytes in extents:
            with self._cond:
                while not self._stopped and issued - self._consumed >= window:
                    self._cond.wait()
                if self._stopped:
                    return
            try:
                os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_WILLNEED)
            except (OSError, AttributeError):
                return
            issued += nbytes

    def done(self, offset: int) -> None:
        nbytes = self._pending.pop(offset, None)
        if nbytes is not None:
            with self._cond:
                self._consumed += nbytes
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


class CheckpointValue:
    """One variable of an open checkpoint as a ValueSource (see varstore.variables).

    Attributes:
      origin: "'<name>' in '<file>'" for error messages.
      shape: stored shape.
      dtype: stored logical dtype.
    """

    __slots__ = ("_reader", "_record", "_verify", "name", "shape", "dtype")

    def __init__(self, reader: VarstoreReader, record: Record, verify: bool) -> None:
        self._reader = reader
        self._record = record
        self._verify = verify
        self.name = record.name
        self.shape = record.shape
        self.dtype = record.numpy_dtype

    @property
    def origin(self) -> str:
        """"'<name>' in '<file>'", for error messages."""
        return f"'{self._record.name}' in '{self._reader.path}'"

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (the variable's shape; its dtype, cast from the stored one when they differ)."""
        if out.dtype == self.dtype and out.flags.c_contiguous and out.flags.writeable:
            self._reader._fill(self._record, out, self._verify)
            return
        self._reader._check_stored(self._record)
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
        self._backend_reader: Any = None
        self._fds: dict[Path, int] = {}
        self._extents: dict[str, RawExtent | None] = {}
        self._sizes: dict[Path, int] = {}
        self._packed_cache: bytearray | None = None
        self._packed_checked = False
        self._read_ahead: _ReadAhead | None = None
        self._checks: list[tuple[Record, Future[int]]] | None = None
        self._check_pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._direct = False  # offsets in the manifest are trusted (the HDF5 index header matched)
        try:
            data = self._manifest_from_index_header() if fmt == "h5" else None
            if data is None:
                root = self._store.root_attrs()
                if root.get("varstore_format") != self.format:
                    self._refuse_format(root.get("varstore_format"))
                data = self._store.read_bytes(MANIFEST_PATH)
                self._check_manifest(data, root.get("varstore_manifest_crc32c"))
            header, columns = decode_manifest_columns(data, str(path))
            if self._direct and header.get("format") != self.format:
                raise NotACheckpointError(f"'{path}' has an index header but is not a varstore HDF5 file")
        except BaseException:
            self.close()
            raise
        self.step = header.get("step")
        self.metadata = dict(header.get("metadata") or {})
        self.format_version = header.get("format_version")
        self.library_version = header.get("library_version")
        self.created_utc = header.get("created_utc")
        self._packed = header.get("packed") or {}
        #: "per-variable" or "packed" (root attribute varstore_layout; older files: from the packed blob).
        self.layout = header.get("layout") or ("packed" if self._packed.get("nbytes") else "per-variable")
        self._columns: ManifestColumns = columns
        self._records: dict[int, Record] = {}
        self._names = columns.names

    @property
    def _store(self) -> Any:
        """The backend reader (h5py/zarr), opened on first need."""
        if self._backend_reader is None:
            if self._closed:
                raise CheckpointError(f"checkpoint '{self.path}' is closed")
            self._backend_reader = self._backend.open_reader(self.path)
        return self._backend_reader

    def _refuse_format(self, found: Any) -> None:
        """Raises for a root without the right varstore_format: corrupt when a manifest is there anyway.

        Raises:
          CorruptCheckpointError: `_varstore/manifest` exists, so the attribute was damaged.
          NotACheckpointError: no manifest either (a plain HDF5 file / Zarr group).
        """
        kind = "Zarr v3 directory" if self._fmt == "zarr" else "HDF5 file"
        try:
            self._store.array_attrs(MANIFEST_PATH)
        except VarstoreError:
            raise NotACheckpointError(
                f"'{self.path}' is a {kind} but not a varstore checkpoint (no varstore_format "
                f"attribute); open it with varstore.convert.open_checkpoint") from None
        raise CorruptCheckpointError(
            f"'{self.path}' holds a varstore manifest ({MANIFEST_PATH}) but its root attribute "
            f"varstore_format is {found!r}, not {self.format!r}: its root metadata is damaged; "
            f"restore from another checkpoint")

    def _check_manifest(self, data: bytes, recorded: Any) -> None:
        """Checks manifest bytes read through h5py/zarr against every crc32c the file records for them.

        Those are the root attribute varstore_manifest_crc32c and, in HDF5, the
        index header's manifest_crc32c (when the header is there but the fast
        path did not match, e.g. a rewritten file). Files from older writers have neither.

        Raises:
          CorruptCheckpointError: naming the file and both checksums.
        """
        expected = [recorded] if recorded is not None else []
        if self._fmt == "h5":
            try:
                with open(self.path, "rb") as handle:
                    where = decode_index_header(handle.read(INDEX_HEADER_BYTES))
            except OSError:
                where = None
            if where is not None:
                expected.append(where[2])
        if not expected:
            return
        found = crc32c_raw(data)
        for value in expected:
            if type(value) is not int or value != found:
                recorded_text = f"{value:08x}" if type(value) is int else repr(value)
                raise CorruptCheckpointError(
                    f"the manifest of '{self.path}' is damaged: its bytes have crc32c {found:08x}, the "
                    f"checkpoint recorded {recorded_text}; restore from another checkpoint")

    def _manifest_from_index_header(self) -> bytes | None:
        """The manifest's bytes via the HDF5 user block, or None (then the HDF5 library is used)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            where = decode_index_header(os.pread(fd, INDEX_HEADER_BYTES, 0))
            if where is None:
                return None
            offset, nbytes, checksum = where
            if offset + nbytes > os.fstat(fd).st_size:
                return None
            data = os.pread(fd, nbytes, offset)
            if len(data) != nbytes or crc32c_raw(data) != checksum:
                return None
        except OSError:
            os.close(fd)
            return None
        self._fds[self.path] = fd
        self._direct = True
        return data

    # -- CheckpointReader
    def keys(self) -> list[str]:
        return list(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._columns.index

    def __len__(self) -> int:
        return len(self._names)

    def record(self, name: str) -> Record:
        """The manifest record of `name`.

        Raises:
          UnknownVariableError: naming the variable and the file.
        """
        index = self._columns.index.get(name)  # type: ignore[arg-type]
        if index is None:
            raise UnknownVariableError(f"no variable '{name}' in '{self.path}'")
        record = self._records.get(index)
        if record is None:
            record = self._records[index] = self._columns.record(index)
        return record

    def info(self, name: str) -> VariableInfo:
        record = self.record(name)
        attributes: dict[str, Any] = {"storage": "packed" if record.path is None else record.path}
        return VariableInfo(record.name, record.shape, record.dtype, record.nbytes, record.trainable,
                            record.collections, format_checksum(record.checksum), record.device,
                            attributes)

    def read(self, name: str, out: npt.NDArray[Any] | None = None, *,
             verify: bool = True) -> npt.NDArray[Any]:
        record = self.record(name)
        if out is None:
            self._check_stored(record)  # before allocating what the manifest claims
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
            for name in self._names:
                record = self.record(name)
                self._check_stored(record)
                self._fill(record, np.empty(record.shape, dtype=record.numpy_dtype), True)
        finally:
            self.release_packed()

    def close(self) -> None:
        if getattr(self, "_read_ahead", None) is not None:
            self._stop_read_ahead()  # before its descriptor is closed
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._packed_cache = None
        if self._check_pool is not None:
            self._check_pool.shutdown(wait=True)
            self._check_pool = None
        if not self._closed:
            self._closed = True
            if self._backend_reader is not None:
                self._backend_reader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- bytes
    def _packed_extent(self) -> RawExtent | None:
        nbytes = int(self._packed.get("nbytes") or 0)
        file_offset = self._packed.get("file_offset")
        if self._direct and type(file_offset) is int and file_offset >= 0:
            return RawExtent(self.path, file_offset, nbytes)
        return self._extent_of(self._packed["path"], np.dtype("u1"), (nbytes,))

    def prefetch_packed(self) -> bool:
        """Reads the packed blob of small variables in one go (bulk restores and verify).

        Returns:
          True when the blob is now in memory (False: none, or above 256 MiB).
        """
        nbytes = int(self._packed.get("nbytes") or 0)
        if self._packed_cache is not None:
            return True
        if not nbytes or nbytes > _PACKED_CACHE_BYTES:
            return False
        extent = self._packed_extent()
        if extent is not None and self._file_size(extent.file) < extent.offset + nbytes:
            raise CorruptCheckpointError(
                f"the packed blob of '{self.path}' claims {nbytes} bytes at byte {extent.offset} of "
                f"'{extent.file}', which has only {self._file_size(extent.file)} bytes (truncated?)")
        cache = bytearray(nbytes)
        if extent is None:
            array = np.frombuffer(cache, dtype=np.uint8)
            self._store.read_array(self._packed["path"], array)
        else:
            fd = self._fd(extent.file, extent)
            try:
                pread_into(fd, cache, extent.offset, f"'{self.path}' (packed variables)")
            finally:
                self._release(extent.file, fd)  # a Zarr chunk's descriptor is not kept (one leaked per call)
        self._packed_cache = cache
        self._packed_checked = False
        return True

    def check_packed(self, names: list[str]) -> None:
        """Checks the crc32c of the named packed variables on the prefetched blob, before any is used.

        Raises:
          ChecksumError: naming the first damaged variable and the file.
          CorruptCheckpointError: a variable lies outside the blob.
        """
        cache = self._packed_cache
        if cache is None:
            return
        view = memoryview(cache)
        crc = crc32c_raw
        for name in names:
            record = self.record(name)
            if record.path is not None or record.checksum is None:
                continue
            start = int(record.offset or 0)
            if start + record.nbytes > len(cache):
                raise CorruptCheckpointError(
                    f"variable '{record.name}' in '{self.path}' lies outside the packed blob")
            found = crc(view[start:start + record.nbytes])
            if found != record.checksum:
                self._checksum_error(record, found)
        self._packed_checked = True

    def packed_arrays(self, indices: list[int]) -> list[npt.NDArray[Any]]:
        """Views of the prefetched blob for packed variables (manifest indices); see check_packed_at.

        Consecutive variables of one shape and dtype at a regular stride become
        one strided array whose rows are the views, so 50,000 small variables
        cost a fraction of a microsecond each. The views alias the blob: copy
        them (variables.restore_many does) before release_packed.

        Raises:
          CorruptCheckpointError: a variable lies outside the blob or its
            nbytes disagrees with its shape and dtype.
        """
        cache = self._packed_cache
        assert cache is not None, "prefetch_packed first"
        columns = self._columns.columns
        shapes, dtype_names = columns["shape"], columns["dtype"]
        offsets, sizes = columns["offset"], columns["nbytes"]
        total = len(cache)
        out: list[npt.NDArray[Any]] = []
        count = len(indices)
        k = 0
        while k < count:
            first = indices[k]
            shape, dtype_name, start = shapes[first], dtype_names[first], offsets[first]
            try:
                dtype = logical_dtype(dtype_name)
            except VarstoreError as err:
                raise CorruptCheckpointError(
                    f"variable '{self._names[first]}' in '{self.path}' has an unknown dtype {dtype_name!r}") from err
            size = math.prod(shape) * dtype.itemsize
            if size != sizes[first] or start is None or start + size > total:
                raise CorruptCheckpointError(
                    f"variable '{self._names[first]}' in '{self.path}' lies outside the packed blob "
                    f"or its nbytes disagrees with its shape and dtype")
            stride = size or 1
            end = k + 1
            if end < count and size:
                stride = offsets[indices[end]] - start if offsets[indices[end]] is not None else 0
                if stride >= size:
                    expected = start + stride
                    while end < count:
                        other = indices[end]
                        if offsets[other] != expected or shapes[other] != shape or dtype_names[other] != dtype_name:
                            break
                        expected += stride
                        end += 1
                    if start + (end - k - 1) * stride + size > total:
                        end = k + 1  # let the single-variable check report it
                else:
                    stride = size
            rows = end - k
            inner = tuple(shape)
            strides = c_strides(inner, dtype.itemsize)
            block = np.ndarray((rows,) + inner, dtype=dtype, buffer=cache, offset=start,
                               strides=(stride,) + strides)
            out.extend(block)
            k = end
        return out

    def check_packed_at(self, indices: list[int]) -> None:
        """Checks the crc32c of packed variables (manifest indices, placed by packed_arrays) on the blob.

        Raises:
          ChecksumError: naming the first damaged variable and the file.
        """
        cache = self._packed_cache
        assert cache is not None, "prefetch_packed first"
        columns = self._columns.columns
        offsets, sizes, checksums = columns["offset"], columns["nbytes"], columns["checksum"]
        view = memoryview(cache)
        crc = crc32c_raw
        for index in indices:
            expected = checksums[index]
            if expected is None:
                continue
            start = offsets[index]
            found = crc(view[start:start + sizes[index]])
            if found != expected:
                self._checksum_error(self.record(self._names[index]), found)

    def packed_index(self, name: str) -> int | None:
        """The manifest index of `name` when it is a packed variable, else None."""
        index = self._columns.index.get(name)
        if index is None or self._columns.columns["path"][index] is not None:
            return None
        return index

    def release_packed(self) -> None:
        """Drops the blob read by prefetch_packed."""
        self._packed_cache = None
        self._packed_checked = False

    def begin_checks(self) -> None:
        """From now on, _fill checks checksums in a helper thread (see end_checks)."""
        if self._check_pool is None:
            self._check_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-crc")
        self._checks = []

    def plan_reads(self, names: list[str]) -> None:
        """Says in which order the next bulk fills will read (a restore's order), for read-ahead.

        In an HDF5 file opened through its index header, a helper thread then
        announces the values to the kernel (POSIX_FADV_WILLNEED) at most
        `_READ_AHEAD_BYTES` (64 MiB) ahead of the one being read, so the disk
        works on the next values while the current one is copied and
        checksummed (the announcing itself costs page allocations, kept off
        the reading thread). Page cache only: no extra process memory.
        Stopped by end_checks and close.
        """
        self._stop_read_ahead()
        if not (self._direct and self._fmt == "h5"):
            return
        index, columns = self._columns.index, self._columns.columns
        offsets, sizes, file_offsets = columns["offset"], columns["nbytes"], columns.get("file_offset")
        fd = self._fds.get(self.path)
        if file_offsets is None or fd is None:
            return
        extents = []
        for name in names:
            i = index.get(name)
            if i is not None and offsets[i] is None and file_offsets[i] is not None and sizes[i]:
                extents.append((file_offsets[i], sizes[i]))
        if len(extents) > 1:
            self._read_ahead = _ReadAhead(fd, extents, _READ_AHEAD_BYTES)

    def _stop_read_ahead(self) -> None:
        if self._read_ahead is not None:
            self._read_ahead.stop()
            self._read_ahead = None

    def end_checks(self) -> None:
        """Waits for the checks started since begin_checks.

        Raises:
          ChecksumError: naming the first damaged variable (in read order) and the file.
        """
        checks, self._checks = self._checks or [], None
        self._stop_read_ahead()
        for record, future in checks:
            found = future.result()
            if found != record.checksum:
                self._checksum_error(record, found)

    def _checksum_error(self, record: Record, found: int) -> None:
        raise ChecksumError(
            f"variable '{record.name}' in '{self.path}' is corrupt: its bytes have crc32c {found:08x}, "
            f"the checkpoint recorded {record.checksum:08x}; restore from another checkpoint")

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
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                except (OSError, AttributeError):
                    pass
        return fd

    def _release(self, file: Path, fd: int) -> None:
        if self._fds.get(file) != fd:
            os.close(fd)

    def _extent_of(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                   name: str | None = None) -> RawExtent | None:
        if path not in self._extents:
            try:
                self._extents[path] = self._store.raw_extent(path, dtype, shape)
            except CorruptCheckpointError as err:
                if name is None:
                    raise
                raise CorruptCheckpointError(f"cannot read variable '{name}' in '{self.path}': {err}") from err
        return self._extents[path]

    def _file_size(self, file: Path) -> int:
        """Bytes in `file` (cached: an HDF5 checkpoint is one file; a Zarr chunk is statted once)."""
        size = self._sizes.get(file)
        if size is None:
            try:
                size = self._sizes[file] = os.stat(file).st_size
            except FileNotFoundError as err:
                raise CorruptCheckpointError(
                    f"'{file}' of checkpoint '{self.path}' is missing (truncated checkpoint?)") from err
        return size

    def _check_stored(self, record: Record) -> None:
        """Refuses a variable whose manifest claims more bytes than its storage holds, before allocating.

        Compares the claim with the real stored size: the file's (or Zarr
        chunk file's) size past the value's offset, the packed blob's length,
        or the HDF5 dataset's storage size when it is read through h5py. A
        manifest claiming 10**15 bytes is refused here instead of failing in
        numpy's allocator. Arrays stored compressed (never written by varstore)
        have no such bound and are left to their library.

        Raises:
          CorruptCheckpointError: naming the variable, the file and both sizes.
        """
        if not record.nbytes:
            return
        where = f"variable '{record.name}' in '{self.path}'"
        if record.path is None:
            start, total = int(record.offset or 0), int(self._packed.get("nbytes") or 0)
            if start + record.nbytes > total:
                raise CorruptCheckpointError(
                    f"{where} lies outside the packed blob: it claims bytes {start}..{start + record.nbytes}, "
                    f"the blob has {total}")
            try:
                extent, path, claimed = self._packed_extent(), self._packed["path"], total
            except CorruptCheckpointError as err:
                raise CorruptCheckpointError(f"cannot read {where}: {err}") from err
        else:
            path, claimed = record.path, record.nbytes
            if self._direct and record.file_offset is not None:
                extent = RawExtent(self.path, record.file_offset, record.nbytes)
            else:
                storage_dtype, storage_shape = storage_layout(record.numpy_dtype, record.shape, self._fmt == "h5")
                extent = self._extent_of(path, storage_dtype, storage_shape, record.name)
        if extent is not None:
            size = self._file_size(extent.file)
            if size < extent.offset + extent.nbytes:
                raise CorruptCheckpointError(
                    f"{where} claims {claimed} bytes at byte {extent.offset} of '{extent.file}', which has "
                    f"only {size} bytes (truncated or damaged manifest)")
            return
        stored = getattr(self._store, "stored_nbytes", lambda _: None)(path)
        if stored is not None and stored < claimed:
            raise CorruptCheckpointError(
                f"{where} claims {claimed} bytes, but its storage '{path}' in '{self.path}' holds {stored} "
                f"(truncated or damaged manifest)")

    def _fill(self, record: Record, out: npt.NDArray[Any], verify: bool) -> None:
        """Fills `out` (C-contiguous, the record's logical dtype and shape) and checks the checksum."""
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed; cannot read '{record.name}'")
        where = f"variable '{record.name}' in '{self.path}'"
        if record.nbytes:
            if record.path is None:
                self._fill_packed(record, out, where)
                if self._packed_checked and self._packed_cache is not None:
                    return  # checked by check_packed before anything was written
            else:
                if self._direct and record.file_offset is not None:
                    extent: RawExtent | None = RawExtent(self.path, record.file_offset, record.nbytes)
                else:
                    storage_dtype, storage_shape = storage_layout(
                        record.numpy_dtype, record.shape, self._fmt == "h5")
                    extent = self._extent_of(record.path, storage_dtype, storage_shape, record.name)
                    if extent is None:
                        self._store.read_array(
                            record.path, out.reshape(-1).view(storage_dtype).reshape(storage_shape))
                if extent is not None:
                    fd = self._fd(extent.file, extent)
                    try:
                        pread_into(fd, out, extent.offset, where)
                    finally:
                        self._release(extent.file, fd)
                    if self._read_ahead is not None:
                        self._read_ahead.done(extent.offset)
        if verify and record.checksum is not None:
            if self._checks is not None and record.nbytes >= _THREADED_CHECK_BYTES:
                assert self._check_pool is not None
                self._checks.append((record, self._check_pool.submit(crc32c_of, out)))
                return
            found = crc32c_of(out) if record.nbytes else 0
            if found != record.checksum:
                self._checksum_error(record, found)

    def _fill_packed(self, record: Record, out: npt.NDArray[Any], where: str) -> None:
        start = int(record.offset or 0)
        if self._packed_cache is not None:
            if start + record.nbytes > len(self._packed_cache):
                raise CorruptCheckpointError(f"{where} lies outside the packed blob")
            memoryview(out.reshape(-1).view(np.uint8))[:] = memoryview(self._packed_cache)[
                start:start + record.nbytes]
            return
        total = int(self._packed.get("nbytes") or 0)
        if start + record.nbytes > total:
            raise CorruptCheckpointError(f"{where} lies outside the packed blob")
        extent = self._packed_extent()
        if extent is None:
            stored = getattr(self._store, "stored_nbytes", lambda _: None)(self._packed["path"])
            if stored is not None and stored < total:
                raise CorruptCheckpointError(
                    f"{where}: the packed blob claims {total} bytes, its storage holds {stored}")
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

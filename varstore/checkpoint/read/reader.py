"""The lazy reader of varstore's own checkpoints: open_varstore, VarstoreReader, CheckpointValue.

Opening reads the root attributes and the JSON manifest only (through the
index header when there is one: see detection.py). Reading a variable reads
only its bytes, with one positional read through the Storage protocol
straight into the caller's buffer at the recorded offset (or the one the
backend reports: the HDF5 dataset's offset or the Zarr chunk file), then
checks its crc32c on that buffer; arrays stored some other way are read
through the backend. `CheckpointValue` implements the core's ValueSource
protocol, so deferred and lazy restores read from here; a bulk restore's
plan reads through `bound_reads` instead (planned_values.py). verify lends the
reader a `ReadSession`. Never runs initializers, never writes.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from varstore._limits import check_value_size
from varstore.backends import BackendReader, RawExtent, get_backend
from varstore.checkpoint.format.checksum import crc32c_of
from varstore.checkpoint.format.info_columns import InfoColumns
from varstore.checkpoint.read.key_order import KeyOrder, copy_packed
from varstore.checkpoint.read.planned_values import BoundReads
from varstore.checkpoint.read.read_checks import checksum_error
from varstore.checkpoint.read.read_session import ReadSession
from varstore.checkpoint.read.locations import VariableBytes
from varstore.checkpoint.read.detection import detect_container, is_varstore_checkpoint, open_own
from varstore.checkpoint.format.manifest import (
    FORMAT_NAMES,
    ManifestColumns,
    Record,
    decode_manifest_columns,
    storage_layout,
)
from varstore.checkpoint.read.reader_api import CheckpointReader, checked_out, read_through_cast
from varstore.errors import (
    CheckpointError,
    CorruptCheckpointError,
    NotACheckpointError,
    UnknownVariableError,
    VarstoreError,
)
from varstore.storage import ReadAhead, Storage, is_remote
from varstore.storage.path_pin import NO_PIN, pin_local, pinned
from varstore.store.host_arrays import host_empty

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt
    from varstore.checkpoint.format.variable_info import VariableInfo

__all__ = ["VarstoreReader", "CheckpointValue", "ReadSession", "open_varstore", "is_varstore_checkpoint"]


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
        reader, record = self._reader, self._record
        read_through_cast(out, self.shape, self.dtype, self.origin,
                          lambda into: reader.fill(record, into, self._verify), lambda: reader.check_stored(record))

    def __repr__(self) -> str:
        return f"<CheckpointValue {self.origin} {self.shape} {self.dtype}>"


class VarstoreReader(CheckpointReader):
    """A read-only, lazy view of one varstore checkpoint (format "varstore-hdf5" or "varstore-zarr").

    Attributes:
      storage: where its bytes are read from (the Storage protocol).
      session: the ReadSession of a running bulk read (lent with `in_session`), or None.
    """

    def __init__(self, path: Path, fmt: str | None, storage: Storage | None = None, *,
                 backend_source: Callable[[], BinaryIO | Mapping[str, bytes]] | None = None) -> None:
        """Opens the checkpoint at `path` ("h5"/"zarr" `fmt`; None detects it, a local path) on the local
        file system (`storage` None: pinned while read, storage/path_pin.py) or on `storage` (an object
        store, read through `backend_source`); reads the manifest only (detection.open_own)."""
        super().__init__(path)
        self._backend_reader: BackendReader | None = None
        self.staged: Path | None = None  # the path standing for a Zarr checkpoint on an object store (nothing there)
        # a file object over a remote single file, for the backend (also when the constructor needs it)
        self.backend_source: Callable[[], BinaryIO | Mapping[str, bytes]] | None = backend_source
        self._session: ReadSession | None = None
        self._closed = False
        located: Storage
        if storage is None:  # the one ask of local storage: pin, storage, a file kept open (storage/path_pin.py)
            try:
                located, self._key, self._pin = pin_local(path)
            except OSError:
                if fmt is None:
                    detect_container(path)  # the typed error: nothing there, permission denied, a special file
                raise
        else:
            located, self._key, self._pin = storage, os.fspath(path), NO_PIN
        self.storage: Storage = located
        with self._pin.opening(self.close):  # the reader is closed on any error
            if storage is not None and fmt is not None and not get_backend(fmt).is_directory:
                storage.keep_open(self._key)  # every read of this object pinned to what it is now
            found = open_own(path, fmt, located, self._key, backend_source)  # container and manifest, checked
            self._backend_reader = found.backend_reader
            self._backend = found.backend
            self.format = FORMAT_NAMES[found.backend.name]
            self._direct = found.direct  # offsets in the manifest are trusted (the index header matched)
            header, columns = decode_manifest_columns(found.manifest, str(path))
            if self._direct and header.get("format") != self.format:
                raise NotACheckpointError(f"'{path}' has an index header but is not a varstore HDF5 file")
        self.step = header.get("step")
        self.metadata = dict(header.get("metadata") or {})
        self.format_version = header.get("format_version")
        self.library_version = header.get("library_version")
        self.created_utc = header.get("created_utc")
        #: A collective save's section (world_size, partitioned arrays' parts and writes), or None.
        self.distributed: dict[str, Any] | None = header.get("distributed") if isinstance(
            header.get("distributed"), dict) else None
        #: Whether the backend stores fixed-length bytes natively (HDF5) or as uint8 (Zarr).
        self.native_bytes_strings = bool(self._backend.native_bytes_strings)
        self._packed: dict[str, Any] = header.get("packed") or {}
        #: "per-variable" or "packed" (root attribute varstore_layout; older files: from the packed blob).
        self.layout = header.get("layout") or ("packed" if self._packed.get("nbytes") else "per-variable")
        self._bytes = VariableBytes(self.path, self._key, self._backend, lambda: self._store, self.storage,
                                    self._direct, self._packed)
        self._columns: ManifestColumns = columns
        self.manifest = columns  # the decoded manifest, column by column (read-only use)
        self._records: dict[int, Record] = {}
        self._names = columns.names
        self._order = KeyOrder(self)  # loops reading the keys in order (key_order.py)
        self._infos = InfoColumns(columns)  # info() straight from the columns (info_columns.py)

    @property
    def session(self) -> ReadSession | None:
        """The ReadSession of the bulk read running over this reader, or None (plain lazy reads)."""
        return self._session

    @contextlib.contextmanager
    def in_session(self, session: ReadSession) -> Iterator[ReadSession]:
        """Lends the reader `session` for one bulk read (read_engine, verify); the previous one is back after."""
        previous, self._session = self._session, session
        try:
            yield session
        finally:
            self._session = previous

    @property
    def _store(self) -> BackendReader:
        """The backend reader (h5py/zarr), opened on first need."""
        if self._backend_reader is None:
            if self._closed:
                raise CheckpointError(f"checkpoint '{self.path}' is closed")
            source = None if self.backend_source is None else self.backend_source()
            self._backend_reader = self._pin.vouch(self._backend.open_reader(self.path, source))  # opened by name
        return self._backend_reader

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
        index = self._columns.index.get(name)
        if index is None:
            raise UnknownVariableError(f"no variable '{name}' in '{self.path}'")
        record = self._records.get(index)
        if record is None:
            record = self._records[index] = self._columns.record(index)
        return record

    def info(self, name: str) -> VariableInfo:
        index = self._columns.index.get(name)
        if index is None:
            raise UnknownVariableError(f"no variable '{name}' in '{self.path}'")
        return self._infos.info(index)

    def infos(self) -> list[VariableInfo]:
        return self._infos.infos()

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        """`read(name)`; in a loop in key order over packed variables, one copy out of the checked blob."""
        index = self._columns.index.get(name)
        if index is not None and self._session is None:
            value = self._order.next_copy(index)
            if value is not None:
                return value
        return self.read(name)

    def read(self, name: str, out: npt.NDArray[Any] | None = None, *,
             verify: bool = True) -> npt.NDArray[Any]:
        index = self._columns.index.get(name)
        if index is None:
            raise UnknownVariableError(f"no variable '{name}' in '{self.path}'")
        if self._session is None:
            self._order.follow(index)
            if out is None:
                view = self._order.packed_view(index, verify)
                if view is not None:  # a loop in key order: the blob was read and checked once
                    return view.copy()
        record = self.record(name)
        if out is None:
            blob = self._order.blob if self._session is None and record.path is None else None
            if blob is not None:  # a loop in key order over packed variables: out of the blob read once
                return copy_packed(record, blob, verify, str(self.path), self.checksum_error)
            self.check_stored(record)  # before allocating what the manifest claims
            if self._session is None:
                out = self._order.new_array(index)  # made and faulted in ahead in a loop in key order
        out = checked_out(name, record.shape, record.numpy_dtype, out)
        self.fill(record, out, verify)
        return out

    def new_array(self, index: int) -> npt.NDArray[Any]:
        """A new, unfilled array for the variable at manifest position `index`, after `check_stored` (its errors)."""
        record = self.record(self._names[index])
        self.check_stored(record)
        return host_empty(record.shape, record.numpy_dtype)

    def source(self, name: str, *, verify: bool = True) -> CheckpointValue:
        """The ValueSource of one variable (reads happen when the core asks)."""
        return CheckpointValue(self, self.record(name), verify)

    def verify(self, progress: Callable[[int, int, str], None] | None = None, names: Any = None) -> None:
        """Checks every crc32c (verify.py: one reused buffer, read ahead); a selection `names` name by name."""
        if names is not None:
            return super().verify(progress, names)
        from varstore.checkpoint.read.verify import verify_all
        if self.staged is None:  # a local Zarr directory: every group's zarr.json parses (a staged copy has none)
            self._bytes.check_groups(self._columns)
        verify_all(self, progress)

    def start_read_ahead(self, names: list[str], window: int) -> ReadAhead | None:
        """The storage's read-ahead over the bytes of `names` (read in this order): a file's extents, a Zarr's files."""
        planned = self.direct_extents(names)
        if planned is not None:
            return self.storage.read_ahead(planned[0], planned[1], window)
        files = self.hint_files(names)
        start = getattr(self.storage, "read_ahead_files", None)
        return start(files, window) if files and start is not None else None

    def resident(self, names: list[str]) -> bool:
        """Whether the bytes of `names` are memory already (a tmpfs, or the page cache) so that reading them
        waits on no disk: the storage's hint (LocalStorage.resident); False where it cannot tell."""
        planned = self.direct_extents(names)
        if planned is not None:
            check = getattr(self.storage, "resident", None)
            return check is not None and check(planned[0], planned[1])
        files = self.hint_files(names)
        check_files = getattr(self.storage, "resident_files", None)
        return bool(files) and check_files is not None and check_files(files)

    def close(self) -> None:
        order = getattr(self, "_order", None)
        if order is not None:
            order.close()
        session = getattr(self, "_session", None)
        if session is not None and session.read_ahead is not None:
            session.read_ahead.stop()  # before its descriptor is closed
            session.read_ahead = None
        storage = getattr(self, "storage", None)
        if storage is not None:
            storage.close()
        getattr(self, "_pin", NO_PIN).close()
        if not getattr(self, "_closed", True):
            self._closed = True
            if self._backend_reader is not None:
                self._backend_reader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- where bytes are (locations.py)
    def direct_extents(self, names: list[str]) -> tuple[str, list[tuple[int, int]]] | None:
        """(storage key, [(offset, nbytes)...]) of the named own-array variables with trusted offsets, or None."""
        return self._bytes.direct_extents(self._columns, names)

    def locate(self, names: list[str]) -> None:
        """Looks up where the named variables' bytes are, all at once (see VariableBytes.locate)."""
        self._bytes.locate(self._columns, names)

    def hint_files(self, names: list[str]) -> list[tuple[str, int]]:
        """(file, bytes) to read ahead for the named variables of a Zarr directory (VariableBytes.hint_files)."""
        return self._bytes.hint_files(self._columns, names)

    @pinned
    def packed_blob(self, limit: int = 256 << 20) -> bytearray | None:
        """The whole packed blob read in one go (bulk restores and verify), or None when there is
        none or it is larger than `limit` bytes.

        Raises:
          CorruptCheckpointError: the file holds fewer bytes than the blob claims.
        """
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed")
        return self._bytes.packed_blob(limit)

    def check_stored(self, record: Record) -> None:
        """Refuses a variable claiming more bytes than its storage holds or the read limit allows, before allocating.

        Raises:
          CorruptCheckpointError: naming the variable, the file and both sizes (see locations.py).
          ValueTooLargeError: naming the variable, its bytes and the limit.
        """
        self._bytes.check_stored(record)
        check_value_size(record.name, self.location, record.nbytes, self.max_bytes, stored=record.nbytes,
                         expansion=self.max_expansion)

    def record_extent(self, record: Record) -> RawExtent | None:
        """Where an own-array variable's bytes lie (file, offset, bytes), or None when only the
        backend can read them (a chunked Zarr array, an HDF5 scalar) or it is packed (region reads)."""
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed; cannot read '{record.name}'")
        return None if record.path is None or not record.nbytes else self._bytes.record_extent(record)

    @pinned
    def read_stored_region(self, record: Record, index: tuple[slice, ...], out: npt.NDArray[Any]) -> None:
        """Fills `out` (stored dtype, the region's stored shape) with region `index` through the backend."""
        assert record.path is not None
        read_array: Any = self._store.read_array  # the Zarr backend reads regions; see backends/zarr3
        read_array(record.path, out, index)

    def _extent_of(self, path: str, dtype: np.dtype, shape: tuple[int, ...]) -> RawExtent | None:
        return self._bytes.extent_of(path, dtype, shape)

    def checksum_error(self, record: Record, found: int) -> None:
        """Raises read_checks.checksum_error's ChecksumError (or CorruptCheckpointError for `found` -1)."""
        checksum_error(self.path, record, found)

    def bound_reads(self) -> BoundReads:
        """What one ReadPlan's values read with (planned_values.py): bound methods, not this reader."""
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed")
        pin_check = self._pin.check if self._pin.guards_reads else None
        return BoundReads(self.path, self._bytes.record_extent, self._bytes.read_extent, self._bytes.check_stored,
                          (self.location, self.max_bytes, self.max_expansion), pin_check, self.fill)

    @pinned
    def fill(self, record: Record, out: npt.NDArray[Any], verify: bool) -> None:
        """Fills `out` (C-contiguous, the record's logical dtype and shape) and checks the checksum.

        Raises:
          CheckpointError: the reader is closed.
          CorruptCheckpointError, ChecksumError: damaged or truncated bytes, naming the variable and file.
          CheckpointReplacedError: a save replaced the checkpoint meanwhile (see storage/path_pin.py).
        """
        if self._closed:
            raise CheckpointError(f"checkpoint '{self.path}' is closed; cannot read '{record.name}'")
        session = self._session
        where = f"variable '{record.name}' in '{self.path}'"
        if record.nbytes:
            if record.path is None:
                if self._fill_packed(record, out, where, session):
                    return  # checked on the blob before anything was written
            else:
                extent = self._bytes.record_extent(record)
                if extent is None:
                    storage_dtype, storage_shape = storage_layout(
                        record.numpy_dtype, record.shape, self._backend.native_bytes_strings)
                    self._store.read_array(
                        record.path, out.reshape(-1).view(storage_dtype).reshape(storage_shape))
                else:
                    found = self._bytes.read_extent(extent, 0, out, where, check_size=True,
                                                    checksum=verify and record.checksum is not None)
                    ahead = self._order.ahead if session is None else session.read_ahead
                    if ahead is not None:
                        ahead.done(extent.offset)
                    if found is not None:  # taken on the way (a local file)
                        if found != record.checksum:
                            self.checksum_error(record, found)
                        return
        if verify and record.checksum is not None:
            if session is not None and session.defer is not None and session.defer(record, out):
                return
            found = crc32c_of(out) if record.nbytes else 0
            if found != record.checksum:
                self.checksum_error(record, found)

    def _fill_packed(self, record: Record, out: npt.NDArray[Any], where: str, session: ReadSession | None) -> bool:
        """Fills a packed variable; True when its checksum was already checked on the session's blob."""
        start = int(record.offset or 0)
        blob = self._order.blob if session is None else session.packed
        if blob is not None:
            if start + record.nbytes > len(blob):
                raise CorruptCheckpointError(f"{where} lies outside the packed blob")
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(blob, np.uint8, record.nbytes, start)
            return bool(session.packed_checked) if session is not None else False
        total = self._bytes.packed_nbytes()
        if start + record.nbytes > total:
            raise CorruptCheckpointError(f"{where} lies outside the packed blob")
        extent = self._bytes.packed_extent()
        if extent is None:
            stored = getattr(self._store, "stored_nbytes", lambda _: None)(self._packed["path"])
            if stored is not None and stored < total:
                raise CorruptCheckpointError(
                    f"{where}: the packed blob claims {total} bytes, its storage holds {stored}")
            whole = np.empty((total,), dtype=np.uint8)
            self._store.read_array(self._packed["path"], whole)
            out.reshape(-1).view(np.uint8)[...] = whole[start:start + record.nbytes]
            return False
        self._bytes.read_extent(extent, start, out, where)
        return False


def open_varstore(path: os.PathLike[str] | str, format: str | None = None, *,
                  storage_options: Mapping[str, object] | None = None) -> VarstoreReader:
    """Opens a varstore HDF5 file or Zarr v3 directory read-only; reads metadata only.

    Args:
      path: the checkpoint, or an object-store URL ("s3://bucket/runs/a7/model.h5", gs://, az://).
        On an object store, HDF5 is read in place with ranged GETs (the index header, then only
        the bytes of the variables read); a Zarr checkpoint's metadata is fetched into memory
        first, its chunks read on demand.
      format: "h5" or "zarr"; None detects it from the contents (the suffix for URLs).
      storage_options: for URLs: endpoint, region, credentials (see docs/guide/object-storage.md).

    Raises:
      CheckpointNotFoundError: nothing at `path` (on an object store: no commit object).
      NotACheckpointError: not HDF5/Zarr, or not written by varstore.
      CorruptCheckpointError: truncated or damaged metadata.
      ObjectStoreError: the object store failed after retries (naming the URL).
    """
    if is_remote(path):
        return _open_remote(path, format, storage_options)
    path = Path(path)
    try:  # detection.open_own detects the container (format None) once the path is pinned
        return VarstoreReader(path, None if format is None else get_backend(format).name)
    except VarstoreError:
        raise
    except OSError as err:
        raise CorruptCheckpointError(f"cannot read checkpoint '{path}': {err}") from err


def _open_remote(url: os.PathLike[str] | str, format: str | None,
                 storage_options: Mapping[str, object] | None) -> VarstoreReader:
    """open_varstore for an object-store URL: commit object checked, HDF5 in place, Zarr metadata in memory."""
    # the object-store client and the remote layer: imported only for URLs (a local open stays light)
    from varstore.checkpoint.read.remote_read import container_of, stage_for_reading
    from varstore.storage import object_store_for

    storage, key = object_store_for(url, storage_options)
    name = storage.name_of(key)
    fmt = container_of(storage, name, format)
    staged = stage_for_reading(storage, name, fmt)
    if staged is None:
        reader = VarstoreReader(Path(key), fmt, storage=storage,
                                backend_source=lambda: io.BufferedReader(storage.open_reader(name), 1 << 16))
    else:  # the root stands for the checkpoint; its metadata is held in memory
        reader = VarstoreReader(staged[0], fmt, storage=staged[1], backend_source=lambda: staged[2])
    reader.staged, reader.location = None if staged is None else staged[0], key
    return reader

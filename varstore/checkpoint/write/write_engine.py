"""The bulk write engine: stream planned values into a new container; `write_container` is its one call.

Owns the threads of a save. A blocking, uncompressed save into files: the
caller's thread fetches each value and writes it through the Storage
protocol, its crc32c taken piece by piece just before each piece is written
(`write_at_digest`, both from the CPU's cache), while a helper thread makes
the arrays ahead (metadata_ahead.py); the checksum attributes follow the
data. Any other save (async, compressed, or to a storage that uploads): one
background thread does the positional writes (a bounded number in flight)
while the caller's thread fetches and checksums the next value and makes
its array. Each value goes straight from the variable's buffer to the place
the backend laid out for it; small variables are copied into a bounded
staging window of the packed blob (packed.py). The manifest goes last.
Never holds a second copy of the model; never renames (the commit is
atomic.py's) and decides nothing about which variables or names (plan.py
does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from varstore.backends import RawExtent, get_backend
from varstore.backends.zarr3.codecs import encode_chunk
from varstore.checkpoint.publish import atomic
from varstore.checkpoint.format.checksum import crc32c_of, crc32c_raw
from varstore.checkpoint.format.manifest import (
    INDEX_HEADER_BYTES,
    MANIFEST_PATH,
    PACKED_PATH,
    Record,
    encode_index_header,
    encode_manifest,
    format_checksum,
    storage_layout,
)
from varstore.checkpoint.format.packed import pack_window
from varstore.checkpoint.format.entry import SnapshotEntry
from varstore.checkpoint.write.metadata_ahead import MetadataAhead
from varstore.checkpoint.write.plan import PlannedEntry, array_attrs, checked_value, host_value, root_attrs
from varstore.storage import Storage, StorageWriter, storage_for
from varstore.store.variables import host_views

__all__ = ["write_container", "STAGING_BYTES"]

#: Bytes of small variables copied into one staging window of the packed blob before it is written.
STAGING_BYTES = 8 << 20
#: Writes queued for the background thread at most.
_MAX_PENDING = 8


class _Writes:
    """A single background thread doing positional writes through a Storage, a bounded number in flight;
    `synchronous`: every write on the caller's thread instead (the thread is never started)."""

    def __init__(self, storage: Storage, synchronous: bool = False) -> None:
        self._storage = storage
        self._synchronous = synchronous
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-write")
        self._slots = threading.BoundedSemaphore(_MAX_PENDING)
        self._futures: list[Future[None]] = []
        self._shared: dict[str, StorageWriter] = {}  # writers kept open: a single-file container
        self._seen: set[Path] = set()
        self.files: list[Path] = []

    def _note(self, file: Path) -> None:
        if file not in self._seen:
            self._seen.add(file)
            self.files.append(file)

    def _writer(self, file: Path, keep: bool) -> StorageWriter:
        key = str(file)
        if not keep:
            return self._storage.writer(key)
        writer = self._shared.get(key)
        if writer is None:
            writer = self._shared[key] = self._storage.writer(key, keep_open=True)
        return writer

    def reserve(self, file: Path, nbytes: int) -> None:
        """Reserves the first `nbytes` bytes of `file` (kept open) at once; best effort."""
        self._note(file)
        self._writer(file, True).reserve(nbytes)

    def _write(self, extent: RawExtent, data: Any, keep: bool, done: Callable[[], None] | None) -> None:
        try:
            self.write_now(extent, data, keep, checksum=False)
        finally:
            if done is not None:
                done()

    def _write_queued(self, extent: RawExtent, data: Any, keep: bool, done: Callable[[], None] | None) -> None:
        try:
            self._write(extent, data, keep, done)
        finally:
            self._slots.release()

    def write_now(self, extent: RawExtent, data: Any, keep: bool, checksum: bool) -> int | None:
        """Writes `data` at `extent` on the caller's thread; with `checksum`, returns its crc32c, taken piece
        by piece just before each piece is written where the storage's writer can (`write_at_digest`)."""
        self._note(extent.file)
        writer = self._writer(extent.file, keep)
        try:
            if not checksum:
                writer.write_at(extent.offset, data)
                return None
            fused = getattr(writer, "write_at_digest", None)
            if fused is not None:
                return int(fused(extent.offset, data, crc32c_raw))
            value = crc32c_of(data)
            writer.write_at(extent.offset, data)
            return value
        finally:
            if not keep:
                writer.finish()

    def submit(self, extent: RawExtent, data: Any, keep: bool, done: Callable[[], None] | None = None) -> None:
        """Queues a write of `data` at `extent`; `keep` keeps the file open (a shared single file);
        `done()` is called once the bytes were handed over (or the write failed)."""
        self._note(extent.file)
        if self._synchronous:
            self._write(extent, data, keep, done)
            return
        self._slots.acquire()
        self._futures.append(self._pool.submit(self._write_queued, extent, data, keep, done))
        if len(self._futures) > 4 * _MAX_PENDING:
            self._reap()

    def _reap(self) -> None:
        pending = []
        for future in self._futures:
            if future.done():
                future.result()
            else:
                pending.append(future)
        self._futures = pending

    def drain(self) -> None:
        """Waits for every queued write; re-raises the first failure."""
        for future in self._futures:
            future.result()
        self._futures = []

    def close(self) -> None:
        """Waits for the thread (errors of a failing save are left to drain) and finishes kept writers."""
        self._pool.shutdown(wait=True)
        shared, self._shared = self._shared, {}
        for writer in shared.values():
            writer.finish()
        self._storage.close()


def write_container(tmp: Path, fmt: str, entries: list[Any], records: list[Record], packed_nbytes: int,
                    header: dict[str, Any], checksum: bool, release: Callable[[int], None] | None = None,
                    make_durable: Callable[[list[Path]], None] = atomic.fsync_paths,
                    storage: Storage | None = None) -> None:
    """Writes every value, the manifest and the root attributes into a new container at `tmp`, durably.

    The one call `save` makes. Values are fetched in order, one at a time
    (small packed ones per staging window); the manifest goes last, then the
    index header (single-file containers), then every file is made durable
    through `make_durable` (the commit's step: fsync locally).

    Args:
      tmp: where to create the container (a temporary sibling of the final path).
      fmt: backend name ("h5", "zarr").
      entries, records: what to write, as planned (plan.py); records get their checksums and offsets.
      packed_nbytes: bytes of the packed blob (manifest.assign_paths).
      header: the manifest header (plan.header).
      checksum: record crc32c checksums.
      release: `release(nbytes)` (async saves) is called once a value's bytes
        are no longer needed (written, or copied into a staging window).
      make_durable: called with every file and directory written (the commit's durability step).
      storage: where the bytes go (default: the local file system).
    """
    backend = get_backend(fmt)
    single_file = not backend.is_directory
    compression = header.get("compression")  # Zarr only (writer.save_entries refuses it for HDF5)
    target = storage_for(tmp)[0] if storage is None else storage
    # a directory's metadata documents go through the storage too (one that uploads sends them at once)
    writer = backend.open_writer(tmp, INDEX_HEADER_BYTES if single_file else 0, storage=target)
    # A blocking, uncompressed save into files: the caller writes every value (checksummed piece by piece
    # as written) while a helper thread creates the arrays ahead (metadata_ahead.py); else a writer thread
    # writes while the caller checksums and creates. An uploading storage keeps the writer thread.
    swapped = release is None and compression is None and not getattr(target, "uploads", False)
    writes = _Writes(target, synchronous=swapped)
    ahead: MetadataAhead | None = None
    if single_file:
        # Reserve the data's blocks in one go before HDF5 lays out anything: the file's extents then
        # lie on disk in file order (per-dataset reservations interleaved with HDF5's metadata writes
        # scattered a 1.2 GB file over ~150 extents out of order, slowing the later sequential read).
        # HDF5 truncates the file to its end-of-allocation on close, so an overestimate leaves nothing.
        writes.reserve(tmp, INDEX_HEADER_BYTES + packed_nbytes
                       + sum(record.nbytes for record in records if record.path is not None))
    try:
        packed_extent = None
        if packed_nbytes:
            packed_extent = writer.create_array(
                PACKED_PATH, np.dtype("u1"), (packed_nbytes,),
                {"description": "small variables packed back to back; see _varstore/manifest"})
        native = writer.native_bytes_strings
        slots: dict[int, int] = {}  # record index -> its position among the arrays made ahead
        through_library: list[tuple[str, Any]] = []  # (array path, stored value): written after the helper
        requests: list[tuple[str, np.dtype, tuple[int, ...], dict[str, Any]]] = []
        if swapped:
            for index, record in enumerate(records):
                if record.path is not None:
                    slots[index] = len(requests)
                    stored_dtype, stored_shape = storage_layout(record.numpy_dtype, record.shape, native)
                    attrs = {k: v for k, v in array_attrs(record).items() if k != "checksum"}
                    requests.append((record.path, stored_dtype, stored_shape, attrs))
            ahead = MetadataAhead(writer, requests)
        window: list[int] = []
        window_values: list[Any] = []  # fetched when reached: values stream in order
        window_variables: list[int] = []  # positions in the window whose Variable is fetched at flush
        window_bytes = 0

        def flush_window() -> None:
            nonlocal window_bytes
            if not window:
                return
            group = [records[i] for i in window]
            values = list(window_values)
            if window_variables:  # Variables' live buffers, fetched in one batch (host_views)
                views = host_views([entries[window[k]].variable for k in window_variables], read_only=False)
                for k, view in zip(window_variables, views):
                    values[k] = checked_value(view, group[k], tmp)
                window_variables.clear()
            data = pack_window(group, values, checksum)
            if release is not None:
                release(sum(r.nbytes for r in group))
            if data is not None and packed_extent is not None:
                start = group[0].offset or 0
                # the blob is written in windows: one key in several pieces, kept open (an object-store
                # staging storage uploads only keys written whole; see storage/staged_upload.py)
                writes.submit(RawExtent(packed_extent.file, packed_extent.offset + start, len(data)),
                              data, True)
            window.clear()
            window_values.clear()
            window_bytes = 0

        for index, (entry, record) in enumerate(zip(entries, records)):
            if release is not None and window and not entry.ready():
                # Async: the caller may be waiting for snapshot memory held by this window.
                flush_window()
            if record.path is None:
                if window_bytes + record.nbytes > STAGING_BYTES:
                    flush_window()
                if release is None and type(entry) is PlannedEntry and entry.variable is not None:
                    window_variables.append(len(window))
                    window.append(index)
                    window_values.append(None)
                    window_bytes += record.nbytes
                    continue
                window.append(index)
                value = host_value(entry, record, tmp)
                if not isinstance(entry, (PlannedEntry, SnapshotEntry)):
                    value = value.copy()  # a producer's fresh array (convert) is released at once
                window_values.append(value)
                window_bytes += record.nbytes
                continue
            value = host_value(entry, record, tmp)
            if ahead is not None:
                _, storage_dtype, storage_shape, _ = requests[slots[index]]
                extent = ahead.extent(slots[index])
                if extent is None:  # through the library (HDF5 scalars), once every array is made (below)
                    record.checksum = crc32c_of(value) if checksum else None
                    stored = value.reshape(-1).view(storage_dtype).reshape(storage_shape)
                    through_library.append((record.path, stored.copy()))  # a scalar or empty: a copy costs nothing
                else:
                    if single_file:
                        record.file_offset = extent.offset
                    record.checksum = writes.write_now(extent, value, single_file, checksum)
                continue
            if checksum:
                record.checksum = crc32c_of(value)
            storage_dtype, storage_shape = storage_layout(value.dtype, record.shape, native)
            if compression is None:
                extent = writer.create_array(record.path, storage_dtype, storage_shape, array_attrs(record))
            else:
                zarr_writer: Any = writer  # compression: the Zarr writer's own keyword (codecs.py)
                extent = zarr_writer.create_array(record.path, storage_dtype, storage_shape, array_attrs(record),
                                                  compression=compression)
            done = None if release is None else (lambda n=record.nbytes: release(n))
            if extent is not None and compression is not None:  # one encoded chunk, its own size
                data = encode_chunk(value.reshape(-1).view(storage_dtype).reshape(storage_shape), compression)
                writes.submit(RawExtent(extent.file, 0, len(data)), data, single_file, done)
            elif extent is None:
                writer.write_array(record.path, value.reshape(-1).view(storage_dtype).reshape(storage_shape))
                if done is not None:
                    done()
            else:
                if single_file:
                    record.file_offset = extent.offset
                writes.submit(extent, value, single_file, done)
        flush_window()
        if ahead is not None:
            ahead.stop()
            # HDF5 places a scalar's value when it is written: written while the helper was still making
            # arrays, it took whichever place the race gave it, and the same save made files of different
            # sizes (docs/cli.md's truncated-file example differed in CI). Written here, after every array
            # is made, in order, the file's layout is the same every time.
            for path, stored in through_library:
                writer.write_array(path, stored)
            for index in slots:  # the attributes held back: each checksum, known now (held Zarr documents
                record = records[index]  # without one are written at close)
                if record.checksum is not None:
                    writer.add_attrs(str(record.path), {"checksum": format_checksum(record.checksum)})
        atomic.fault_point("after_data")
        writes.drain()
        atomic.fault_point("before_checksums")
        packed_file_offset = packed_extent.offset if (packed_extent is not None and single_file) else None
        manifest = encode_manifest(header, records, packed_nbytes, packed_file_offset)
        extent = writer.create_array(MANIFEST_PATH, np.dtype("u1"), (len(manifest),),
                                     {"description": "JSON index of every variable; see docs"})
        if extent is not None:
            writes.submit(extent, manifest, single_file)
        writer.set_root_attrs(root_attrs(header, crc32c_raw(manifest)))
        writes.drain()
        paths = writer.close()
        if single_file and extent is not None:
            # The HDF5 user block says where the manifest is, so readers can skip the HDF5 library.
            writes.submit(RawExtent(tmp, 0, INDEX_HEADER_BYTES),
                          encode_index_header(extent.offset, len(manifest), crc32c_raw(manifest)), True)
            writes.drain()
        writes.close()
        make_durable(paths + writes.files)
    except BaseException:
        if ahead is not None:
            ahead.stop()  # before the writer is closed under it
        writes.close()
        abort = getattr(writer, "abort", None)
        if abort is not None:
            abort()
        raise

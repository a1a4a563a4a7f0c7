"""ObjectStorage: the ObjectStore protocol (varstore/storage/protocol.py) over one object-store bucket.

Moves bytes under one root URL (s3://, gs://, az://) through ObjectStoreClient:
positional reads are ranged GETs into caller buffers, a writer collects one
object's bytes and uploads it on `finish()` (one PUT, or a multipart upload),
`put_if` is the conditional write the manager's pointer uses. Keys are names
under the root, or full URLs under it (also as `pathlib.Path` spells them,
"s3:/bucket/key"). It must not know checkpoint formats or manifests; the
commit protocol (manifest object last) is the checkpoint layer's
(varstore/checkpoint/publish/remote.py).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


from varstore.errors import (ConditionalWriteError, CorruptCheckpointError, InvalidURLError, ObjectChangedError,
                             ObjectNotFoundError, ObjectStoreError)
from varstore.storage._ranged_reads import (MERGE_GAP_BYTES, RANGE_BYTES, BlockReadAhead, ObjectsReadAhead,
                                            split_ranges)
from varstore.storage._urls import ObjectURL, is_url, parse_url, url_from_path
from varstore.storage.object_info import ObjectInfo, split_version_tag, version_tag
from varstore.storage.object_store import ObjectStoreClient
from varstore.storage.object_io import UPLOAD_BUFFER_BYTES, ObjectReader, ObjectWriter, bytes_view
from varstore.storage.protocol import Buffer, ReadAhead
from varstore.storage.staged_upload import UploadingStorage

__all__ = ["ObjectReader", "ObjectStorage", "ObjectWriter", "UPLOAD_BUFFER_BYTES", "RANGE_BYTES", "MERGE_GAP_BYTES"]

#: Bytes of a kept-open object fetched with its size and ETag by the one GET that opens it: a page,
#: which holds a checkpoint's 512-byte index header (or another format's magic and superblock).
OPEN_HEAD_BYTES = 4 << 10


@dataclass(frozen=True)
class _Pinned:
    """A kept-open object as it was when opened: its size, its ETag and its first bytes."""

    size: int
    etag: str | None
    head: memoryview


class ObjectStorage:
    """The Storage protocol (and ConditionalStorage) over an object store, rooted at one URL.

    Args:
      url: root URL, e.g. "s3://bucket" or "s3://bucket/runs/a7".
      storage_options: endpoint, region, credentials (see varstore.storage._urls.resolve).
      client: an existing client to share (its root must be `url`).

    Attributes:
      renames: False: a checkpoint is committed by writing its manifest object last.
      client: the ObjectStoreClient (request and byte counters).
    """

    renames = False

    def __init__(self, url: str | ObjectURL, storage_options: Mapping[str, object] | None = None, *,
                 client: ObjectStoreClient | None = None) -> None:
        self.client = client or ObjectStoreClient(url, storage_options)
        self.url: str = str(self.client.url)  # the root URL (no credentials)
        # name -> (read-ahead, serve(offset, length, out) -> bool) of the read-aheads running over it
        self._read_aheads: dict[str, builtins.list[tuple[object, Callable[[int, int, memoryview], bool]]]] = {}
        self._pinned: dict[str, _Pinned] = {}  # objects kept open (see keep_open)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url!r})"

    def name_of(self, key: str) -> str:
        """The name under the root of `key`: a relative name, or a full URL (also Path-spelled) under the root.

        Raises:
          InvalidURLError: a URL outside this storage's root.
        """
        key = str(key)
        url = key if is_url(key) else url_from_path(key)
        if url is None:
            return key.strip("/")
        where, root = parse_url(url), self.client.url
        if where.bucket != root.bucket or not (not root.key or where.key == root.key
                                               or where.key.startswith(root.key + "/")):
            raise InvalidURLError(f"{url} is not under {root}")
        return where.key[len(root.key):].strip("/")

    def url_of(self, key: str) -> str:
        """The full URL of `key`, for messages."""
        return self.client.url_of(self.name_of(key))

    # ------------------------------------------------------------ the Storage protocol
    def exists(self, key: str) -> bool:
        """True when an object is stored under `key` (a kept-open object is, without a request)."""
        name = self.name_of(key)
        return name in self._pinned or self.client.exists(name)

    def size(self, key: str) -> int:
        """Bytes of the object under `key` (a kept-open object's size is known: no request).

        Raises:
          ObjectNotFoundError (a FileNotFoundError) when absent.
        """
        name = self.name_of(key)
        pinned = self._pinned.get(name)
        return self.client.size(name) if pinned is None else pinned.size

    def list(self, prefix: str = "") -> builtins.list[str]:
        """Names of the objects under `prefix` (a "directory": `prefix/...`), sorted."""
        return sorted(info.name for info in self.list_info(prefix))

    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """What the listing says about each object under `prefix` (sizes, times, etags)."""
        return self.client.list(self.name_of(prefix) if prefix else "")

    def read_range(self, key: str, offset: int, length: int, out: Buffer | None = None) -> Buffer:
        """Fills `out` (or a new bytearray) with `length` bytes at `offset` of `key`: one ranged GET.

        Raises:
          ObjectNotFoundError: nothing under `key`.
          CorruptCheckpointError: the object ends before `offset + length`.
        """
        name = self.name_of(key)
        target: Buffer = bytearray(length) if out is None else out
        view = bytes_view(target)
        if length and self._read_aheads:
            for _, serve in list(self._read_aheads.get(name, ())):
                if serve(offset, length, view[:length]):
                    return target  # from a planned block (or a failed one: read again below, raising there)
        pinned = self._pinned.get(name)
        if length and pinned is not None and offset + length <= len(pinned.head):
            view[:length] = pinned.head[offset:offset + length]  # fetched when the object was opened
            return target
        if length:
            try:
                self._get_into(name, offset, length, view[:length], pinned.etag if pinned else None)
            except (ObjectNotFoundError, ObjectChangedError):
                raise
            except ObjectStoreError as err:
                size = self.client.size(name)
                if offset + length <= size:
                    raise
                raise CorruptCheckpointError(
                    f"{self.client.url_of(name)} holds {size} bytes, {offset + length} were expected "
                    f"(truncated or partly copied); save it again") from err
        return target

    def read_all(self, key: str) -> bytes:
        """The whole object under `key` (one GET)."""
        return self.client.get(self.name_of(key))

    def writer(self, key: str, *, keep_open: bool = False) -> ObjectWriter:
        """A writer uploading `key` on finish() (see ObjectWriter); `keep_open` changes nothing here."""
        name = self.name_of(key)
        self._pinned.pop(name, None)
        return ObjectWriter(self.client, name)

    def delete(self, key: str) -> None:
        """Deletes the object under `key` and every object under `key/` (missing ones are fine)."""
        name = self.name_of(key)
        self._pinned.clear()
        names = [info.name for info in self.client.list(name)] if name else []
        if self.client.exists(name):
            names.append(name)
        self.client.delete(names)

    def read_ahead(self, key: str, extents: Sequence[tuple[int, int]], window_bytes: int) -> ReadAhead | None:
        """Fetches the planned (offset, nbytes) extents of `key` ahead of the reader; read_range takes them.

        Extents close together are coalesced into GETs of about 16 MiB, larger
        ones split (storage/_ranged_reads.py); at most the client's
        max_in_flight GETs run at once and at most `window_bytes` are held
        ahead of the reader. Each value is copied once, from the response
        buffer into the reader's target.
        """
        if not any(nbytes for _, nbytes in extents):
            return None
        name = self.name_of(key)
        pinned = self._pinned.get(name)
        etag = pinned.etag if pinned else None

        def fetch(offset: int, length: int) -> memoryview:
            return self.client.get_range_view(name, offset, length, etag=etag)

        ahead = BlockReadAhead(fetch, extents, window_bytes, self.client.max_in_flight, range_bytes=RANGE_BYTES,
                               gap_bytes=MERGE_GAP_BYTES, on_stop=self._forget)
        with self._lock:
            self._read_aheads.setdefault(name, []).append((ahead, ahead.read_into))
        return ahead

    def read_ahead_objects(self, objects: Sequence[tuple[str, int]], window_bytes: int) -> ReadAhead | None:
        """Fetches whole objects ((key, nbytes) in the order they will be read: Zarr chunk objects) ahead of
        the reader, at most the client's max_in_flight GETs and `window_bytes` ahead; read_range takes them.

        Objects larger than 16 MiB are fetched in pieces; each value is copied once into its target.
        An object is dropped once a read covered it whole.
        """
        planned = [(self.name_of(key), int(nbytes)) for key, nbytes in objects if nbytes]
        if not planned:
            return None
        client = self.client
        ahead = ObjectsReadAhead(client.get_range_view, planned, window_bytes, client.max_in_flight,
                                 range_bytes=RANGE_BYTES, on_stop=self._forget)
        with self._lock:
            for name in ahead.names:
                self._read_aheads.setdefault(name, []).append((ahead, functools.partial(ahead.read_into, name)))
        return ahead

    def _forget(self, ahead: object) -> None:
        with self._lock:
            for name, running in list(self._read_aheads.items()):
                running[:] = [entry for entry in running if entry[0] is not ahead]
                if not running:
                    del self._read_aheads[name]

    def _get_into(self, name: str, offset: int, length: int, view: memoryview, etag: str | None = None) -> None:
        """One ranged GET into `view`, or (above 16 MiB) concurrent GETs of 16 MiB pieces (at most 4 at
        once), each copied into its slice; with `etag`, every GET carries If-Match."""
        pieces = split_ranges(offset, length, RANGE_BYTES)
        if len(pieces) == 1:
            view[:length] = self.client.get_range_view(name, offset, length, etag=etag)
            return

        def fetch(piece: tuple[int, int]) -> None:
            start, nbytes = piece
            view[start - offset:start - offset + nbytes] = self.client.get_range_view(name, start, nbytes, etag=etag)

        # at most 64 MiB of responses at once (4 pieces of 16 MiB): a read holds its target plus that
        workers = max(1, min(len(pieces), self.client.max_in_flight, UPLOAD_BUFFER_BYTES // RANGE_BYTES))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="varstore-get") as pool:
            for _ in pool.map(fetch, pieces):
                pass

    def keep_open(self, key: str) -> None:
        """Pins the object under `key` as it is now, with ONE ranged GET of its first OPEN_HEAD_BYTES
        (no HEAD): until close(), exists/size answer from it, reads of those first bytes (the index
        header) make no request, and every other read of it carries If-Match with the ETag it had,
        so a save that replaces it meanwhile fails the read with ObjectChangedError instead of
        mixing two checkpoints' bytes.

        The reader of an HDF5 checkpoint keeps its object open, as a local file is kept open.

        Raises:
          ObjectNotFoundError: nothing under `key`.
        """
        name = self.name_of(key)
        if name not in self._pinned:
            info, head = self.client.get_head(name, OPEN_HEAD_BYTES)
            self._pinned[name] = _Pinned(info.size, info.etag, head)

    def close(self) -> None:
        """Forgets the kept-open objects; the storage stays usable."""
        self._pinned.clear()

    # ------------------------------------------------------------ ConditionalStorage
    def version(self, key: str) -> str | None:
        """The version tag of `key` (its ETag, with the generation on GCS), or None when nothing is there."""
        name = self.name_of(key)
        try:
            info = self.client.head(name)
        except ObjectNotFoundError:
            return None
        return version_tag(info.etag, info.version)

    def put_if(self, key: str, data: bytes, match: str | None) -> str:
        """Writes `data` only if `key` is still at version `match` (None: only if absent); returns the new tag.

        Args:
          match: a tag from `version` or an earlier `put_if` (an ETag, on GCS with the object's
            generation: GCS matches a conditional replace on the generation).

        Raises:
          FileExistsError: the condition failed (another writer got there first); chained from
            ConditionalWriteError naming the URL.
        """
        name = self.name_of(key)
        self._pinned.pop(name, None)
        etag, version = (None, None) if match is None else split_version_tag(match)
        try:
            new_etag, new_version = self.client.put_if_version(name, data, etag, version)
        except ConditionalWriteError as err:
            raise FileExistsError(str(err)) from err
        return version_tag(new_etag, new_version) or ""

    # ------------------------------------------------------------ beyond the protocol
    def put(self, key: str, data: Buffer) -> str | None:
        """One PUT of a small object; returns its ETag."""
        self._pinned.clear()  # any write forgets the kept-open sizes
        return self.client.put(self.name_of(key), bytes_view(data))

    def put_many(self, items: Iterable[tuple[str, Buffer]]) -> int:
        """Small objects (Zarr chunks) uploaded concurrently, at most the client's max_in_flight at once."""
        self._pinned.clear()
        return self.client.put_many((self.name_of(key), bytes_view(data)) for key, data in items)

    def upload_file(self, key: str, path: Path) -> str | None:
        """Uploads a local file as `key`: one PUT up to a part, else a multipart upload holding at most
        UPLOAD_BUFFER_BYTES of parts (the parts in flight, the one being filled, the one being read)."""
        name = self.name_of(key)
        self._pinned.pop(name, None)
        if path.stat().st_size <= self.client.part_size:
            return self.client.put(name, path.read_bytes())
        in_flight = max(1, min(self.client.max_in_flight, UPLOAD_BUFFER_BYTES // self.client.part_size - 2))
        return self.client.put_multipart(name, path, max_in_flight=in_flight)

    def download_tree(self, prefix: str, target: Path, names: Sequence[str] | None = None) -> int:
        """Copies every object under `prefix` (or the given names under it) into directory `target`,
        concurrently (at most the client's max_in_flight GETs); returns the bytes copied."""
        root = self.name_of(prefix)
        if names is None:
            names = [info.name for info in self.client.list(root)]
        total = 0

        def fetch(name: str) -> int:
            relative = name[len(root):].lstrip("/") if root else name
            local = target.joinpath(*relative.split("/"))
            local.parent.mkdir(parents=True, exist_ok=True)
            data = self.client.get(name)
            local.write_bytes(data)
            return len(data)

        with ThreadPoolExecutor(max_workers=self.client.max_in_flight, thread_name_prefix="varstore-get") as pool:
            for nbytes in pool.map(fetch, names):
                total += nbytes
        return total

    def open_reader(self, key: str) -> ObjectReader:
        """A seekable file object over `key` (ranged GETs). Raises ObjectNotFoundError when absent."""
        name = self.name_of(key)
        pinned = self._pinned.get(name)
        if pinned is None:
            return ObjectReader(self.client, name)
        return ObjectReader(self.client, name, size=pinned.size, etag=pinned.etag)

    def sweep_uploads(self, prefix: str = "", older_than: float = 3600.0,
                      now: _dt.datetime | None = None) -> builtins.list[str]:
        """Aborts incomplete multipart uploads under `prefix` older than `older_than` seconds (at `now`, UTC)."""
        return self.client.abort_incomplete_uploads(self.name_of(prefix) if prefix else "", older_than, now=now)

    @property
    def part_size(self) -> int:
        """Bytes of one multipart part: larger objects are uploaded in parts, smaller ones with one PUT."""
        return self.client.part_size

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Deletes exactly these objects in one batch (no listing); a missing one is fine."""
        self._pinned.clear()
        self.client.delete([self.name_of(key) for key in keys])

    def list_children(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectInfo]]:
        """One level under `prefix` ("directory" listing): (the names of the sub-prefixes, the objects there)."""
        return self.client.list_children(self.name_of(prefix) if prefix else "")

    def staged_writer(self, root: Path, name: str) -> UploadingStorage:
        """A Storage for a save staged in local directory `root`: whole files (chunks, zarr.json) written
        through it go straight to objects under `name`; pieces written in parts stay in `root` to upload."""
        return UploadingStorage(root, self, name)


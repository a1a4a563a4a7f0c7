"""The storage seam: where a checkpoint's bytes go (Storage), and what a storage without rename adds (ObjectStore).

`Storage` is what the checkpoint engines (varstore/checkpoint/) use to read and
write raw bytes: positional reads into caller buffers, positional writes,
existence, sizes, listing, deletion, read-ahead hints. What the bytes mean (HDF5
or Zarr structure) is the backends' business (varstore/backends/); what is
written (manifest, packed blob) is the checkpoint layer's. This module only
states the contract; it does no I/O and imports no client library.

Keys are "/"-separated names relative to the storage's root ("model.zarr/w/c/0").
`LocalStorage` (local.py) also takes absolute paths, as the backends' RawExtent
reports them.

The contract an implementation must keep (LocalStorage today; an object store
such as s3://, gs://, az:// through obstore next):

- Reads are positional and exact: `read_range` fills exactly `length` bytes or
  raises CorruptCheckpointError naming the key (a short object / truncated
  file); a missing key raises FileNotFoundError. Reads of different keys and
  ranges may run concurrently from several threads. An object store serves
  them as ranged GETs (retried with backoff); a local file as preadv.
- Writes go through a `StorageWriter` for one key: `write_at(offset, data)`
  any number of times, then `finish()`; `abort()` discards. Offsets may come in
  any order locally; an object store may require them in increasing order and
  contiguous (it uploads a multipart upload part by part, buffering at most
  one part), so the engines write each key front to back. Nothing written
  through a writer is visible under its key before `finish()` returns on an
  object store; locally it is, which is why local saves write into a
  temporary sibling (see "commit" below).
- `finish()` hands every byte over: locally written to the page cache and the
  descriptor closed (durability is the commit's: it fsyncs every file of the
  container, those the format library wrote included); on an object store the
  multipart upload is completed (durable once it returns). No fsync there.
- Commit: `renames` says how a new checkpoint becomes visible. True (local
  file systems): the checkpoint layer writes into a temporary sibling, fsyncs
  and renames it over the final name (only varstore/checkpoint/publish/atomic.py does
  temporaries, fsync and rename). False (object stores: no rename, no fsync):
  data objects are written under the final key and the manifest object is
  written LAST, as the commit; a checkpoint without its manifest object is
  never listed, opened or restored, and abandoned data objects are swept by
  the next save. Pointers that several writers update (the manager's
  "latest") use `put_if(key, data, match)`: If-None-Match when `match` is
  None, If-Match on the version tag otherwise, so two writers never lose an
  update (`ConditionalStorage`). LocalStorage needs no `put_if` (the manager
  holds a file lock).
- `read_ahead(key, extents, window_bytes)` is a hint: the storage may start
  fetching the listed (offset, nbytes) extents, at most `window_bytes` ahead
  of the reader's progress (reported with `ReadAhead.done(offset)`), into the
  page cache locally or into bounded buffers on an object store. It returns
  None when it has nothing to offer.
- `close()` releases cached handles (descriptors, connections); the storage
  may be used again afterwards (handles reopen).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Union, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import
    import numpy.typing as npt

    from varstore.storage.object_info import ObjectInfo

__all__ = ["Storage", "StorageWriter", "ReadAhead", "ConditionalStorage", "ObjectStore", "StagedWriter", "Buffer"]

#: Bytes handed to or filled by a storage: bytes-like objects or C-contiguous NumPy arrays (their raw bytes).
Buffer = Union[bytes, bytearray, memoryview, "npt.NDArray[np.generic]"]


class ReadAhead(Protocol):
    """A running read-ahead over planned extents of one key (see Storage.read_ahead)."""

    def done(self, offset: int) -> None:
        """Says the planned extent starting at byte `offset` was read (the window moves on)."""

    def stop(self) -> None:
        """Ends the read-ahead and waits for its helper (call before the storage is closed)."""


class StorageWriter(Protocol):
    """Writes one key's bytes: `write_at` in any order (front to back for object stores), then `finish`."""

    key: str

    def reserve(self, nbytes: int) -> None:
        """Hints the final size (bytes) so space can be allocated at once; best effort, may do nothing."""

    def write_at(self, offset: int, data: Buffer) -> None:
        """Writes all of `data` (bytes-like, or a C-contiguous array's bytes) at byte `offset`."""

    def finish(self) -> None:
        """Hands every byte over (see the module docstring); the writer is unusable afterwards."""

    def abort(self) -> None:
        """Discards what this writer did as far as the storage can (never raises)."""


@runtime_checkable
class Storage(Protocol):
    """Where bytes go: a local directory tree today, an object-store prefix next.

    Attributes:
      url: where this storage is rooted, for messages ("file:///runs/a7", "s3://bucket/runs/a7").
      renames: True when new checkpoints are committed by an atomic rename
        (local file systems); False when the manifest object, written last, is the commit.
    """

    url: str
    renames: bool

    def exists(self, key: str) -> bool:
        """True when `key` holds an object or file (or, locally, a directory)."""

    def size(self, key: str) -> int:
        """Bytes stored under `key`.

        Raises:
          FileNotFoundError: nothing under `key`.
        """

    def list(self, prefix: str) -> list[str]:
        """Keys under `prefix` ("" for all), sorted; directories are not keys."""

    def read_range(self, key: str, offset: int, length: int, out: Buffer | None = None) -> Buffer:
        """Reads `length` bytes at byte `offset` of `key` into `out` (a writable buffer of
        exactly `length` bytes) or into a new bytearray; returns the buffer filled.

        Raises:
          FileNotFoundError: nothing under `key`.
          CorruptCheckpointError: `key` ends before `offset + length` (truncated), naming it.
        """

    def read_all(self, key: str) -> bytes:
        """Every byte stored under `key`.

        Raises:
          FileNotFoundError: nothing under `key`.
        """

    def writer(self, key: str, *, keep_open: bool = False) -> StorageWriter:
        """A writer for `key` (created, or overwritten in place locally).

        `keep_open` says several writers will follow for the same key (a shared
        single-file container), so a local implementation keeps one descriptor.
        """

    def delete(self, key: str) -> None:
        """Removes `key` (locally also a directory tree); a missing key is fine."""

    def read_ahead(self, key: str, extents: Sequence[tuple[int, int]], window_bytes: int) -> ReadAhead | None:
        """Starts fetching planned (offset, nbytes) extents of `key` ahead of the reader; see the module docstring."""

    def keep_open(self, key: str) -> None:
        """Says `key` will be read many times, mostly front to back (a single-file checkpoint):
        keep its handle (locally a descriptor, with a sequential-read hint) until close().

        Raises:
          FileNotFoundError: nothing under `key`.
        """

    def close(self) -> None:
        """Releases cached handles; the storage stays usable."""


@runtime_checkable
class ConditionalStorage(Storage, Protocol):
    """A Storage that can replace small objects conditionally (object stores: the manager's "latest" pointer)."""

    def version(self, key: str) -> str | None:
        """The current version tag of `key` (opaque: an ETag, on GCS with the generation), or None when absent."""

    def put_if(self, key: str, data: bytes, match: str | None) -> str:
        """Writes `data` under `key` only if its version is still `match` (None: only if absent).

        Returns:
          The new version tag.

        Raises:
          FileExistsError: the condition failed (another writer got there first).
        """


class StagedWriter(Storage, Protocol):
    """The Storage an object store gives a directory save (ObjectStore.staged_writer).

    Attributes:
      uploaded: the object names uploaded so far (their files are not under the staging root).
    """

    uploaded: list[str]

    def wait(self) -> None:
        """Returns once every upload started has finished.

        Raises:
          ObjectStoreError: an upload failed (the first failure, naming its URL).
        """


@runtime_checkable
class ObjectStore(ConditionalStorage, Protocol):
    """A storage without rename over one object-store bucket: what the manifest-last commit, the sweep,
    the manager and staged reads need beyond ConditionalStorage (every method below is in the contract suite).

    Keys may be names relative to the root or full URLs under it (also as `pathlib.Path` spells them).
    """

    def name_of(self, key: str) -> str:
        """The name under the root of `key` ('/'-separated, no leading '/').

        Raises:
          InvalidURLError: a URL outside this storage's root.
        """

    def url_of(self, key: str) -> str:
        """The full URL of `key` (no credentials), for messages."""

    def list_info(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """What the listing says about every object under `prefix` (name, size, last_modified, etag, version)."""

    def put(self, key: str, data: Buffer) -> str | None:
        """One unconditional PUT of a small object; returns its version tag (ETag) when the server sends one."""

    def put_many(self, items: Iterable[tuple[str, Buffer]]) -> int:
        """Small objects uploaded concurrently (bounded in flight); returns how many."""

    def upload_file(self, key: str, path: Path) -> str | None:
        """Uploads local file `path` as `key` with bounded memory (multipart above one part); visible whole or not at all."""

    def download_tree(self, prefix: str, target: Path, names: Sequence[str] | None = None) -> int:
        """Copies the objects under `prefix` (or the listed `names` under it) into directory `target`; returns bytes."""

    def read_ahead_objects(self, objects: Sequence[tuple[str, int]], window_bytes: int) -> ReadAhead | None:
        """Fetches whole objects ((name, nbytes) in read order) concurrently, at most `window_bytes` ahead."""

    def open_reader(self, key: str) -> io.RawIOBase:
        """A seekable read-only file object over `key` (ranged GETs), for format libraries (h5py).

        Raises:
          FileNotFoundError: nothing under `key`.
        """

    @property
    def part_size(self) -> int:
        """Bytes of one multipart part: an object up to this size is uploaded with one PUT."""

    def delete_objects(self, keys: Sequence[str]) -> None:
        """Deletes exactly these objects in one batch, without listing (a missing one is fine)."""

    def list_children(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectInfo]]:
        """One level under `prefix`: (the names of the sub-prefixes, what the listing says of the objects there)."""

    def sweep_uploads(self, prefix: str = "", older_than: float = 3600.0,
                      now: _dt.datetime | None = None) -> builtins.list[str]:
        """Aborts incomplete multipart uploads under `prefix` older than `older_than` seconds (measured
        at `now`, UTC; default the current time); returns their names."""

    def staged_writer(self, root: Path, name: str) -> StagedWriter:
        """A Storage for a save laid out in local staging directory `root` (standing for object prefix
        `name`): whole files written through it go straight to objects, concurrently and with bounded
        memory; files written in pieces stay under `root` for `upload_file`."""

"""UploadingStorage: a save's staging directory whose whole-file writes go straight to an object store.

A Zarr save to a bucket lays its container out in a local staging directory
(checkpoint/publish/remote.py). Most of that container's files are written in ONE
positional write at offset 0: each chunk file (a variable's buffer, from the
write engine), each array's and group's zarr.json (from the backend, which
makes no local directories for them: `uploads`). This storage turns exactly
those writes into PUTs of that buffer (no copy, no local file, no read-back)
while the engine goes on with the next variable; every other write (a key
written in several pieces and kept open, e.g. the packed blob) lands in the
staging file as LocalStorage would write it, for the caller to upload
afterwards with the commit object.

Requests in flight never exceed the client's max_in_flight: small objects take
one slot each and run in the background, at most UPLOAD_BUFFER_BYTES of them
queued ahead of the server (on top of the variables' own memory, which an
in-flight PUT reads in place); an object larger than one part is a multipart
upload that takes every slot (its parts are the requests) and is done before
its writer's finish() returns.

Knows nothing about formats or commits: the caller decides which keys exist and
which object is written last.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from varstore.errors import ObjectStoreError
from varstore.storage.local import LocalStorage, LocalWriter, bytes_of
from varstore.storage.object_io import UPLOAD_BUFFER_BYTES
from varstore.storage.object_store import ObjectStoreClient
from varstore.storage.protocol import Buffer, ReadAhead, StorageWriter

__all__ = ["UploadingStorage"]


class _UploadSlots:
    """max_in_flight request slots and a byte budget for queued small objects, shared by one save."""

    def __init__(self, slots: int, budget: int) -> None:
        self.slots = slots
        self._free = slots
        self._bytes = 0
        self._budget = budget
        self._changed = threading.Condition()

    def take(self, count: int, nbytes: int) -> None:
        with self._changed:
            # one object always goes, however large; more only inside the budget
            self._changed.wait_for(lambda: self._free >= count and (self._bytes == 0 or self._bytes + nbytes <= self._budget))
            self._free -= count
            self._bytes += nbytes

    def give(self, count: int, nbytes: int) -> None:
        with self._changed:
            self._free += count
            self._bytes -= nbytes
            self._changed.notify_all()


class _DirectWriter:
    """One key: a single write at offset 0 is PUT from the caller's buffer on finish(); anything else
    is spooled into the staging file (a LocalStorage writer) and left there for the caller."""

    def __init__(self, owner: UploadingStorage, key: str) -> None:
        self.key = key
        self._owner = owner
        self._whole: memoryview | None = None
        self._local: LocalWriter | None = None  # the staging file's writer, once this key is not one whole write

    def reserve(self, nbytes: int) -> None:
        """Nothing to reserve (the protocol's hint)."""

    def write_at(self, offset: int, data: Buffer) -> None:
        if self._local is None and self._whole is None and offset == 0:
            self._whole = bytes_of(data)
            return
        local = self._local
        if local is None:
            local = self._local = self._owner.staging_writer(self.key)
            if self._whole is not None:
                local.write_at(0, self._whole)
                self._whole = None
        local.write_at(offset, data)

    def finish(self) -> None:
        if self._local is not None:
            self._local.finish()
        elif self._whole is not None:
            self._owner.upload(self.key, self._whole)
        else:  # an empty file: created locally, uploaded with the metadata
            self._owner.staging_writer(self.key).finish()
        self._whole = None

    def abort(self) -> None:
        if self._local is not None:
            self._local.abort()
        self._whole = None


class _Remote(Protocol):
    """What the uploads need of the object storage (ObjectStorage): its client and its URLs."""

    client: ObjectStoreClient

    def url_of(self, key: str) -> str: ...


class UploadingStorage:
    """The Storage protocol for writing a staging directory whose whole files are uploaded at once.

    Args:
      root: the local staging directory standing for `name` (keys are paths under it).
      remote: the object storage the files go to.
      name: the object name `root` stands for (a key `root/a/b` becomes object `name/a/b`).

    Attributes:
      uploaded: the object names uploaded so far (their files do not exist under `root`).
    """

    renames = True  # a staging directory: nothing written here is a commit
    #: whole files written here go to the object store at once: a backend may skip making local directories
    uploads = True

    def __init__(self, root: Path, remote: _Remote, name: str) -> None:
        self.url = remote.url_of(name)
        self.local = LocalStorage()
        self.local.writeback = False  # staging files are read back for the upload, never made durable
        self.uploaded: list[str] = []
        self._root = os.fspath(root)
        self._remote = remote
        self._name = name
        client = remote.client
        self._slots = _UploadSlots(client.max_in_flight, UPLOAD_BUFFER_BYTES)
        self._pool: ThreadPoolExecutor | None = None
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self._failed: BaseException | None = None

    def _object_name(self, key: str) -> str:
        relative = os.path.relpath(os.fspath(key), self._root)
        if relative.startswith(os.pardir):
            raise ObjectStoreError(f"{key} is not under the staging directory {self._root} of {self.url}; "
                                   f"nothing outside it is uploaded")
        return f"{self._name}/{relative.replace(os.sep, '/')}"

    def upload(self, key: str, data: memoryview) -> None:
        """Uploads `data` (read in place until it completes) as the object for `key`.

        An object of at most one part is started and left to run (at most UPLOAD_BUFFER_BYTES of
        them at once); a larger one is uploaded before this returns (it takes every request slot
        anyway), so the caller may release its memory afterwards (an async save's snapshot budget).
        Blocks while the save's requests in flight or queued bytes are at their bound.
        """
        name = self._object_name(key)
        client = self._remote.client
        large = len(data) > client.part_size
        count = self._slots.slots if large else 1
        queued = 0 if large else len(data)
        if self._failed is not None:
            raise self._failed  # stop at the first failed upload instead of sending the rest
        self._slots.take(count, queued)
        with self._lock:
            self.uploaded.append(name)
            if large:
                future: Future[None] | None = None
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._slots.slots, thread_name_prefix="varstore-upload")
                future = self._pool.submit(self._put, name, data, count, queued)
                self._futures.append(future)
        if future is None:
            self._put(name, data, count, queued)  # multipart: its parts are the requests in flight

    def _put(self, name: str, data: memoryview, count: int, queued: int) -> None:
        """Sends one object (multipart above one part), then gives back its `count` slots and `queued` bytes."""
        client = self._remote.client
        try:
            if len(data) > client.part_size:
                part = client.part_size

                def parts() -> Iterator[memoryview]:
                    return (data[start:start + part] for start in range(0, len(data), part))

                client.put_multipart(name, parts, max_in_flight=count)
            else:
                client.put(name, data)
        except BaseException as err:
            self._failed = self._failed or err
            raise
        finally:
            self._slots.give(count, queued)

    def wait(self) -> None:
        """Waits for every upload started; raises the first failure (ObjectStoreError, naming the URL)."""
        with self._lock:
            futures, self._futures = self._futures, []
        first: BaseException | None = None
        for future in futures:
            error = future.exception()
            first = first or error
        if first is not None:
            raise first

    # ------------------------------------------------------------ the Storage protocol (writes)
    def writer(self, key: str, *, keep_open: bool = False) -> StorageWriter:
        """A writer for `key`: kept-open keys (written in pieces) are staged locally, others may upload."""
        if keep_open:
            return self.staging_writer(key, keep_open=True)
        return _DirectWriter(self, key)

    def staging_writer(self, key: str, keep_open: bool = False) -> LocalWriter:
        """A writer of the staging file for `key`, its directory made first (a backend writing through an
        uploading storage need not make the directories of files that never land here)."""
        os.makedirs(os.path.dirname(os.fspath(key)), exist_ok=True)
        return self.local.writer(key, keep_open=keep_open)

    def close(self) -> None:
        """Waits for the uploads in flight (at most max_in_flight; their errors are wait()'s to
        report), then releases descriptors."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.local.close()

    # ------------------------------------------------------------ reads: the staging files only
    def exists(self, key: str) -> bool:
        return self.local.exists(key)

    def size(self, key: str) -> int:
        return self.local.size(key)

    def list(self, prefix: str) -> builtins.list[str]:
        return self.local.list(prefix)

    def read_range(self, key: str, offset: int, length: int, out: Buffer | None = None) -> Buffer:
        return self.local.read_range(key, offset, length, out)

    def read_all(self, key: str) -> bytes:
        return self.local.read_all(key)

    def delete(self, key: str) -> None:
        self.local.delete(key)

    def read_ahead(self, key: str, extents: Sequence[tuple[int, int]], window_bytes: int) -> ReadAhead | None:
        return None

    def keep_open(self, key: str) -> None:
        self.local.keep_open(key)

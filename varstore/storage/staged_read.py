"""StagedZarrStorage: a directory checkpoint on an object store read through a local copy of its metadata.

Keys under the local root are read from the bytes already fetched (metadata a
reader opens, held in memory), from a local file when one is there, and
otherwise from the object they stand for, with ranged GETs; sizes come from
one listing, so no HEAD is needed. Read-only.
Knows nothing about which files are metadata (checkpoint/publish/remote.py decides
what is copied).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from varstore.errors import CheckpointError, CheckpointNotFoundError, CorruptCheckpointError
from varstore.storage.local import LocalStorage, bytes_of
from varstore.storage.protocol import Buffer, ObjectStore, ReadAhead, StorageWriter

__all__ = ["StagedZarrStorage"]


class StagedZarrStorage:
    """Reads a Zarr checkpoint on an object store whose metadata was copied into a local directory.

    A key under that directory is read from the local copy when it is there
    (every zarr.json, the manifest's chunks) and otherwise from the object it
    stands for, with ranged GETs (variable chunks, the packed blob); sizes come
    from the listing, so no HEAD is needed. Read-only.
    """

    renames = True  # never written through

    def __init__(self, local_root: Path, remote: ObjectStore, name: str, sizes: dict[str, int],
                 held: Mapping[str, bytes] | None = None) -> None:
        self.url = remote.url_of(name)
        self._root = str(local_root)
        self._remote = remote
        self._name = name
        self._sizes = sizes
        self._held = held or {}  # {path under the root: bytes} fetched already (metadata, the manifest)
        self._local = LocalStorage()

    def _remote_name(self, key: str) -> str | None:
        """The object a key under the local root stands for, when its bytes are not local."""
        key = os.fspath(key)
        if os.path.exists(key) or not (key == self._root or key.startswith(self._root + os.sep)):
            return None
        relative = key[len(self._root):].lstrip(os.sep).replace(os.sep, "/")
        return f"{self._name}/{relative}" if relative else self._name

    def exists(self, key: str) -> bool:
        name = self._remote_name(key)
        return self._local.exists(key) if name is None else name in self._sizes

    def size(self, key: str) -> int:
        name = self._remote_name(key)
        if name is None:
            return self._local.size(key)
        if name not in self._sizes:
            raise CheckpointNotFoundError(f"{self._remote.url_of(name)} is missing (a partial copy?)")
        return self._sizes[name]

    def list(self, prefix: str) -> list[str]:
        return sorted(self._sizes)

    def _held_bytes(self, name: str) -> bytes | None:
        return self._held.get(name[len(self._name) + 1:]) if name.startswith(self._name + "/") else None

    def read_range(self, key: str, offset: int, length: int, out: Buffer | None = None) -> Buffer:
        name = self._remote_name(key)
        if name is None:
            return self._local.read_range(key, offset, length, out)
        held = self._held_bytes(name)
        if held is None:
            return self._remote.read_range(name, offset, length, out)
        if offset + length > len(held):
            raise CorruptCheckpointError(f"{self.url}: {name} ends at byte {len(held)}, before {offset + length}")
        if out is None:
            return bytearray(held[offset:offset + length])
        bytes_of(out)[:] = held[offset:offset + length]
        return out

    def read_all(self, key: str) -> bytes:
        name = self._remote_name(key)
        if name is None:
            return self._local.read_all(key)
        held = self._held_bytes(name)
        return self._remote.read_all(name) if held is None else held

    def writer(self, key: str, *, keep_open: bool = False) -> StorageWriter:
        raise CheckpointError(f"{self.url} is open for reading only")

    def delete(self, key: str) -> None:
        raise CheckpointError(f"{self.url} is open for reading only")

    def read_ahead(self, key: str, extents: Sequence[tuple[int, int]], window_bytes: int) -> ReadAhead | None:
        return None

    def read_ahead_files(self, files: Sequence[tuple[str, int]], window_bytes: int) -> ReadAhead | None:
        """Fetches the chunk objects behind `files` ((key under the local root, nbytes) in read order)
        concurrently ahead of the reader (ObjectStore.read_ahead_objects); local and held files are skipped."""
        objects = []
        for key, nbytes in files:
            name = self._remote_name(key)
            if name is not None and name in self._sizes and self._held_bytes(name) is None:
                objects.append((name, min(int(nbytes), self._sizes[name])))
        return self._remote.read_ahead_objects(objects, window_bytes) if len(objects) > 1 else None

    def keep_open(self, key: str) -> None:
        if self._remote_name(key) is None:
            self._local.keep_open(key)

    def close(self) -> None:
        self._local.close()

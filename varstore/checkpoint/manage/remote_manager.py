"""The CheckpointManager's directory on an object store: listing, the "latest" pointer by conditional writes.

A manager whose directory is a URL (s3://bucket/runs/a7) keeps the same
layout as on a local disk ("<name>-<step>.h5" objects or ".zarr" prefixes and
a JSON pointer "latest") but has no rename and no lock: each save writes a new
checkpoint (committed as remote.py says), then moves the pointer with a
conditional write: If-None-Match when there is none yet, If-Match on the
ETag it read otherwise. A writer that loses the race re-reads the pointer and
applies its change again, and "latest" only moves forward (to a higher step),
so two writers never lose an update. Knows nothing about retention rules
(manager.py computes the next state); never writes checkpoint bytes.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from varstore.checkpoint.publish.remote import COMMIT_OBJECT, sweep
from varstore.errors import CheckpointError
from varstore.storage import ObjectStore, is_remote, object_store_for, storage_for
from varstore.storage import url_from_path

__all__ = ["RemoteDirectory", "remote_directory", "POINTER_ATTEMPTS"]

#: How many times a pointer update is tried against other writers before giving up.
POINTER_ATTEMPTS = 50


class RemoteDirectory:
    """A manager's directory under one object-store URL.

    Args:
      url: the directory ("s3://bucket/runs/a7").
      storage_options: endpoint, region, credentials.
    """

    def __init__(self, url: str, storage_options: Mapping[str, object] | None = None) -> None:
        storage, key = object_store_for(url, storage_options)
        self.storage: ObjectStore = storage
        self.url: str = key.rstrip("/")
        self.prefix: str = storage.name_of(key)

    def location(self, name: str) -> str:
        """The URL of the checkpoint (or object) `name` in this directory."""
        return f"{self.url}/{name}"

    def names(self) -> list[str]:
        """Names directly in the directory that are committed checkpoints or single objects
        (a Zarr prefix counts only with its commit object)."""
        directories, objects = self.storage.list_children(self.prefix)
        found = [info.name.rsplit("/", 1)[-1] for info in objects]
        for directory in directories:
            if self.storage.exists(f"{directory}/{COMMIT_OBJECT}"):
                found.append(directory.rsplit("/", 1)[-1])
        return sorted(found)

    def exists(self, name: str) -> bool:
        """True when `name` is a committed checkpoint here (an object, or a prefix with its commit object)."""
        key = f"{self.prefix}/{name}" if self.prefix else name
        return self.storage.exists(f"{key}/{COMMIT_OBJECT}") or self.storage.exists(key)

    def _pointer(self, pointer: str) -> str:
        return f"{self.prefix}/{pointer}" if self.prefix else pointer

    def read_state(self, pointer: str) -> tuple[dict[str, Any], str | None]:
        """The pointer's JSON state ({} when absent or unreadable) and its ETag (None when absent)."""
        key = self._pointer(pointer)
        version = self.storage.version(key)
        if version is None:
            return {}, None
        try:
            state = json.loads(self.storage.read_all(key))
        except (FileNotFoundError, ValueError, RecursionError):  # nested too deep: checked_state refuses {}
            return {}, version
        return (state if isinstance(state, dict) else {}), version

    def update_state(self, pointer: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Applies `change` to the pointer's state with a conditional write, retrying when another writer won.

        `change(state)` must compute the new state from the state it is given
        (it is called again with the other writer's state after a lost race).

        Returns:
          The state written.

        Raises:
          CheckpointError: still losing after POINTER_ATTEMPTS tries (naming the pointer's URL).
        """
        for attempt in range(POINTER_ATTEMPTS):
            state, version = self.read_state(pointer)
            new = change(dict(state))
            try:
                self.storage.put_if(self._pointer(pointer), json.dumps(new, indent=1).encode(), version)
                return new
            except FileExistsError:
                time.sleep(random.uniform(0, min(1.0, 0.01 * 2 ** attempt)))
        raise CheckpointError(f"could not update {self.location(pointer)}: other writers kept changing it "
                              f"({POINTER_ATTEMPTS} conditional writes lost); try again")

    def delete(self, name: str) -> None:
        """Removes checkpoint `name`: its commit object first (it stops being listed), then the rest."""
        key = f"{self.prefix}/{name}" if self.prefix else name
        self.storage.delete_objects([f"{key}/{COMMIT_OBJECT}"])
        self.storage.delete(key)

    def sweep(self) -> list[str]:
        """Removes abandoned uploads and unfinished saves older than the grace period (see remote.sweep)."""
        return sweep(self.storage, self.prefix)


def remote_directory(directory: object, storage_options: Mapping[str, object] | None = None) -> RemoteDirectory | None:
    """A RemoteDirectory when `directory` is an object-store URL, else None (a local directory)."""
    if not is_remote(directory):
        return None
    url = url_from_path(directory)
    return RemoteDirectory(str(url), storage_options)

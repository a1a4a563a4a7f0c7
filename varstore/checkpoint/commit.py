"""Publishing a new checkpoint: write it where the storage's commit protocol says, then make it visible.

On a storage that renames (a local file system, `Storage.renames`), the
checkpoint is written into a temporary sibling, every file of it is fsynced
and it is renamed over the final name (atomic.py does temporaries, fsync and
rename). A storage without rename (an object store) commits by writing the
manifest object last instead (see varstore/storage/protocol.py), which
remote.py implements. Decides
nothing about what is written (plan.py, write_engine.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from varstore.checkpoint import atomic
from varstore.checkpoint.manifest import Record
from varstore.checkpoint.remote import publish_remote
from varstore.checkpoint.write_engine import write_container
from varstore.errors import CheckpointError, VarstoreError
from varstore.storage import Storage, storage_for
from varstore.storage.object_storage import ObjectStorage

__all__ = ["publish"]


def _not_durable(paths: list[Path]) -> None:
    """The durability step of a save(..., durable=False): nothing."""


def publish(final: Path, fmt: str, entries: list[Any], records: list[Record], packed_nbytes: int,
            header: dict[str, Any], checksum: bool, release: Callable[[int], None] | None = None,
            storage: Storage | None = None, durable: bool = True) -> Path:
    """Writes a planned checkpoint (see write_engine.write_container) and commits it under `final`.

    Either the whole new checkpoint is under `final` afterwards, or (on any
    error) `final` is as it was and no temporary is left. `durable=False`
    skips every fsync and the storage's early write-back (the rename stays
    atomic for a crash of the process, not for a power loss).

    Returns:
      `final`.

    Raises:
      CheckpointError: the file system refused (naming `final` and the cause),
        or the storage cannot commit without rename yet.
      Any error of writing (as save_entries).
    """
    storage = storage_for(final)[0] if storage is None else storage
    if not storage.renames:
        if not isinstance(storage, ObjectStorage):
            raise CheckpointError(f"cannot write checkpoint '{final}' to {storage.url}: it commits without rename "
                                  f"but is not an object store varstore knows how to commit to")
        publish_remote(str(final), storage, fmt, entries, records, packed_nbytes, header, checksum, release)
        return final
    try:
        writeback = getattr(storage, "writeback", None)
        if not durable and writeback is not None:
            storage.writeback = False  # type: ignore[attr-defined]  # page-cache speed: nothing pushed early
        try:
            with atomic.atomic_path(final, durable=durable) as tmp:
                write_container(tmp, fmt, entries, records, packed_nbytes, header, checksum, release,
                                make_durable=atomic.fsync_paths if durable else _not_durable, storage=storage)
        finally:
            if writeback is not None:
                storage.writeback = writeback  # type: ignore[attr-defined]
    except VarstoreError:
        raise
    except OSError as err:
        raise CheckpointError(f"cannot write checkpoint '{final}': {err}") from err
    return final

"""Publishing a new checkpoint: the commit the storage asks for (rename, or manifest last), then visible.

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

from varstore.checkpoint.publish import atomic
from varstore.checkpoint.format.manifest import Record
from varstore.checkpoint.publish.remote import publish_remote
from varstore.checkpoint.write.write_engine import write_container
from varstore.errors import CheckpointError, VarstoreError
from varstore.storage import ObjectStore, Storage, storage_for

__all__ = ["publish"]


def _not_durable(paths: list[Path]) -> None:
    """The durability step of a save(..., durable=False): nothing."""


def _commit_by_rename(final: Path, storage: Storage, write: Callable[[Path, Callable[[list[Path]], None]], None],
                      durable: bool) -> None:
    """The commit of a storage that renames: a temporary sibling, every file fsynced, renamed over `final`."""
    writeback = getattr(storage, "writeback", None)
    if not durable and writeback is not None:
        storage.writeback = False  # type: ignore[attr-defined]  # page-cache speed: nothing pushed early
    try:
        with atomic.atomic_path(final, durable=durable) as tmp:
            write(tmp, atomic.fsync_paths if durable else _not_durable)
    finally:
        if writeback is not None:
            storage.writeback = writeback  # type: ignore[attr-defined]


def publish(final: Path, fmt: str, entries: list[Any], records: list[Record], packed_nbytes: int,
            header: dict[str, Any], checksum: bool, release: Callable[[int], None] | None = None,
            storage: Storage | None = None, durable: bool = True) -> Path:
    """Writes a planned checkpoint (see write_engine.write_container) and commits it under `final`.

    The storage says how (`Storage.renames`, as DCP's StorageWriter owns its
    finish() and orbax picks an atomicity strategy per storage): a storage that
    renames gets the temporary-sibling commit; one that does not must be an
    ObjectStore and gets the manifest-last commit (remote.publish_remote).
    Either the whole new checkpoint is under `final` afterwards, or (on any
    error) `final` is as it was and no temporary is left. `durable=False`
    skips every fsync and the storage's early write-back (the rename stays
    atomic for a crash of the process, not for a power loss).

    Returns:
      `final`.

    Raises:
      CheckpointError: the file system refused (naming `final` and the cause),
        or a storage without rename lacks the ObjectStore calls.
      Any error of writing (as save_entries).
    """
    storage = storage_for(final)[0] if storage is None else storage
    if not storage.renames:
        if not isinstance(storage, ObjectStore):
            raise CheckpointError(f"cannot write checkpoint '{final}' to {storage.url}: it commits without rename "
                                  f"but lacks the ObjectStore calls (varstore/storage/protocol.py) that commit needs")
        publish_remote(str(final), storage, fmt, entries, records, packed_nbytes, header, checksum, release)
        return final

    def write(tmp: Path, make_durable: Callable[[list[Path]], None]) -> None:
        write_container(tmp, fmt, entries, records, packed_nbytes, header, checksum, release,
                        make_durable=make_durable, storage=storage)

    try:
        _commit_by_rename(final, storage, write, durable)
    except VarstoreError:
        raise
    except OSError as err:
        raise CheckpointError(f"cannot write checkpoint '{final}': {err}") from err
    return final

"""Incremental saves: one checkpoint as one Icechunk snapshot that writes only the chunks that changed.

A snapshot holds what a varstore Zarr v3 checkpoint holds (plan.py's
Records and attributes, the same manifest at `_varstore/manifest`, the same
root attributes): every variable its own single-chunk array at its name,
with `trainable`, `collections`, `dtype` and `device` attributes. The
per-chunk crc32c is in the manifest (its `checksum` column), with the BLAKE3
of the same bytes (the manifest header's `blake3` list), not in the array's
attributes: an array whose chunk changes keeps its zarr.json. Icechunk needs
the "default" chunk key encoding, so a chunk's key is `<name>/c/0/0` (not
`<name>/0.0`). A variable whose shape, stored dtype, codecs, crc32c and
BLAKE3 equal the parent snapshot's (snapshot_parent.py: sha256 for a parent
written before BLAKE3) is not written at all: the session keeps the parent's
reference (Icechunk's own behaviour for a key not written), and a zarr.json
equal to the parent's is not written either. What the parent holds comes
from the caller's ParentCache when the branch tip is the snapshot this
process committed last, else it is read. The commit is atomic (Icechunk);
the tag ckpt-<step> is set after it; by default the commit is made durable
before the tag is set, and the tag before the save returns (step_durability.py). Values are fetched one at a time and
their crc32c and BLAKE3 computed in helper threads ahead of the comparison
(peak memory: HASH_AHEAD_BYTES of values, which are usually the caller's
own arrays, plus the PENDING_BYTES write batch). Knows nothing about
retention (incremental_manager.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.backends.zarr3.codecs import compression_codecs, encode_chunk
from varstore.backends.zarr3.store import array_metadata, document_text
from varstore.checkpoint.format.checksum import crc32c_of, crc32c_raw
from varstore.checkpoint.format.manifest import MANIFEST_PATH, encode_manifest, storage_layout
from varstore.checkpoint.manage import step_durability
from varstore.checkpoint.manage.snapshot_parent import DIGEST, Parent, ParentCache, digest, is_group
from varstore.checkpoint.publish import atomic
from varstore.checkpoint.write.plan import (
    array_attrs,
    entries_from,
    header,
    host_value,
    plan_records,
    planned_layout,
    root_attrs,
)
from varstore.storage.icechunk_repo import IcechunkRepository, Transaction

__all__ = ["SavedSnapshot", "ParentCache", "save_snapshot", "chunk_key", "tag_of", "step_of", "DIGEST", "TAG_PREFIX"]

#: Snapshots are tagged TAG_PREFIX + step.
TAG_PREFIX = "ckpt-"
#: Bytes of chunks queued before they are written together (the save's buffer beyond one value).
PENDING_BYTES = 32 << 20
#: Bytes of values hashed (crc32c, BLAKE3) ahead of the one compared and written, and the threads hashing them.
HASH_AHEAD_BYTES = 32 << 20
HASH_THREADS = 2
#: Values under this many bytes are hashed together, up to this many bytes per pool task.
SMALL_BYTES = 256 << 10
_GROUP = document_text({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode("utf-8")


def tag_of(step: int) -> str:
    """The tag of step `step`: "ckpt-<step>"."""
    return f"{TAG_PREFIX}{int(step)}"


def step_of(tag: str) -> int | None:
    """The step of a tag "ckpt-<step>", or None for any other tag."""
    rest = tag[len(TAG_PREFIX):] if tag.startswith(TAG_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


def chunk_key(path: str, ndim: int) -> str:
    """The key of the single chunk of the array at `path` (default encoding): "w/c/0/0", "s/c" for a scalar."""
    return f"{path}/c" + "/0" * ndim


@dataclass(frozen=True)
class SavedSnapshot:
    """What one incremental save committed.

    Attributes:
      snapshot_id: Icechunk's id of the new snapshot.
      tag: "ckpt-<step>".
      added_bytes: bytes of chunks this snapshot wrote (stored, i.e. compressed, size).
      total_bytes: decoded bytes of every variable the snapshot holds.
      written: names of the variables whose chunks were written; every other one kept the parent's.
      parent_cached: True when nothing of the parent snapshot was read (the cache described it).
    """

    snapshot_id: str
    tag: str
    added_bytes: int
    total_bytes: int
    written: tuple[str, ...]
    parent_cached: bool = False


def array_document(record: Any, stored: npt.NDArray[Any], compression: str | None) -> dict[str, Any]:
    """The zarr.json of a variable's array in a snapshot: a varstore Zarr checkpoint's, less the crc32c
    attribute (the manifest holds it), so that it stays the same while only the chunk changes."""
    attrs = array_attrs(record)
    attrs.pop("checksum", None)
    document = array_metadata(stored.dtype, stored.shape, attrs, chunks=stored.shape)
    if compression is not None:
        document["codecs"] = compression_codecs(compression, stored.dtype)
    return document


def save_snapshot(repo: IcechunkRepository, target: Any, step: int, *, metadata: dict[str, Any] | None = None,
                  compression: str | None = None, commit_metadata: dict[str, Any] | None = None,
                  progress: Callable[[str, bool], None] | None = None,
                  cache: ParentCache | None = None, durable: bool = True) -> SavedSnapshot:
    """Commits `target` to `repo` as one snapshot tagged ckpt-<step>, writing only changed chunks.

    Args:
      repo: the repository (its branch tip is the parent).
      target: as varstore.save (a VariableStore, a mapping of names to Variables or arrays, a list of Variables).
      step: the global step (int), recorded and in the tag.
      metadata: JSON-compatible dict recorded in the manifest, as varstore.save.
      compression: None (raw chunks, the default) or "zstd" (bytes + blosc zstd, bit shuffle).
      commit_metadata: extra JSON-compatible fields of Icechunk's commit metadata.
      progress: called as progress(name, written) after each variable.
      cache: what this process knows of the snapshot it committed last; used when the tip is still that
        snapshot (else the parent is read), and made to describe the new snapshot after the commit.
      durable: True (default, as varstore.save) makes a local repository's objects durable after the
        commit and the tag after it is set (step_durability.py); False skips both (a power loss may lose
        the step). Object storage needs neither.

    Returns:
      SavedSnapshot.

    Raises:
      InvalidNameError, UnsupportedDtypeError, InvalidMetadataError: before anything is written.
      CheckpointConflictError: another writer committed first (nothing of this save is visible).
      CheckpointError: the repository failed; CheckpointWriteError: durability failed (committed, not tagged).
    """
    where = Path(repo.location)
    entries = entries_from(target)
    records = plan_records(entries)
    planned = header("zarr", step, metadata, where)
    planned_layout(planned, records, "per-variable", 0)  # every variable its own array: chunks compare one by one
    if compression is not None:
        compression_codecs(compression, np.dtype("u1"))  # an unknown name is refused before any write
    cache = cache if cache is not None else ParentCache()
    txn = repo.writable()
    try:
        parent = Parent(txn, cache)
        paths = [record.path or record.name for record in records]
        old_documents = parent.read(f"{path}/zarr.json" for path in paths)
        # what the parent holds that this step does not: arrays gone, and groups where an array goes now
        doomed = set(parent.paths) - set(paths)
        doomed |= {path for path in paths if is_group(old_documents[f"{path}/zarr.json"])}
        for path in sorted(doomed, key=lambda p: p.count("/")):
            txn.delete_node(path)
            parent.forget(path)
        _write_missing_groups(txn, parent, paths + [MANIFEST_PATH])
        pending = _Pending(txn, parent)
        added = total = 0
        written: list[str] = []
        digests: list[str] = []
        with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="varstore-digest") as pool:
            for record, path, stored, blake3 in _digested(_values(entries, records, paths, where), pool, parent):
                total += record.nbytes
                digests.append(blake3)
                document = array_document(record, stored, compression)
                text = document_text(document).encode("utf-8")
                same = parent.unchanged(path, document, text, record.checksum, blake3, stored)
                pending.add(f"{path}/zarr.json", text)
                if not same and record.nbytes:
                    data = (encode_chunk(stored, compression) if compression is not None
                            else bytes(stored.reshape(-1).view(np.uint8).data))
                    pending.add(chunk_key(path, stored.ndim), data)
                    added += len(data)
                    written.append(record.name)
                if progress is not None:
                    progress(record.name, not same)
                del stored
        pending.flush()
        atomic.fault_point("incremental_after_chunks")
        manifest = encode_manifest({**planned, DIGEST: digests}, records, 0)
        root = {"zarr_format": 3, "node_type": "group", "attributes": root_attrs(planned, crc32c_raw(manifest))}
        pending.add(f"{MANIFEST_PATH}/zarr.json", document_text(array_metadata(
            np.dtype("u1"), (len(manifest),), {"description": "JSON index of every variable; see docs"},
            chunks=(len(manifest),))).encode("utf-8"))
        pending.add(chunk_key(MANIFEST_PATH, 1), manifest)
        pending.add("zarr.json", document_text(root).encode("utf-8"))
        pending.flush()
        tag = tag_of(step)
        fields = {"varstore_step": int(step), "varstore_added_bytes": added, "varstore_total_bytes": total,
                  **(commit_metadata or {})}
        snapshot_id = txn.commit(tag, fields)
        parent.keep(cache, snapshot_id, paths, zip((record.checksum for record in records), digests))
        if durable:  # before the tag: a tag never names a snapshot whose objects a power loss may take
            step_durability.commit_durable(repo, tag)
        atomic.fault_point("incremental_after_commit")
        repo.tag(tag, snapshot_id)
        if durable:
            step_durability.tag_durable(repo, tag)
        return SavedSnapshot(snapshot_id, tag, added, total, tuple(written), parent.cached)
    finally:
        txn.close()


def _values(entries: list[Any], records: list[Any], paths: list[str],
            where: Path) -> Iterator[tuple[Any, str, npt.NDArray[Any]]]:
    """(record, path, stored array) of every variable in order, fetched one at a time."""
    for entry, record, path in zip(entries, records, paths):
        value = host_value(entry, record, where)
        stored_dtype, stored_shape = storage_layout(value.dtype, record.shape, False)
        yield record, path, value.reshape(-1).view(stored_dtype).reshape(stored_shape)
        del value


def _digests(stored: npt.NDArray[Any], parent: tuple[int | None, str | None]) -> tuple[int, str]:
    """(crc32c, BLAKE3 hex) of `stored`'s bytes (both release the GIL); when the BLAKE3 equals the parent's
    (crc32c, BLAKE3) `parent`, the bytes are the parent's and so is their crc32c, which is not computed again."""
    blake3 = digest(stored)
    crc, old = parent
    return (crc if crc is not None and old == blake3 else crc32c_of(stored)), blake3


def _digests_of(jobs: list[tuple[npt.NDArray[Any], tuple[int | None, str | None]]]) -> list[tuple[int, str]]:
    """`_digests` of each (stored, parent) in `jobs`, in order (one pool task for a run of small values)."""
    return [_digests(stored, parent) for stored, parent in jobs]


def _digested(values: Iterator[tuple[Any, str, npt.NDArray[Any]]], pool: ThreadPoolExecutor, parent: Parent
              ) -> Iterator[tuple[Any, str, npt.NDArray[Any], str]]:
    """`values` with each one's BLAKE3 (hex) added and its crc32c recorded (record.checksum), in order:
    hashed in `pool` while the caller compares and writes the ones before, at most HASH_AHEAD_BYTES of
    values waiting (plus the one being hashed). Consecutive values under SMALL_BYTES go to the pool as one
    task (up to SMALL_BYTES together): a task costs more than hashing a bias vector."""
    queue: deque[tuple[list[tuple[Any, str, npt.NDArray[Any]]], Future[list[tuple[int, str]]]]] = deque()
    queued = 0
    run: list[tuple[Any, str, npt.NDArray[Any]]] = []
    run_bytes = 0

    def send() -> None:
        nonlocal run, run_bytes
        jobs = [(stored, parent.digests.get(path, (None, None))) for _, path, stored in run]
        queue.append((run, pool.submit(_digests_of, jobs)))
        run, run_bytes = [], 0

    def ready() -> Iterator[tuple[Any, str, npt.NDArray[Any], str]]:
        nonlocal queued
        batch, future = queue.popleft()
        for (record, path, stored), (crc, blake3) in zip(batch, future.result()):
            queued -= stored.nbytes
            record.checksum = crc
            yield record, path, stored, blake3

    for record, path, stored in values:
        run.append((record, path, stored))
        run_bytes += stored.nbytes
        queued += stored.nbytes
        if stored.nbytes >= SMALL_BYTES or run_bytes >= SMALL_BYTES:
            send()
        while queue and queued > HASH_AHEAD_BYTES:
            yield from ready()
    if run:
        send()
    while queue:
        yield from ready()


class _Pending:
    """Writes queued and sent together (concurrently) once PENDING_BYTES are queued: one round trip per
    batch instead of one per key, memory bounded by the batch. A zarr.json equal to the parent's is dropped."""

    def __init__(self, txn: Transaction, parent: Parent) -> None:
        self._txn = txn
        self._parent = parent
        self._items: list[tuple[str, bytes]] = []
        self._bytes = 0

    def add(self, key: str, data: bytes) -> None:
        if key.endswith("zarr.json"):
            if self._parent.read([key])[key] == data:
                return
            self._parent.written(key, data)
        self._items.append((key, data))
        self._bytes += len(data)
        if self._bytes >= PENDING_BYTES:
            self.flush()

    def flush(self) -> None:
        """Writes the queued metadata documents, then the chunks (an array's node before its chunk)."""
        items, self._items, self._bytes = self._items, [], 0
        self._txn.set_many([item for item in items if item[0].endswith("zarr.json")],
                           then=[item for item in items if not item[0].endswith("zarr.json")])


def _write_missing_groups(txn: Transaction, parent: Parent, paths: list[str]) -> None:
    """Writes the zarr.json of every group above `paths` that the parent snapshot lacks (asked in one batch)."""
    groups = sorted({"/".join(parts[:depth]) for parts in (path.split("/")[:-1] for path in paths)
                     for depth in range(1, len(parts) + 1)})
    present = parent.read(f"{group}/zarr.json" for group in groups)
    missing: list[tuple[str, bytes | memoryview]] = [
        (f"{group}/zarr.json", _GROUP) for group in groups if present[f"{group}/zarr.json"] is None]
    for key, _ in missing:
        parent.written(key, _GROUP)
    txn.set_many(missing)

"""Incremental saves: one checkpoint as one Icechunk snapshot that writes only the chunks that changed.

A snapshot holds what a varstore Zarr v3 checkpoint holds (plan.py's
Records and attributes, the same manifest at `_varstore/manifest`, the same
root attributes): every variable its own single-chunk array at its name,
with `trainable`, `collections`, `dtype`, `device` and `checksum`
(crc32c of the decoded value bytes) attributes, plus `sha256` of those
bytes. Icechunk needs the "default" chunk key encoding, so a chunk's key is
`<name>/c/0/0` (not `<name>/0.0`). A variable whose shape, stored dtype,
codecs, crc32c and sha256 equal the parent snapshot's is not written at all:
the session keeps the parent's reference (Icechunk's own behaviour for a key
not written), and a zarr.json equal to the parent's is not written either.
The commit is atomic (Icechunk); the tag ckpt-<step> is set after it.
Values are fetched one at a time and their sha256 computed in helper threads
ahead of the comparison (peak memory: HASH_AHEAD_BYTES of values, which are
usually the caller's own arrays, plus the PENDING_BYTES write batch). Knows
nothing about retention (incremental_manager.py).
"""

from __future__ import annotations

import hashlib
import json
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
from varstore.checkpoint.format.manifest import MANIFEST_PATH, decode_manifest, encode_manifest, storage_layout
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

__all__ = ["SavedSnapshot", "save_snapshot", "chunk_key", "tag_of", "step_of", "DIGEST_ATTRIBUTE", "TAG_PREFIX"]

#: Array attribute holding the sha256 (hex) of the decoded value bytes: the strong half of "unchanged".
DIGEST_ATTRIBUTE = "sha256"
#: Snapshots are tagged TAG_PREFIX + step.
TAG_PREFIX = "ckpt-"
#: Bytes of chunks queued before they are written together (the save's buffer beyond one value).
PENDING_BYTES = 32 << 20
#: Bytes of values hashed (sha256) ahead of the one compared and written, and the threads hashing them.
HASH_AHEAD_BYTES = 32 << 20
HASH_THREADS = 2
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
    """

    snapshot_id: str
    tag: str
    added_bytes: int
    total_bytes: int
    written: tuple[str, ...]


def _parent_paths(txn: Transaction) -> list[str]:
    """The array paths of the parent snapshot's manifest ([] for a fresh repository or a damaged manifest)."""
    data = txn.get(chunk_key(MANIFEST_PATH, 1))
    if data is None:
        return []
    try:
        _, records = decode_manifest(data, f"{txn.location} (parent snapshot)")
    except Exception:  # noqa: BLE001 - a damaged parent manifest only costs the deletion of stale arrays
        return []
    return [record.path for record in records if record.path]


def _node_type(document: bytes | None) -> str | None:
    """The node_type of a zarr.json document, or None (absent or not JSON)."""
    try:
        parsed = json.loads(document) if document is not None else None
    except ValueError:
        return None
    return parsed.get("node_type") if isinstance(parsed, dict) else None


def _same_chunk(old: bytes | None, document: dict[str, Any]) -> bool:
    """True when the parent's zarr.json `old` describes the very chunk `document` describes."""
    if old is None:
        return False
    try:
        before = json.loads(old)
    except ValueError:
        return False
    if not isinstance(before, dict):
        return False
    keys = ("shape", "data_type", "codecs", "chunk_grid", "chunk_key_encoding")
    attrs, new_attrs = before.get("attributes") or {}, document["attributes"]
    return (all(before.get(key) == document[key] for key in keys) and isinstance(attrs, dict)
            and attrs.get("checksum") == new_attrs.get("checksum") is not None
            and attrs.get(DIGEST_ATTRIBUTE) == new_attrs.get(DIGEST_ATTRIBUTE))


def save_snapshot(repo: IcechunkRepository, target: Any, step: int, *, metadata: dict[str, Any] | None = None,
                  compression: str | None = None, commit_metadata: dict[str, Any] | None = None,
                  progress: Callable[[str, bool], None] | None = None) -> SavedSnapshot:
    """Commits `target` to `repo` as one snapshot tagged ckpt-<step>, writing only changed chunks.

    Args:
      repo: the repository (its branch tip is the parent).
      target: as varstore.save (a VariableStore, a mapping of names to Variables or arrays, a list of Variables).
      step: the global step (int), recorded and in the tag.
      metadata: JSON-compatible dict recorded in the manifest, as varstore.save.
      compression: None (raw chunks, the default) or "zstd" (bytes + blosc zstd, bit shuffle).
      commit_metadata: extra JSON-compatible fields of Icechunk's commit metadata.
      progress: called as progress(name, written) after each variable.

    Returns:
      SavedSnapshot.

    Raises:
      InvalidNameError, UnsupportedDtypeError, InvalidMetadataError: before anything is written.
      CheckpointConflictError: another writer committed first (nothing of this save is visible).
      CheckpointError: the repository failed.
    """
    where = Path(repo.location)
    entries = entries_from(target)
    records = plan_records(entries)
    planned = header("zarr", step, metadata, where)
    planned_layout(planned, records, "per-variable", 0)  # every variable its own array: chunks compare one by one
    if compression is not None:
        compression_codecs(compression, np.dtype("u1"))  # an unknown name is refused before any write
    txn = repo.writable()
    try:
        old_paths = _parent_paths(txn)
        paths = [record.path or record.name for record in records]
        old_documents = dict(zip(paths, txn.get_many(f"{path}/zarr.json" for path in paths)))
        # what the parent holds that this step does not: arrays gone, and groups where an array goes now
        doomed = set(old_paths) - set(paths)
        doomed |= {path for path, old in old_documents.items() if _node_type(old) == "group"}
        for path in sorted(doomed, key=lambda p: p.count("/")):
            txn.delete_node(path)
            old_documents.pop(path, None)
        _write_missing_groups(txn, paths + [MANIFEST_PATH])
        pending = _Pending(txn)
        added = total = 0
        written: list[str] = []
        with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="varstore-sha256") as pool:
            for record, path, stored, digest in _digested(_values(entries, records, paths, where), pool):
                total += record.nbytes
                attrs = array_attrs(record)
                attrs[DIGEST_ATTRIBUTE] = digest
                document = array_metadata(stored.dtype, stored.shape, attrs, chunks=stored.shape)
                if compression is not None:
                    document["codecs"] = compression_codecs(compression, stored.dtype)
                text = document_text(document).encode("utf-8")
                old = old_documents.get(path)
                same = _same_chunk(old, document)
                if old != text:
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
        manifest = encode_manifest(planned, records, 0)
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
        atomic.fault_point("incremental_after_commit")
        repo.tag(tag, snapshot_id)
        return SavedSnapshot(snapshot_id, tag, added, total, tuple(written))
    finally:
        txn.close()


def _values(entries: list[Any], records: list[Any], paths: list[str],
            where: Path) -> Iterator[tuple[Any, str, npt.NDArray[Any]]]:
    """(record, path, stored array) of every variable in order, fetched one at a time, its crc32c recorded."""
    for entry, record, path in zip(entries, records, paths):
        value = host_value(entry, record, where)
        record.checksum = crc32c_of(value)
        stored_dtype, stored_shape = storage_layout(value.dtype, record.shape, False)
        yield record, path, value.reshape(-1).view(stored_dtype).reshape(stored_shape)
        del value


def _sha256(stored: npt.NDArray[Any]) -> str:
    return hashlib.sha256(stored.reshape(-1).view(np.uint8).data).hexdigest()  # hashlib releases the GIL


def _digested(values: Iterator[tuple[Any, str, npt.NDArray[Any]]], pool: ThreadPoolExecutor
              ) -> Iterator[tuple[Any, str, npt.NDArray[Any], str]]:
    """`values` with each one's sha256 (hex) added, in order: hashed in `pool` while the caller compares and
    writes the ones before, at most HASH_AHEAD_BYTES of values waiting (plus the one being hashed)."""
    queue: deque[tuple[Any, str, npt.NDArray[Any], Future[str]]] = deque()
    queued = 0
    for record, path, stored in values:
        queue.append((record, path, stored, pool.submit(_sha256, stored)))
        queued += stored.nbytes
        while queue and queued > HASH_AHEAD_BYTES:
            record, path, stored, digest = queue.popleft()
            queued -= stored.nbytes
            yield record, path, stored, digest.result()
    while queue:
        record, path, stored, digest = queue.popleft()
        yield record, path, stored, digest.result()


class _Pending:
    """Writes queued and sent together (concurrently) once PENDING_BYTES are queued: one round trip per
    batch instead of one per key, memory bounded by the batch."""

    def __init__(self, txn: Transaction) -> None:
        self._txn = txn
        self._items: list[tuple[str, bytes]] = []
        self._bytes = 0

    def add(self, key: str, data: bytes) -> None:
        self._items.append((key, data))
        self._bytes += len(data)
        if self._bytes >= PENDING_BYTES:
            self.flush()

    def flush(self) -> None:
        """Writes the queued metadata documents, then the chunks (an array's node before its chunk)."""
        items, self._items, self._bytes = self._items, [], 0
        self._txn.set_many([item for item in items if item[0].endswith("zarr.json")],
                           then=[item for item in items if not item[0].endswith("zarr.json")])


def _write_missing_groups(txn: Transaction, paths: list[str]) -> None:
    """Writes the zarr.json of every group above `paths` that the parent snapshot lacks (asked in one batch)."""
    groups = sorted({"/".join(parts[:depth]) for parts in (path.split("/")[:-1] for path in paths)
                     for depth in range(1, len(parts) + 1)})
    present = txn.get_many(f"{group}/zarr.json" for group in groups)
    txn.set_many([(f"{group}/zarr.json", _GROUP) for group, data in zip(groups, present) if data is None])

"""What an incremental save knows of its parent snapshot, and the strong digest that proves a chunk unchanged.

A snapshot written by incremental.py records, per variable, the crc32c
(the manifest's `checksum` column, as every varstore checkpoint) and the
BLAKE3 digest of the value bytes (the manifest header's `blake3` list, in
the order of the manifest's variables). Snapshots written by varstore 0.x
before BLAKE3 carry a `sha256` attribute on each array instead: a chunk of
such a parent is compared by computing the sha256 of the new value (once,
on the first save after the upgrade; the new snapshot then records BLAKE3).

ParentCache keeps, in the process that committed a snapshot, what it read
and wrote of it (each node's zarr.json, the array paths, crc32c and BLAKE3
of every variable), keyed by the snapshot id: when the branch tip is still
that snapshot, the next save reads nothing of it; when another writer
committed since, the tip's id differs and everything is read again. The
only importer of blake3. No writes here (incremental.py writes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import MANIFEST_PATH, decode_manifest
from varstore.errors import MissingDependencyError
from varstore.storage.icechunk_repo import Transaction

__all__ = ["DIGEST", "LEGACY_DIGEST", "ParentCache", "Parent", "digest", "manifest_key", "is_group", "node_type"]

#: The manifest header key listing each variable's BLAKE3 (hex of the 32-byte digest), in manifest order.
DIGEST = "blake3"
#: The array attribute holding the sha256 (hex) in snapshots written before BLAKE3 (read, never written).
LEGACY_DIGEST = "sha256"
#: Values at least this large are hashed with BLAKE3's own threads as well (a model's large matrices).
THREADED_DIGEST_BYTES = 1 << 20
_COMPARED = ("shape", "data_type", "codecs", "chunk_grid", "chunk_key_encoding")


def manifest_key() -> str:
    """The key of the manifest's single chunk in a snapshot ("_varstore/manifest/c/0")."""
    return f"{MANIFEST_PATH}/c/0"


def _blake3() -> Any:
    try:
        import blake3
    except ImportError as err:
        raise MissingDependencyError(
            "incremental checkpoints (format=\"icechunk\") need blake3: pip install 'varstore[icechunk]'") from err
    return blake3.blake3


def digest(stored: npt.NDArray[Any]) -> str:
    """The BLAKE3 (hex, 64 characters) of the C-contiguous array `stored`'s bytes; releases the GIL."""
    hasher = _blake3()
    data = stored.reshape(-1).view(np.uint8).data
    threads = hasher.AUTO if stored.nbytes >= THREADED_DIGEST_BYTES else 1
    return str(hasher(data, max_threads=threads).hexdigest())


@dataclass
class ParentCache:
    """What this process knows of the snapshot `snapshot_id` (None: nothing yet), kept between saves.

    Attributes:
      snapshot_id: the snapshot described.
      documents: "<node>/zarr.json" -> its bytes, for the nodes read or written (others are read when asked).
      paths: the array paths of its manifest, in order.
      digests: array path -> (crc32c, BLAKE3 hex or None).
    """

    snapshot_id: str | None = None
    documents: dict[str, bytes | None] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    digests: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)


class Parent:
    """The parent snapshot of one save (the writable session's base): from `cache` when it describes that very
    snapshot, else read from `txn` (the manifest now, zarr.json documents when asked)."""

    def __init__(self, txn: Transaction, cache: ParentCache) -> None:
        self._txn = txn
        self.cached = cache.snapshot_id is not None and cache.snapshot_id == txn.snapshot_id
        if self.cached:
            self.documents = dict(cache.documents)
            self.paths, self.digests = list(cache.paths), dict(cache.digests)
        else:
            self.documents = {}
            self.paths, self.digests = _manifest_digests(txn)

    def read(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """{key: the parent's bytes at key or None} of zarr.json keys; the unknown ones fetched in one batch."""
        wanted = list(dict.fromkeys(keys))
        missing = [key for key in wanted if key not in self.documents]
        if missing:
            self.documents.update(zip(missing, self._txn.get_many(missing)))
        return {key: self.documents[key] for key in wanted}

    def forget(self, node: str) -> None:
        """Drops what is known under `node` (deleted in this session)."""
        prefix = f"{node}/"
        for key in [key for key in self.documents if key.startswith(prefix)]:
            self.documents[key] = None

    def written(self, key: str, data: bytes) -> None:
        """Records that this session's snapshot holds `data` at `key`."""
        self.documents[key] = data

    def unchanged(self, path: str, document: dict[str, Any], text: bytes, checksum: int | None, blake3: str,
                  stored: npt.NDArray[Any]) -> bool:
        """True when the parent's array at `path` holds the very chunk `document` (zarr.json as a dict, `text`
        its bytes), `checksum` (crc32c) and `blake3` describe: same layout and codecs, same crc32c, same
        BLAKE3 (a legacy parent: same sha256 of `stored`)."""
        crc, old_blake3 = self.digests.get(path, (None, None))
        if checksum is None or crc != checksum:
            return False
        before = self.documents.get(f"{path}/zarr.json")
        if before != text:  # the same text needs no parsing (the usual case)
            old = _parse(before)
            if old is None or any(old.get(key) != document[key] for key in _COMPARED):
                return False
        if old_blake3 is not None:
            return old_blake3 == blake3
        attrs = (_parse(before) or {}).get("attributes")
        legacy = attrs.get(LEGACY_DIGEST) if isinstance(attrs, dict) else None
        return isinstance(legacy, str) and legacy == hashlib.sha256(stored.reshape(-1).view(np.uint8).data).hexdigest()

    def keep(self, cache: ParentCache, snapshot_id: str, paths: list[str],
             digests: Iterable[tuple[int | None, str | None]]) -> None:
        """Makes `cache` describe the snapshot just committed from this session."""
        cache.snapshot_id = snapshot_id
        cache.documents = {key: data for key, data in self.documents.items() if data is not None}
        cache.paths = list(paths)
        cache.digests = dict(zip(paths, digests))


def is_group(document: bytes | None) -> bool:
    """True when the zarr.json `document` is a group's (parsed only when the bytes mention "group": an
    array's document, the usual case, is not parsed at all)."""
    return document is not None and b"group" in document and node_type(document) == "group"


def node_type(document: bytes | None) -> str | None:
    """The node_type of a zarr.json document, or None (absent or not JSON)."""
    parsed = _parse(document)
    return parsed.get("node_type") if parsed is not None else None


def _parse(document: bytes | None) -> dict[str, Any] | None:
    if document is None:
        return None
    try:
        parsed = json.loads(document)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _manifest_digests(txn: Transaction) -> tuple[list[str], dict[str, tuple[int | None, str | None]]]:
    """(array paths, {path: (crc32c, BLAKE3 or None)}) of the parent's manifest; ([], {}) for a fresh
    repository or a manifest that does not match the crc32c of the root's attributes, or is damaged (then
    every chunk is written again)."""
    root, data = txn.get_many(["zarr.json", manifest_key()])
    attrs = (_parse(root) or {}).get("attributes")
    expected = attrs.get("varstore_manifest_crc32c") if isinstance(attrs, dict) else None
    if data is None or (expected is not None and crc32c_raw(data) != expected):
        return [], {}
    try:
        header, records = decode_manifest(data, f"{txn.location} (parent snapshot)")
    except Exception:  # noqa: BLE001 - a damaged parent manifest only costs writing every chunk again
        return [], {}
    listed = header.get(DIGEST)
    blake3s: list[Any] = listed if isinstance(listed, list) and len(listed) == len(records) else [None] * len(records)
    paths = [record.path for record in records if record.path]
    digests = {record.path: (record.checksum, value if isinstance(value, str) else None)
               for record, value in zip(records, blake3s) if record.path}
    return paths, digests

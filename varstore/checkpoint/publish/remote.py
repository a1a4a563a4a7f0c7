"""Checkpoints on an object store: the commit without rename and the sweep (what a reader may open: read/remote_read.py).

Object stores have no rename and no fsync, so a save to a URL cannot write a
temporary and rename it (atomic.py's protocol). This module is the other
protocol (docs/guide/object-storage.md, "Commit without rename"):

- The container is laid out by the same write engine into a local staging
  directory (a temporary, deleted when the save ends, also on error). An
  HDF5 checkpoint is then uploaded as ONE object (a single PUT, or a
  multipart upload with bounded memory) that appears whole or not at all. A
  Zarr checkpoint is many objects: a `_varstore/pending` marker first; every
  chunk, array and group `zarr.json` and the manifest goes straight from
  memory to its object as it is made, while the engine writes on
  (storage/staged_upload.py: no local copy, at most the client's
  max_in_flight requests); then what the staging directory holds (the packed
  blob, written in windows), and LAST the root `zarr.json` (whose attributes
  carry the manifest's crc32c) written create-only: the commit. Then the
  marker goes.
- A Zarr prefix without its root `zarr.json` is never listed, opened or
  restored; reading one (the commit check, its metadata held in memory, its
  chunk objects fetched on demand) is checkpoint/read/remote_read.py's.
- The next save under the same parent sweeps what killed writers left:
  incomplete multipart uploads and prefixes with a pending marker and no
  commit, once older than the grace period (SWEEP_GRACE_SECONDS).

Decides nothing about what is written (plan.py, write_engine.py) and never
talks to the client library directly (storage/object_storage.py does).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from varstore.backends import get_backend
from varstore.checkpoint.format.manifest import INDEX_HEADER_BYTES, Record, decode_index_header
from varstore.checkpoint.read.remote_read import COMMIT_OBJECT, PENDING_MARKER  # what a reader takes for committed
from varstore.checkpoint.write.write_engine import write_container
from varstore.errors import CheckpointError, CheckpointExistsError
from varstore.storage import ObjectStore, storage_for
from varstore.storage.local import LocalStorage

if TYPE_CHECKING:
    from varstore.storage.object_info import ObjectInfo

__all__ = ["publish_remote", "check_replaceable_remote", "describe_remote", "sweep", "PENDING_MARKER", "COMMIT_OBJECT",
           "SWEEP_GRACE_SECONDS"]

_log = logging.getLogger("varstore.checkpoint")

#: Seconds an abandoned upload or uncommitted prefix is left alone before a save sweeps it
#: (so a concurrent writer's save in progress is never touched).
SWEEP_GRACE_SECONDS = 3600.0


def _parent(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def sweep(storage: ObjectStore, parent: str, *, grace_seconds: float | None = None,
          now: float | None = None, listing: Sequence[ObjectInfo] | None = None) -> list[str]:
    """Removes what killed saves left under `parent`, once older than the grace period.

    Incomplete multipart uploads (S3) are aborted; a prefix with a pending
    marker and no commit object is deleted. A prefix without a marker (a copy
    in progress, another tool's data) is never touched.

    Args:
      listing: `storage.list_info(parent)` when the caller has it (a save lists the parent once).

    Returns:
      What was removed: upload names and "<prefix>/" for deleted prefixes.
    """
    grace = SWEEP_GRACE_SECONDS if grace_seconds is None else grace_seconds
    now = time.time() if now is None else now
    removed = list(storage.sweep_uploads(
        parent, older_than=grace, now=_dt.datetime.fromtimestamp(now, _dt.timezone.utc)))
    suffix = "/" + PENDING_MARKER
    for info in storage.list_info(parent) if listing is None else listing:
        if not info.name.endswith(suffix):
            continue
        prefix = info.name[:-len(suffix)]
        if now - info.last_modified.timestamp() < grace or storage.exists(f"{prefix}/{COMMIT_OBJECT}"):
            continue
        _log.info("sweeping the unfinished save at %s", storage.url_of(prefix))
        storage.delete(prefix)
        removed.append(prefix + "/")
    return removed


def _files(root: Path) -> Iterator[tuple[str, Path]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield "/".join(path.relative_to(root).parts), path


def _begin_tree(storage: ObjectStore, name: str, listing: Sequence[ObjectInfo]) -> set[str]:
    """Starts a Zarr save under `name`: the old commit object goes first (the old checkpoint stops being
    one before any of its objects change), then the pending marker. Returns what was stored there
    (from `listing`, the parent's listing the sweep used)."""
    before = {info.name for info in listing if info.name.startswith(name + "/")}
    commit = f"{name}/{COMMIT_OBJECT}"
    if commit in before:
        storage.delete_objects([commit])
    token = json.dumps({"writer": secrets.token_hex(8), "started_utc": time.time()}).encode()
    storage.put(f"{name}/{PENDING_MARKER}", token)
    return before


def _finish_tree(storage: ObjectStore, name: str, local: Path, before: set[str], uploaded: Sequence[str]) -> None:
    """Uploads what the staging directory still holds (files written in pieces: the packed blob)
    concurrently, then commits: the root `zarr.json` create-only, LAST; then the marker and the
    objects of the old checkpoint that this one has not (`before` minus `uploaded` and the staged
    files) go."""
    commit = f"{name}/{COMMIT_OBJECT}"
    small: list[tuple[str, Path]] = []
    large: list[tuple[str, Path]] = []
    for relative, path in _files(local):
        if relative == COMMIT_OBJECT:
            continue
        (large if path.stat().st_size > storage.part_size else small).append((relative, path))
    storage.put_many((f"{name}/{relative}", path.read_bytes()) for relative, path in small)
    for relative, path in large:
        storage.upload_file(f"{name}/{relative}", path)
    try:
        storage.put_if(commit, (local / COMMIT_OBJECT).read_bytes(), None)
    except FileExistsError as err:
        raise CheckpointError(f"another writer committed {storage.url_of(name)} while this save was "
                              f"uploading; this save is discarded: {err}") from err
    written = {f"{name}/{relative}" for relative, _ in _files(local)} | set(uploaded)
    # the marker and what the old checkpoint had that this one has not: one batch delete (no listing)
    storage.delete_objects([f"{name}/{PENDING_MARKER}"] + sorted(before - written - {f"{name}/{PENDING_MARKER}"}))


def describe_remote(storage: ObjectStore, name: str) -> str | None:
    """What is at `name` in words ("a varstore Zarr checkpoint", "an object that is not ...", ...); None: nothing."""
    under = storage.list(name)
    commit = f"{name}/{COMMIT_OBJECT}"
    if storage.exists(name):
        size = storage.size(name)
        head = bytes(storage.read_range(name, 0, min(INDEX_HEADER_BYTES, size)))
        if decode_index_header(head) is not None:
            return "a varstore HDF5 checkpoint"
        return f"an object that is not a varstore checkpoint ({size} bytes)"
    if commit in under:
        attrs = json.loads(storage.read_all(commit) or b"{}").get("attributes") or {}
        if attrs.get("varstore_format") is not None:
            return "a varstore Zarr checkpoint"
        return "a Zarr hierarchy varstore did not write"
    if not under:
        return None
    if f"{name}/{PENDING_MARKER}" in under:
        return "an unfinished varstore save"
    return f"{len(under)} objects that are not a varstore checkpoint (no commit object {COMMIT_OBJECT})"


def check_replaceable_remote(url: str, fmt: str, storage: ObjectStore | None = None,
                             advice: str = "pass overwrite=True to replace it") -> None:
    """The overwrite rule (checkpoint/write/overwrite.py) on an object store: only nothing, an unfinished
    varstore save or a varstore checkpoint of format `fmt` may be replaced.

    Raises:
      CheckpointExistsError: naming the URL and what is there.
    """
    if storage is None:
        located, _ = storage_for(url)
        if not isinstance(located, ObjectStore):
            return
        storage = located
    name = storage.name_of(url)
    found = describe_remote(storage, name)
    words = "Zarr" if get_backend(fmt).is_directory else "HDF5"
    if found in (None, "an unfinished varstore save", f"a varstore {words} checkpoint"):
        return
    if found.startswith("a varstore "):
        found = f"{found} (not {words})"
    raise CheckpointExistsError(f"cannot save a varstore {words} checkpoint to {storage.url_of(name)}: "
                                f"{found} is there; delete it, choose another URL, or {advice}",
                                path=storage.url_of(name), found=found)


def publish_remote(final: str, storage: ObjectStore, fmt: str, entries: list[Any], records: list[Record],
                   packed_nbytes: int, header: dict[str, Any], checksum: bool,
                   release: Callable[[int], None] | None = None) -> str:
    """Writes a planned checkpoint to the object store at URL `final` and commits it (manifest object last).

    Either the whole new checkpoint is committed under `final` afterwards,
    or (on any error) nothing new is listed there. A local staging directory
    holds the container while it is uploaded and is deleted before returning.

    Returns:
      `final` (the URL).

    Raises:
      ObjectStoreError: the store refused or failed after retries (naming the URL).
      Any error of writing (as save_entries).
    """
    name = storage.name_of(final)
    listing = storage.list_info(_parent(name))  # once: the sweep's, and what a Zarr save replaces
    swept = sweep(storage, _parent(name), listing=listing)
    if swept:
        _log.info("swept %d abandoned uploads under %s", len(swept), storage.url_of(_parent(name)))
    staging = Path(tempfile.mkdtemp(prefix="varstore-stage-"))
    try:
        local = staging / (Path(name).name or "checkpoint")
        if get_backend(fmt).is_directory:
            # chunks and node documents go from memory straight to their objects while the engine writes
            # on; only the packed blob and the commit object are staged on disk (storage/staged_upload.py)
            before = _begin_tree(storage, name, listing)
            uploading = storage.staged_writer(local, name)
            write_container(local, fmt, entries, records, packed_nbytes, header, checksum, release,
                            make_durable=lambda paths: uploading.wait(), storage=uploading)
            _finish_tree(storage, name, local, before, uploading.uploaded)
        else:
            staging_storage = LocalStorage()
            staging_storage.writeback = False  # never a commit: no fsync, and nothing pushed to disk early
            write_container(local, fmt, entries, records, packed_nbytes, header, checksum, release,
                            make_durable=lambda paths: None, storage=staging_storage)
            storage.upload_file(name, local)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final



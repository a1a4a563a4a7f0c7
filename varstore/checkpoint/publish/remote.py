"""Checkpoints on an object store: the commit without rename, the sweep, and what a reader may open.

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
  restored (`committed` says whether one is there). A Zarr checkpoint is read
  with the metadata its reader opens copied into a local temporary directory
  and its chunk objects fetched from the bucket (StagedZarrStorage: on demand,
  or concurrently ahead of a restore).
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
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from varstore.backends import get_backend
from varstore.checkpoint.format.manifest import INDEX_HEADER_BYTES, MANIFEST_PATH, Record, decode_index_header
from varstore.checkpoint.write.write_engine import write_container
from varstore.errors import (CheckpointError, CheckpointExistsError, CheckpointNotFoundError, NotACheckpointError,
                             VarstoreError)
from varstore.storage import ObjectStore, storage_for
from varstore.storage.staged_read import StagedZarrStorage
from varstore.storage.local import LocalStorage

if TYPE_CHECKING:
    from varstore.storage.object_info import ObjectInfo

__all__ = ["publish_remote", "check_replaceable_remote", "describe_remote", "committed", "is_checkpoint", "container_of", "stage_for_reading", "sweep",
           "PENDING_MARKER", "COMMIT_OBJECT", "SWEEP_GRACE_SECONDS"]

_log = logging.getLogger("varstore.checkpoint")

#: A Zarr checkpoint's "save started, not finished" marker, relative to its prefix.
PENDING_MARKER = "_varstore/pending"
#: A Zarr checkpoint's commit object, relative to its prefix (written last, create-only).
COMMIT_OBJECT = "zarr.json"
#: Seconds an abandoned upload or uncommitted prefix is left alone before a save sweeps it
#: (so a concurrent writer's save in progress is never touched).
SWEEP_GRACE_SECONDS = 3600.0


def _parent(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def container_of(storage: ObjectStore, name: str, format: str | None = None) -> str:
    """The container ("h5" or "zarr") at `name`: by `format`, the suffix, else what is stored there.

    Raises:
      CheckpointNotFoundError: nothing committed at `name`, naming the URL.
    """
    if format is not None:
        return get_backend(format).name
    suffix = Path(name).suffix.lower()
    if suffix == ".zarr":
        return "zarr"
    if suffix in (".h5", ".hdf5"):
        return "h5"
    if storage.exists(f"{name}/{COMMIT_OBJECT}"):
        return "zarr"
    if storage.exists(name):
        return "h5"
    raise CheckpointNotFoundError(f"no checkpoint at {storage.url_of(name)}: no object and no committed "
                                  f"Zarr prefix there; check the URL")


def committed(storage: ObjectStore, name: str, fmt: str) -> bool:
    """True when a finished checkpoint is at `name`: the HDF5 object, or the Zarr prefix's commit object."""
    return storage.exists(f"{name}/{COMMIT_OBJECT}" if get_backend(fmt).is_directory else name)


def is_checkpoint(url: os.PathLike[str] | str, storage_options: Mapping[str, object] | None = None) -> bool:
    """True when a committed varstore checkpoint is at `url` (index header, or the commit object's attributes)."""
    try:
        storage, key = storage_for(url, storage_options)
        if not isinstance(storage, ObjectStore):
            return False
        name = storage.name_of(key)
        fmt = container_of(storage, name)
        if get_backend(fmt).is_directory:
            attrs = json.loads(storage.read_all(f"{name}/{COMMIT_OBJECT}")).get("attributes") or {}
            return attrs.get("varstore_format") is not None
        head = bytes(storage.read_range(name, 0, min(INDEX_HEADER_BYTES, storage.size(name))))
        return decode_index_header(head) is not None
    except (VarstoreError, OSError, ValueError):
        return False


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


def stage_for_reading(storage: ObjectStore, name: str, fmt: str
                      ) -> tuple[Path, StagedZarrStorage, dict[str, bytes]] | None:
    """Prepares a committed checkpoint at `name` for reading.

    HDF5 is read in place with ranged GETs (returns None; its object is
    kept open on `storage`: one GET of its first bytes brings its size and
    ETag for the whole read). For a Zarr checkpoint the prefix is listed
    once and only its metadata (every array's zarr.json, the manifest's
    chunks) is fetched, into memory: returned as {path under the checkpoint:
    bytes} for the backend reader, with a path standing for the checkpoint
    (nothing is ever written there) and the StagedZarrStorage that reads
    variable bytes from their objects on demand (and the held files from memory).

    Raises:
      CheckpointNotFoundError: nothing committed there (an unfinished save is not a checkpoint).
      NotACheckpointError: the commit object went while it was read.
    """
    if not get_backend(fmt).is_directory:
        try:
            storage.keep_open(name)  # one GET: size, ETag and index header, for the reader until it closes
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"no checkpoint at {storage.url_of(name)}; check the URL") from None
        return None
    listed = storage.list_info(name)  # one listing: the commit check, the sizes and the metadata to fetch
    if f"{name}/{COMMIT_OBJECT}" not in {info.name for info in listed}:
        raise CheckpointNotFoundError(
            f"no checkpoint at {storage.url_of(name)}"
            + (f": objects are there but no commit object {COMMIT_OBJECT} (an unfinished or partly "
               f"copied save); save it again or finish the copy" if listed else "; check the URL"))
    listing = {info.name: info.size for info in listed if not info.name.endswith("/" + PENDING_MARKER)}
    try:
        held = _fetch_metadata(storage, name, _metadata_to_copy(name, listing), listing)
    except FileNotFoundError as err:
        raise NotACheckpointError(f"{storage.url_of(name)} lost an object while it was read: {err}") from None
    # stands for the checkpoint in the backend's and storage's keys; never created (no temporary directory)
    local = Path(tempfile.gettempdir()) / f"varstore-remote-{secrets.token_hex(6)}" / (Path(name).name or "checkpoint")
    return local, StagedZarrStorage(local, storage, name, listing, held), held


def _fetch_metadata(storage: ObjectStore, name: str, metadata: list[str],
                    listing: Mapping[str, int]) -> dict[str, bytes]:
    """The `metadata` objects' bytes, keyed by their path under `name`: the commit object (root
    zarr.json) and the manifest's chunks first (concurrent GETs); then every node's zarr.json that the
    root carries (its varstore_zarr_nodes attribute, written by saves to a bucket) is taken from it when
    its size equals the object's in the listing (a node rewritten since, by another tool, is fetched
    instead); the rest is fetched. W1: 3 GETs instead of 19, and no local file."""
    from concurrent.futures import ThreadPoolExecutor

    def fetch(keys: list[str]) -> dict[str, bytes]:
        if len(keys) < 2:
            return {key[len(name) + 1:]: storage.read_all(key) for key in keys}
        with ThreadPoolExecutor(min(8, len(keys)), thread_name_prefix="varstore-metadata") as pool:
            return dict(zip((key[len(name) + 1:] for key in keys), pool.map(storage.read_all, keys)))

    commit = f"{name}/{COMMIT_OBJECT}"
    first = [key for key in metadata if key == commit or not key.endswith("/" + COMMIT_OBJECT)]
    held = fetch(first)
    from_root = get_backend("zarr").documents_from_root(held[COMMIT_OBJECT])  # type: ignore[attr-defined]
    rest = []
    for key in metadata:
        if key in first:
            continue
        data = from_root.get(key[len(name) + 1:])
        if data is None or len(data) != listing.get(key):
            rest.append(key)
        else:
            held[key[len(name) + 1:]] = data
    held.update(fetch(rest))
    return held


def _metadata_to_copy(name: str, listing: Mapping[str, int]) -> list[str]:
    """The objects a reader needs locally: the root zarr.json (the commit), every array's zarr.json and
    the manifest's chunks. A zarr.json with another node's zarr.json under it is a group (Zarr v3 arrays
    have no children) that the reader never opens: not copied (W1: 16 of 36 metadata GETs)."""
    suffix = "/" + COMMIT_OBJECT
    nodes = [key[:-len(suffix)] for key in listing if key.endswith(suffix)]
    parents = {node.rsplit("/", depth)[0] for node in nodes for depth in range(1, node.count("/") + 1)}
    manifest_chunks = f"{name}/{MANIFEST_PATH}/"  # its chunk file, in either chunk key encoding
    return [key for key in listing
            if (key.endswith(suffix) and (key[:-len(suffix)] not in parents or key[:-len(suffix)] == name))
            or key.startswith(manifest_chunks)]



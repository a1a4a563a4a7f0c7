"""Reading a checkpoint on an object store: which container is there, is it committed, and staging its metadata for the reader.

The read side of "Commit without rename" (docs/guide/object-storage.md): a
Zarr prefix is a checkpoint only once its commit object (the root
`zarr.json`, written last by checkpoint/publish/remote.py) is there; an HDF5
checkpoint is one object. `stage_for_reading` lists a Zarr prefix once and
holds the metadata its reader opens in memory, the chunk objects read from
the bucket on demand (storage/staged_read.py's StagedZarrStorage). Writes
nothing; the commit, the sweep and uploads are publish/remote.py's.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path

from varstore.backends import get_backend
from varstore.checkpoint.format.manifest import INDEX_HEADER_BYTES, MANIFEST_PATH, decode_index_header
from varstore.errors import CheckpointNotFoundError, NotACheckpointError, VarstoreError
from varstore.storage import ObjectStore, storage_for
from varstore.storage.staged_read import StagedZarrStorage

__all__ = ["container_of", "committed", "is_checkpoint", "stage_for_reading", "PENDING_MARKER", "COMMIT_OBJECT"]

#: A Zarr checkpoint's "save started, not finished" marker, relative to its prefix.
PENDING_MARKER = "_varstore/pending"
#: A Zarr checkpoint's commit object, relative to its prefix (written last, create-only).
COMMIT_OBJECT = "zarr.json"


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

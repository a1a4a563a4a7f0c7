"""SnapshotReader: one step of an incremental checkpoint repository (an Icechunk snapshot) read as a checkpoint.

A snapshot written by checkpoint/manage/incremental.py holds a varstore Zarr
v3 checkpoint's manifest, arrays and attributes; this reader takes names,
shapes, dtypes, flags, collections and crc32c from the manifest, reads one
variable's single chunk from the snapshot (raw, or blosc-decoded: the codec
chain of backends/zarr3/codecs.py) and checks its crc32c over the decoded
bytes, as the Zarr reader does. In a local repository the chunks' objects are
read directly where the snapshot's own files say they lie (icechunk_layout),
each taken only when its size and crc32c match; otherwise (object storage,
a mismatch, a missing object) Icechunk's store reads it, the following
variables' chunks fetched concurrently ahead (READ_AHEAD_BYTES). Locations are `<repository>@<tag>`
(`runs/a7@ckpt-1300`, `s3://b/runs/a7@ckpt-1300`); a repository named
without a tag opens its newest step. Never writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore._limits import check_value_size, load_json
from varstore.backends.zarr3.codecs import decode_chunk, is_compressed
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import MANIFEST_PATH, Record, decode_manifest, format_checksum, logical_dtype
from varstore.checkpoint.read.icechunk_layout import MAX_METADATA_BYTES, ChunkPlace, LayoutError, SnapshotLayout
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.errors import ChecksumError, CheckpointNotFoundError, CorruptCheckpointError, UnknownVariableError
from varstore.storage import is_url
from varstore.storage.icechunk_repo import IcechunkRepository, SnapshotView, is_repository

__all__ = ["SnapshotReader", "split_location", "open_snapshot", "steps_of"]

_LOCATION = re.compile(r"^(?P<repo>.+)@(?P<tag>[A-Za-z0-9][A-Za-z0-9._-]*)$")
_TAG_PREFIX = "ckpt-"
#: Bytes of the following variables' chunks fetched ahead of the one read (in storage order), at most.
READ_AHEAD_BYTES = 64 << 20
#: Bytes a blosc chunk may store beyond its decoded size (its 16-byte header; blosc never expands more).
_BLOSC_SLACK = 64
#: A chunk's stored bytes: Icechunk's `bytes`, or the buffer a direct read filled.
ChunkBytes = bytes | npt.NDArray[np.uint8]


def _local_layout(snapshot: SnapshotView) -> SnapshotLayout | None:
    """The layout of a snapshot of a local repository, read from its files (chunks are then read straight
    from their objects); None for object storage or a snapshot file this reader does not parse."""
    if is_url(snapshot.location):
        return None
    try:
        return SnapshotLayout(Path(os.path.abspath(snapshot.location)), snapshot.snapshot_id)
    except LayoutError:
        return None


def _manifest_crc32c(root_data: bytes, location: str) -> Any:
    """The manifest's crc32c the root group's zarr.json records (varstore_manifest_crc32c), or None."""
    root = load_json(root_data, f"'{location}' zarr.json")
    attrs = root.get("attributes") if isinstance(root, dict) else None
    return attrs.get("varstore_manifest_crc32c") if isinstance(attrs, dict) else None


def _places(layout: SnapshotLayout, paths: list[str]) -> dict[str, ChunkPlace]:
    """Where the chunks of `paths` lie ({} when a manifest cannot be read: every chunk goes through Icechunk)."""
    try:
        return layout.places(paths)
    except LayoutError:
        return {}


def split_location(location: os.PathLike[str] | str) -> tuple[str, str | None] | None:
    """(repository, tag) of `<repository>@<tag>` (a local Icechunk repository and any tag, or an object-store
    URL and a ckpt-<step> tag), (repository, None) of a local Icechunk repository named alone, or None
    when `location` is neither (an ordinary checkpoint path, `s3://b/model@v2.safetensors`)."""
    text = os.fspath(location)
    match = _LOCATION.match(text)
    if match is not None and (is_repository(match.group("repo")) or (  # a URL: only the tags varstore makes
            "://" in match.group("repo") and re.fullmatch(r"ckpt-\d+", match.group("tag")) is not None)):
        return match.group("repo"), match.group("tag")
    if is_repository(text):
        return text, None
    return None


def steps_of(repo: IcechunkRepository) -> list[tuple[int, str]]:
    """(step, snapshot id) of every ckpt-<step> tag, oldest step first."""
    found = []
    for tag, snapshot in repo.tags().items():
        rest = tag[len(_TAG_PREFIX):] if tag.startswith(_TAG_PREFIX) else ""
        if rest.isdigit():
            found.append((int(rest), snapshot))
    return sorted(found)


def open_snapshot(location: os.PathLike[str] | str, storage_options: Mapping[str, object] | None = None,
                  tag: str | None = None) -> SnapshotReader:
    """Opens `<repository>@<tag>` (or `tag` of `location`; without either, the newest ckpt-<step>).

    Raises:
      CheckpointNotFoundError: no repository, no such tag, or a repository without steps.
      CorruptCheckpointError: the snapshot's manifest is missing or damaged.
    """
    split = split_location(location)
    repo_location, found_tag = split if split is not None else (os.fspath(location), None)
    tag = tag or found_tag
    repo = IcechunkRepository(repo_location, storage_options)
    if tag is None:
        steps = steps_of(repo)
        if not steps:
            raise CheckpointNotFoundError(f"the incremental checkpoint repository '{repo_location}' has no "
                                          f"{_TAG_PREFIX}<step> snapshot yet")
        tag = f"{_TAG_PREFIX}{steps[-1][0]}"
    return SnapshotReader(repo.readonly(tag), f"{repo_location}@{tag}")


class SnapshotReader(CheckpointReader):
    """One snapshot of an incremental checkpoint repository; see CheckpointReader.

    Attributes (besides CheckpointReader's):
      snapshot: the SnapshotView read (its `store` is the Icechunk session's zarr store).
    """

    format = "varstore-icechunk"

    def __init__(self, snapshot: SnapshotView, location: str) -> None:
        super().__init__(Path(location))
        self.location = location
        self.snapshot = snapshot
        self._layout = _local_layout(snapshot)
        self._places: dict[str, ChunkPlace] | None = None  # filled at the first value read (local repositories)
        root_data, manifest = self._direct_manifest()
        if root_data is None or manifest is None:
            root_data, manifest = snapshot.get_many(["zarr.json", f"{MANIFEST_PATH}/c/0"])
        if root_data is None or manifest is None:
            raise CorruptCheckpointError(f"'{location}' holds no varstore checkpoint (no manifest); "
                                         f"it was not written by varstore's CheckpointManager(format=\"icechunk\")")
        expected = _manifest_crc32c(root_data, location)
        if expected is not None and crc32c_raw(manifest) != expected:
            raise ChecksumError(f"the manifest of '{location}' does not match its crc32c; restore another step")
        self.header, records = decode_manifest(manifest, f"'{location}'")
        self._records: dict[str, Record] = {record.name: record for record in records}
        self._order = [record.name for record in records]
        self.step = self.header.get("step")
        self.metadata = dict(self.header.get("metadata") or {})
        self.format_version = self.header.get("format_version")
        self._documents: dict[str, dict[str, Any]] = {}
        self._prepared = False  # _prepare ran (at the first value read)
        self._ahead: dict[str, Future[bytes | None]] = {}  # chunks fetched ahead of their read (READ_AHEAD_BYTES)
        self._waiting = 0  # bytes of the chunks in self._ahead
        self._next = 0  # position in storage order of the next variable to read ahead
        self._position = {name: k for k, name in enumerate(self._order)}

    def _direct_manifest(self) -> tuple[bytes | None, bytes | None]:
        """(root zarr.json, manifest) read from a local repository's files, or (None, None) unless the manifest
        is found there and matches the crc32c the root records (then Icechunk reads both)."""
        if self._layout is None:
            return None, None
        root_data = self._layout.documents.get("")
        place = _places(self._layout, [MANIFEST_PATH]).get(MANIFEST_PATH)
        found = self._layout.read(place, MAX_METADATA_BYTES) if place is not None and root_data is not None else None
        if found is None or root_data is None:
            return None, None
        expected = _manifest_crc32c(root_data, self.location)
        return (root_data, bytes(found)) if expected is not None and crc32c_raw(found) == expected else (None, None)

    def keys(self) -> list[str]:
        return list(self._order)

    def _record(self, name: str) -> Record:
        record = self._records.get(name)
        if record is None:
            raise UnknownVariableError(f"no variable '{name}' in '{self.location}'")
        return record

    def info(self, name: str) -> VariableInfo:
        record = self._record(name)
        return VariableInfo(record.name, record.shape, record.dtype, record.nbytes, record.trainable,
                            tuple(record.collections), format_checksum(record.checksum), record.device)

    def _prepare(self) -> None:
        """At the first value read: where every chunk lies (a local repository's manifests), or else every
        array's zarr.json in one concurrent batch through Icechunk (what the read-ahead needs)."""
        self._prepared = True
        paths = [record.path or record.name for record in self._records.values() if record.nbytes]
        if self._layout is not None:  # zarr.json documents are parsed when needed, from the snapshot file
            self._places = _places(self._layout, paths)
            return
        for path, data in zip(paths, self.snapshot.get_many(f"{path}/zarr.json" for path in paths)):
            if data is not None:
                document = load_json(data, f"'{self.location}' {path}/zarr.json")
                if isinstance(document, dict) and document.get("node_type") == "array":
                    self._documents[path] = document

    def _chunk(self, name: str, key: str) -> bytes | None:
        """The stored chunk of `name`. Reading one starts fetching the chunks of the variables after it
        in storage order, concurrently, while at most READ_AHEAD_BYTES of them wait unread; each read
        tops the window up before it waits, so a bulk restore consumes chunks while the next ones arrive."""
        future = self._ahead.pop(name, None)
        if future is None:  # not read ahead (first read, or out of order): the read-ahead starts from here
            self._ahead.clear()
            self._waiting = 0
            future = self.snapshot.fetch(key)
            self._next = self._position[name] + 1
        else:
            self._waiting -= self._records[name].nbytes
        while self._next < len(self._order) and (not self._ahead or self._waiting < READ_AHEAD_BYTES):
            following = self._records[self._order[self._next]]
            path = following.path or following.name
            document = self._documents.get(path)
            if self._places and path in self._places:  # read straight from its object
                self._next += 1
                continue
            if document is None or not following.nbytes:
                if following.nbytes:  # no zarr.json read for it: stop here, its own read fetches it
                    break
                self._next += 1
                continue
            if self._waiting + following.nbytes > READ_AHEAD_BYTES and self._ahead:
                break
            self._ahead[following.name] = self.snapshot.fetch(f"{path}/c" + "/0" * len(document.get("shape") or ()))
            self._waiting += following.nbytes
            self._next += 1
        return future.result()

    def _document(self, path: str) -> dict[str, Any]:
        document = self._documents.get(path)
        if document is None:
            data = self._layout.documents.get(path) if self._layout is not None else None
            if data is None:
                data = self.snapshot.get(f"{path}/zarr.json")
            if data is None:
                raise CorruptCheckpointError(f"array '{path}' is missing from '{self.location}'")
            document = load_json(data, f"'{self.location}' {path}/zarr.json")
            if not isinstance(document, dict) or document.get("node_type") != "array":
                raise CorruptCheckpointError(f"'{path}' of '{self.location}' is not a Zarr v3 array")
            self._documents[path] = document
        return document

    def stored_bytes(self, name: str) -> ChunkBytes:
        """The decoded bytes of variable `name`'s chunk, crc32c checked (empty for an empty value).

        In a local repository the chunk's object is read directly (its place from the snapshot's manifest
        files, icechunk_layout); a raw chunk is taken when its bytes have the recorded size and crc32c, a
        compressed one after the checks below. Any other outcome (object missing, shorter, other bytes:
        garbage-collected, damaged, or a layout not read here) reads the chunk through Icechunk instead.
        """
        record = self._record(name)
        if record.nbytes == 0:
            return b""
        if not self._prepared:
            self._prepare()
        path = record.path or record.name
        place = self._places.get(path) if self._places else None
        raw = place is not None and place.length == record.nbytes and record.checksum is not None
        if raw and self._layout is not None and place is not None:  # the bytes are the value iff crc32c matches
            check_value_size(name, self.location, record.nbytes, self.max_bytes, stored=place.length)
            found = self._layout.read(place, record.nbytes)
            if found is not None and crc32c_raw(found) == record.checksum:
                return found
        document = self._document(path)
        shape = document.get("shape")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise CorruptCheckpointError(f"array '{path}' of '{self.location}' has a bad shape {shape!r}")
        compressed = is_compressed(document.get("codecs"))
        if place is not None and not raw and self._layout is not None:  # a compressed chunk's object
            found = self._layout.read(place, record.nbytes + (_BLOSC_SLACK if compressed else 0))
            if found is not None:
                try:
                    return self._checked(name, record, found, compressed)
                except (ChecksumError, CorruptCheckpointError):
                    pass  # damaged or replaced: Icechunk's own read decides
        return self._checked(name, record, self._chunk(name, f"{path}/c" + "/0" * len(shape)), compressed)

    def _checked(self, name: str, record: Record, data: ChunkBytes | None, compressed: bool) -> ChunkBytes:
        """`data`, the stored chunk of `name`, decoded and checked against its size and crc32c."""
        where = f"variable '{name}' of '{self.location}'"
        if data is None:
            raise CorruptCheckpointError(f"{where}: its chunk is missing; restore another step")
        check_value_size(name, self.location, record.nbytes, self.max_bytes, stored=len(data), filtered=compressed)
        if compressed:
            data = decode_chunk(bytes(data), record.nbytes, where)
        if len(data) != record.nbytes:
            raise CorruptCheckpointError(f"{where}: its chunk holds {len(data)} bytes, expected {record.nbytes}")
        if record.checksum is not None and crc32c_raw(data) != record.checksum:
            raise ChecksumError(f"{where}: crc32c mismatch (stored {format_checksum(record.checksum)}, "
                                f"read {format_checksum(crc32c_raw(data))}); restore another step")
        return data

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        record = self._record(name)
        dtype = logical_dtype(record.dtype)
        data = self.stored_bytes(name)
        result = checked_out(name, record.shape, dtype, out)
        if record.nbytes:
            flat = result.reshape(-1).view(np.uint8)
            flat[...] = np.frombuffer(data, dtype=np.uint8)
        return result

    def read_view(self, name: str) -> npt.NDArray[Any]:
        """Variable `name`'s value as a read-only view of the fetched (or decoded) chunk bytes: `read`
        without its copy, for callers that copy the value into their own target (restore). A small value
        read directly shares a block of icechunk_layout.BLOCK_BYTES with others: keep copies, not views."""
        record = self._record(name)
        data = self.stored_bytes(name)
        return np.frombuffer(data, dtype=logical_dtype(record.dtype)).reshape(record.shape)

    def close(self) -> None:
        self.snapshot.close()


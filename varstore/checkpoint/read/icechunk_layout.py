"""Where a local Icechunk repository's snapshot keeps each array's zarr.json and its chunk (0, ..., 0), read from
the snapshot and manifest files themselves, so a restore can read chunk objects directly.

Icechunk's specification (version 1, icechunk 1.x; docs/docs/spec.md and
icechunk/flatbuffers/*.fbs of earth-mover/icechunk): `snapshots/<id>` and
`manifests/<id>` are a 39-byte header (magic "ICE🧊CHUNK", 24 bytes of
writer name, spec version 1, file type 1 snapshot / 2 manifest,
compression 0 none / 1 zstd) then a flatbuffer. A snapshot's nodes carry
their path, their zarr.json bytes (`user_data`, what the store returns for
`<path>/zarr.json`) and, for an array, its manifests; a manifest's chunk
refs are inline bytes, a native object `chunks/<id>` (offset, length) or a
virtual location (left out here). Ids are 12 (8 for nodes) random bytes,
named in paths in Crockford base 32, so an object path stays inside the
repository whatever the file says.

The files are hostile until checked: every offset is bounded by the buffer,
every count by what the buffer can hold, decoded metadata by
MAX_METADATA_BYTES, a chunk's length by the object's size and the caller's
limit before anything is allocated; only regular files are opened (never a
symlink, a FIFO or a device). Anything unexpected raises LayoutError, an
internal error its callers catch to read through Icechunk instead; the
chunk bytes found are checked by the caller (size, crc32c). Knows nothing
about checkpoints; never writes.
"""

from __future__ import annotations

import io
import os
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from varstore.backends.zarr3.zstd_stream import ZstdStreamError, decode_bounded

__all__ = ["ChunkPlace", "LayoutError", "SnapshotLayout", "object_name", "MAX_METADATA_BYTES"]

#: The most bytes a snapshot or manifest file may hold, stored or decoded (else the layout is not used).
MAX_METADATA_BYTES = 256 << 20
#: Bytes of the blocks small chunks are read into (a block lives while a value read into it does).
BLOCK_BYTES = 32 << 20
_MAGIC = "ICE🧊CHUNK".encode()
_HEADER = len(_MAGIC) + 24 + 3
_SNAPSHOT, _MANIFEST = 1, 2
_I32, _U16, _U32 = struct.Struct("<i"), struct.Struct("<H"), struct.Struct("<I")
_U8, _U64 = struct.Struct("<B"), struct.Struct("<Q")
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base 32


class LayoutError(ValueError):
    """A snapshot or manifest file that is missing, damaged or not the layout read here (callers fall back)."""


def object_name(object_id: bytes) -> str:
    """An object id as Icechunk names it in paths: Crockford base 32, no padding (12 bytes: 20 characters)."""
    bits = 8 * len(object_id)
    count = -(-bits // 5)
    number = int.from_bytes(object_id, "big") << (5 * count - bits)
    return "".join(_ALPHABET[(number >> (5 * k)) & 31] for k in range(count - 1, -1, -1))


@dataclass(frozen=True)
class ChunkPlace:
    """Where an array's chunk lies: `length` bytes at `offset` of the object `chunks/<name>`, or `inline` bytes."""

    name: str | None
    offset: int
    length: int
    inline: bytes | None = None


class _Flat:
    """Bounded reads of one flatbuffer (little-endian; tables through their vtables)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def _at(self, fmt: struct.Struct, at: int) -> int:
        try:
            if at < 0:
                raise struct.error(at)
            return int(fmt.unpack_from(self.data, at)[0])
        except struct.error:
            raise LayoutError(f"an offset {at} outside the {len(self.data)}-byte buffer") from None

    def field(self, table: int, index: int) -> int | None:
        """The position of field `index` of the table at `table`, or None when absent."""
        try:  # the hot path: struct.error covers a position past the end, the checks a negative one
            vtable = table - _I32.unpack_from(self.data, table)[0] if table >= 0 else -1
            if vtable < 0:
                raise struct.error(vtable)
            if 6 + 2 * index > _U16.unpack_from(self.data, vtable)[0]:
                return None
            offset: int = _U16.unpack_from(self.data, vtable + 4 + 2 * index)[0]
        except struct.error:
            raise LayoutError(f"a table at {table} outside the {len(self.data)}-byte buffer") from None
        return None if offset == 0 else table + offset

    def ref(self, at: int) -> int:
        try:
            if at < 0:
                raise struct.error(at)
            return at + int(_U32.unpack_from(self.data, at)[0])
        except struct.error:
            raise LayoutError(f"an offset {at} outside the {len(self.data)}-byte buffer") from None

    def table(self, table: int, index: int) -> int | None:
        at = self.field(table, index)
        return None if at is None else self.ref(at)

    def vector(self, table: int, index: int, width: int) -> tuple[int, int]:
        """(position of the first element, count) of a vector field; (0, 0) when absent."""
        at = self.field(table, index)
        if at is None:
            return 0, 0
        start = self.ref(at)
        count = self._at(_U32, start)
        if start + 4 + count * width > len(self.data):
            raise LayoutError(f"a vector of {count} elements past the buffer's end")
        return start + 4, count

    def tables(self, table: int, index: int) -> list[int]:
        start, count = self.vector(table, index, 4)
        return [self.ref(start + 4 * k) for k in range(count)]

    def raw(self, table: int, index: int, width: int) -> bytes | None:
        """The `width` bytes of a struct field (an object id), or None when absent."""
        at = self.field(table, index)
        if at is None:
            return None
        if at < 0 or at + width > len(self.data):
            raise LayoutError("a struct field past the buffer's end")
        return self.data[at:at + width]

    def blob(self, table: int, index: int) -> bytes | None:
        """A [uint8] or string field's bytes, or None when absent."""
        if self.field(table, index) is None:
            return None
        start, count = self.vector(table, index, 1)
        return self.data[start:start + count]

    def scalar(self, table: int, index: int, fmt: struct.Struct, default: int = 0) -> int:
        at = self.field(table, index)
        return default if at is None else self._at(fmt, at)


def _open_regular(path: str) -> io.FileIO:
    """`path` opened unbuffered for reading when it is a regular file and not a symlink (never blocking on a
    FIFO, never reading a device: those raise OSError, and callers then read through Icechunk)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"'{path}' is not a regular file")
        return open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _flatbuffer(path: str, kind: int) -> _Flat:
    """The flatbuffer of an Icechunk metadata file of type `kind`, header checked and zstd decoded (bounded)."""
    try:
        with _open_regular(path) as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(size) if size <= MAX_METADATA_BYTES else b""
    except OSError as err:
        raise LayoutError(f"cannot read '{path}': {err}") from err
    if size > MAX_METADATA_BYTES or len(data) < _HEADER + 4 or not data.startswith(_MAGIC):
        raise LayoutError(f"'{path}' is not an Icechunk metadata file of at most {MAX_METADATA_BYTES:,} bytes")
    version, found, compression = data[_HEADER - 3:_HEADER]
    if version != 1 or found != kind or compression not in (0, 1):
        raise LayoutError(f"'{path}': spec version {version}, file type {found}, compression {compression}; "
                          f"read here: version 1, type {kind}, compression none or zstd")
    body = data[_HEADER:]
    if compression == 1:
        try:
            body = decode_bounded(body, MAX_METADATA_BYTES)
        except ZstdStreamError as err:
            raise LayoutError(f"'{path}' does not decode: {err}") from err
    return _Flat(body)


def _array_manifests(flat: _Flat, node: int) -> list[str]:
    """The names of the manifests holding chunk (0, ..., 0) of the array node at `node`."""
    data = flat.table(node, 4)
    if data is None:
        raise LayoutError("an array node without its data")
    found = []
    for ref in flat.tables(data, 2):  # ArrayNodeData.manifests: ManifestRef {object_id, extents}
        object_id = flat.raw(ref, 0, 12)
        start, count = flat.vector(ref, 1, 8)  # ChunkIndexRange {from: u32, to: u32} per dimension
        if object_id is None:
            raise LayoutError("a manifest reference without its id")
        extents = [struct.unpack_from("<II", flat.data, start + 8 * k) for k in range(count)]
        if all(low <= 0 < high for low, high in extents):
            found.append(object_name(object_id))
    return found


def _zero_chunk(flat: _Flat, refs: list[int]) -> ChunkPlace | None:
    """The place of the chunk whose index is all zeros among ChunkRef tables `refs` (None: virtual or absent)."""
    for ref in refs:
        start, count = flat.vector(ref, 0, 4)
        if any(struct.unpack_from("<I", flat.data, start + 4 * k)[0] for k in range(count)):
            continue
        inline = flat.blob(ref, 1)
        if inline is not None:
            return ChunkPlace(None, 0, len(inline), inline)
        chunk_id = flat.raw(ref, 4, 12)
        if chunk_id is None or flat.field(ref, 5) is not None:  # a virtual reference (location): not read here
            return None
        return ChunkPlace(object_name(chunk_id), flat.scalar(ref, 2, _U64), flat.scalar(ref, 3, _U64))
    return None


class SnapshotLayout:
    """One snapshot of the local repository at `root` as its files lay it out.

    Attributes:
      documents: {node path without the leading '/' ("" for the root group): its zarr.json bytes}.
    """

    def __init__(self, root: Path, snapshot_id: str) -> None:
        """Reads `snapshots/<snapshot_id>` (manifests are read by `places`).

        Raises:
          LayoutError: the file is missing, damaged or of another layout (read through Icechunk instead).
        """
        if len(snapshot_id) != 20 or not snapshot_id.isalnum():
            raise LayoutError(f"a snapshot id {snapshot_id!r} that is not 20 base-32 characters")
        self.root = os.fspath(root)
        flat = _flatbuffer(os.path.join(self.root, "snapshots", snapshot_id), _SNAPSHOT)
        snapshot = flat.ref(0)
        own_id = flat.raw(snapshot, 0, 12)
        if own_id is None or object_name(own_id) != snapshot_id:
            raise LayoutError(f"snapshot file '{snapshot_id}' names another snapshot")
        self._flat = flat
        self._block: npt.NDArray[np.uint8] | None = None  # where small chunks are read (see _take)
        self._used = 0
        self.documents: dict[str, bytes] = {}
        self._arrays: dict[str, tuple[int, bytes]] = {}  # path -> (node table, node id)
        for node in flat.tables(snapshot, 2):  # NodeSnapshot {id, path, user_data, node_data_type, node_data}
            raw_path, user_data, node_id = flat.blob(node, 1), flat.blob(node, 2), flat.raw(node, 0, 8)
            if raw_path is None or user_data is None or node_id is None:
                raise LayoutError("a node without its id, path or metadata")
            path = raw_path.decode("utf-8", "replace").lstrip("/")
            self.documents[path] = user_data
            if flat.scalar(node, 3, _U8) == 1:  # an array
                self._arrays[path] = (node, node_id)

    def places(self, paths: Iterable[str]) -> dict[str, ChunkPlace]:
        """{path: where its chunk (0, ..., 0) lies} for the arrays of `paths` whose chunk is native or
        inline (a path that is no array, a virtual chunk or an absent one is left out).

        Raises:
          LayoutError: a manifest file missing, damaged or of another layout.
        """
        manifests: dict[str, dict[bytes, str]] = {}  # manifest name -> {node id: path} of the arrays asked for
        for path in paths:
            if path in self._arrays:
                node, node_id = self._arrays[path]
                for name in _array_manifests(self._flat, node):
                    manifests.setdefault(name, {})[node_id] = path
        places: dict[str, ChunkPlace] = {}
        for name, by_node in manifests.items():
            manifest = _flatbuffer(os.path.join(self.root, "manifests", name), _MANIFEST)
            for array in manifest.tables(manifest.ref(0), 1):  # ArrayManifest {node_id, refs}
                path_of = by_node.get(manifest.raw(array, 0, 8) or b"")
                if path_of is not None and path_of not in places:
                    place = _zero_chunk(manifest, manifest.tables(array, 1))
                    if place is not None:
                        places[path_of] = place
        return places

    def _take(self, size: int) -> npt.NDArray[np.uint8]:
        """A new buffer of `size` bytes: its own under a large size, else carved from a shared block (one
        transparent huge page then backs many small chunks: a restore of many values faults half as often)."""
        if size >= BLOCK_BYTES // 4:
            return np.empty(size, dtype=np.uint8)
        if self._block is None or self._used + size > len(self._block):
            self._block, self._used = np.empty(BLOCK_BYTES, dtype=np.uint8), 0
        buffer = self._block[self._used:self._used + size]
        self._used += -(-size // 64) * 64
        return buffer

    def read(self, place: ChunkPlace, limit: int) -> npt.NDArray[np.uint8] | bytes | None:
        """The bytes at `place` (read into a new read-only buffer), or None when the object is missing, shorter than
        the place says, or the place is longer than `limit` bytes (checked before anything is allocated)."""
        if place.inline is not None:
            return place.inline if len(place.inline) <= limit else None
        if place.name is None or place.length > limit or place.offset < 0:
            return None
        try:
            with _open_regular(os.path.join(self.root, "chunks", place.name)) as file:
                if os.fstat(file.fileno()).st_size < place.offset + place.length:
                    return None
                buffer = self._take(place.length)
                file.seek(place.offset)
                view, done = buffer.data, 0
                while done < place.length:
                    count = file.readinto(view[done:])
                    if not count:
                        return None
                    done += count
        except OSError:
            return None
        buffer.flags.writeable = False
        return buffer

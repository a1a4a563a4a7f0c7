"""Recognising varstore's own checkpoints: which container, and the index-header fast path to the manifest.

A varstore HDF5 file starts with a 512-byte index header (in the HDF5 user
block) saying where the manifest is and its crc32c, so a reader finds the
manifest with two small positional reads and no HDF5 library. Otherwise the
root attribute varstore_format (read through the backend) says whether a
container is varstore's, and the manifest read that way is checked against
the crc32c the file records for it. `open_own` is all a reader's open asks of
detection, in one call: the container, then the manifest's checked bytes by
either way. Reads through the Storage protocol and the backends; never decodes
the manifest, never reads a variable.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from varstore.backends import Backend, BackendReader, get_backend
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.index_header import read_index_header
from varstore.checkpoint.format.manifest import FORMAT_NAMES, INDEX_HEADER_BYTES, MANIFEST_PATH, decode_index_header
from varstore.errors import (CheckpointNotFoundError, CorruptCheckpointError, NotACheckpointError, ObjectChangedError,
                             VarstoreError)
from varstore.storage import Storage, is_remote, storage_for
from varstore.storage._local_errors import check_readable

__all__ = ["own_container", "detect_container", "index_header", "manifest_via_index_header", "check_manifest_bytes",
           "is_varstore_checkpoint", "OwnCheckpoint", "open_own"]


def own_container(path: os.PathLike[str] | str, head: bytes | None = None) -> str | None:
    """"h5" or "zarr" when `path` is certainly a varstore checkpoint of that container, else None.

    "h5": a file that starts with a valid varstore index header (what the
    registry's varstore-hdf5 sniff decides on alone). "zarr": a directory
    whose zarr.json is a Zarr v3 group with varstore_format "varstore-zarr".
    None says nothing (a damaged or foreign file): the registry decides. `head`: the file's first
    bytes when the caller has read them (a detection Probe), so nothing is read twice.

    The one fast test of varstore's own containers: `varstore.open_checkpoint` and the registry's
    varstore-hdf5 entry both ask it.
    """
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            if head is None:
                with open(path, "rb") as handle:
                    head = handle.read(INDEX_HEADER_BYTES)
            return "h5" if decode_index_header(head[:INDEX_HEADER_BYTES]) is not None else None
        if stat.S_ISDIR(mode):
            with open(os.path.join(path, "zarr.json"), "rb") as handle:
                root = json.loads(handle.read(1 << 20))
            if (isinstance(root, dict) and root.get("zarr_format") == 3 and root.get("node_type") == "group"
                    and isinstance(root.get("attributes"), dict)
                    and root["attributes"].get("varstore_format") == "varstore-zarr"):
                return "zarr"
    except (OSError, ValueError, RecursionError):  # JSON nested too deep: the registry's readers say so
        pass
    return None


def detect_container(path: Path) -> str:
    """The backend name of the container at `path`: "zarr" (a Zarr v3 directory) or "h5" (an HDF5 file).

    Raises:
      CheckpointNotFoundError: nothing at `path`.
      NotACheckpointError: neither (naming what was found).
      CheckpointPermissionError: `path` may not be read.
      SpecialFileError: a FIFO, socket, device or symlink loop (refused after a stat, never opened).
    """
    return _backend_at(path).name


def _backend_at(path: Path) -> Backend:
    """detect_container's answer as the backend itself (its errors)."""
    if not check_readable(path):
        raise CheckpointNotFoundError(f"no checkpoint at '{path}'")
    backend = get_backend("zarr" if path.is_dir() else "h5")
    if backend.sniff(path):
        return backend
    if backend.is_directory:
        raise NotACheckpointError(f"'{path}' is a directory without a Zarr v3 zarr.json")
    raise NotACheckpointError(f"'{path}' is neither an HDF5 file nor a Zarr v3 directory")


def index_header(storage: Storage, key: str) -> tuple[int, int, int] | None:
    """(manifest offset, manifest bytes, manifest crc32c) from the index header at the start of `key`, or None.

    None for anything without a valid header: a directory, a short file, a
    file from an older writer, or an unreadable one.

    Raises:
      ObjectChangedError: an object kept open was replaced meanwhile (not a reason to try another way).
    """
    try:
        return read_index_header(functools.partial(storage.read_range, key))
    except ObjectChangedError:
        raise
    except (OSError, VarstoreError):
        return None


def manifest_via_index_header(storage: Storage, key: str) -> bytes | None:
    """The manifest's bytes found through the index header, when its crc32c matches; else None.

    None sends the caller to the backend (the HDF5 library), which also
    reports whatever is wrong with the file.

    Raises:
      ObjectChangedError: an object kept open was replaced meanwhile.
    """
    return _manifest_at(storage, key, index_header(storage, key))


def _manifest_at(storage: Storage, key: str, where: tuple[int, int, int] | None) -> bytes | None:
    """manifest_via_index_header once the header was read (`where`: index_header's answer)."""
    if where is None:
        return None
    offset, nbytes, checksum = where
    try:
        if offset + nbytes > storage.size(key):
            return None
        data = bytes(storage.read_range(key, offset, nbytes))
    except ObjectChangedError:
        raise
    except (OSError, VarstoreError):
        return None
    if crc32c_raw(data) != checksum:
        return None
    return data


class OwnCheckpoint:
    """What `open_own` found: the container's backend, the manifest's checked bytes, whether they came
    through the index header (`direct`: its offsets are trusted), and the backend reader opened when
    they did not (the caller owns it), else None."""

    __slots__ = ("backend", "manifest", "direct", "backend_reader")

    def __init__(self, backend: Backend, manifest: bytes, direct: bool, backend_reader: BackendReader | None) -> None:
        self.backend = backend
        self.manifest = manifest
        self.direct = direct
        self.backend_reader = backend_reader


def open_own(path: Path, fmt: str | None, storage: Storage, key: str,
             source: Callable[[], BinaryIO | Mapping[str, bytes]] | None = None) -> OwnCheckpoint:
    """Everything opening a varstore checkpoint asks of detection, in one call: which container (`fmt`
    None: detect_container, a local path), then the manifest's bytes: through the index header of a
    single file (read from `storage` under `key`, kept open by the caller), else through the backend
    (opened on `path`, or on `source()` for an object store), its root attribute varstore_format checked
    and the bytes checked against every crc32c the file records for them.

    Raises:
      CheckpointNotFoundError, NotACheckpointError, CheckpointPermissionError, SpecialFileError: as detect_container.
      NotACheckpointError: a container without varstore_format and without a manifest.
      CorruptCheckpointError: a damaged varstore_format, or manifest bytes that fail their crc32c.
      ObjectChangedError: an object kept open was replaced meanwhile.
    """
    backend = _backend_at(path) if fmt is None else get_backend(fmt)
    where = None
    if not backend.is_directory:
        where = index_header(storage, key)
        data = _manifest_at(storage, key, where)
        if data is not None:
            return OwnCheckpoint(backend, data, True, None)
    opened = backend.open_reader(path, None if source is None else source())
    try:  # inside the reader's PathPin.opening: its end checks the path, so no vouch here
        root = opened.root_attrs()
        expected = FORMAT_NAMES[backend.name]
        if root.get("varstore_format") != expected:
            _refuse_format(opened, backend, path, expected, root.get("varstore_format"))
        data = opened.read_bytes(MANIFEST_PATH)
        check_manifest_bytes(data, root.get("varstore_manifest_crc32c"), where, str(path))
    except BaseException:
        opened.close()
        raise
    return OwnCheckpoint(backend, data, False, opened)


def _refuse_format(opened: BackendReader, backend: Backend, path: Path, expected: str, found: Any) -> None:
    """Raises for a root without the right varstore_format: corrupt when a manifest is there anyway.
    Raises:
      CorruptCheckpointError: `_varstore/manifest` exists, so the attribute was damaged.
      NotACheckpointError: no manifest either (a plain HDF5 file / Zarr group).
    """
    try:
        opened.array_attrs(MANIFEST_PATH)
    except VarstoreError:
        raise NotACheckpointError(
            f"'{path}' is a {backend.description} but not a varstore checkpoint (no "
            f"varstore_format attribute); open it with varstore.open_checkpoint") from None
    raise CorruptCheckpointError(
        f"'{path}' holds a varstore manifest ({MANIFEST_PATH}) but its root attribute "
        f"varstore_format is {found!r}, not {expected!r}: its root metadata is damaged; "
        f"restore from another checkpoint")


def check_manifest_bytes(data: bytes, recorded: object, header: tuple[int, int, int] | None, path: str) -> None:
    """Checks manifest bytes read through the backend against every crc32c the file records for them.

    Those are the root attribute varstore_manifest_crc32c (`recorded`) and the
    index header's manifest_crc32c (`header`, when a header is there but the
    fast path did not match, e.g. a rewritten HDF5 file). Files from older
    writers have neither.

    Raises:
      CorruptCheckpointError: naming the file and both checksums.
    """
    expected = [recorded] if recorded is not None else []
    if header is not None:
        expected.append(header[2])
    if not expected:
        return
    found = crc32c_raw(data)
    for value in expected:
        if type(value) is not int or value != found:
            recorded_text = f"{value:08x}" if type(value) is int else repr(value)
            raise CorruptCheckpointError(
                f"the manifest of '{path}' is damaged: its bytes have crc32c {found:08x}, the "
                f"checkpoint recorded {recorded_text}; restore from another checkpoint")


def is_varstore_checkpoint(path: os.PathLike[str] | str,
                           storage_options: Mapping[str, object] | None = None) -> bool:
    """True when `path` is a varstore HDF5 file or Zarr v3 directory.

    Checks the magic bytes, then the HDF5 index header or the root attribute
    varstore_format; a file whose attribute is damaged but which holds
    `_varstore/manifest` counts too (open_varstore then raises CorruptCheckpointError).
    On an object store (a URL), only a committed checkpoint counts (see remote.py).
    """
    if is_remote(path):
        from varstore.checkpoint.read.remote_read import is_checkpoint  # the object-store client: only for URLs

        return is_checkpoint(path, storage_options)
    path = Path(path)
    try:
        fmt = detect_container(path)
        if not get_backend(fmt).is_directory and manifest_via_index_header(*storage_for(path)) is not None:
            return True
        backend_reader = get_backend(fmt).open_reader(path)
        try:
            if backend_reader.root_attrs().get("varstore_format") == FORMAT_NAMES[fmt]:
                return True
            try:  # a damaged varstore_format: still varstore (open_varstore says it is corrupt)
                backend_reader.array_attrs(MANIFEST_PATH)
            except VarstoreError:
                return False
            return True
        finally:
            backend_reader.close()
    except (VarstoreError, OSError):
        return False

"""Recognising varstore's own checkpoints: which container, and the index-header fast path to the manifest.

A varstore HDF5 file starts with a 512-byte index header (in the HDF5 user
block) saying where the manifest is and its crc32c, so a reader finds the
manifest with two small positional reads and no HDF5 library. Otherwise the
root attribute varstore_format (read through the backend) says whether a
container is varstore's, and the manifest read that way is checked against
the crc32c the file records for it. Reads through the Storage protocol and the
backends; never decodes the manifest, never reads a variable.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from varstore.backends import get_backend
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import FORMAT_NAMES, INDEX_HEADER_BYTES, MANIFEST_PATH, decode_index_header
from varstore.errors import (CheckpointNotFoundError, CorruptCheckpointError, NotACheckpointError, ObjectChangedError,
                             VarstoreError)
from varstore.storage import Storage, is_remote, storage_for
from varstore.storage._local_errors import check_readable

__all__ = ["own_container", "detect_container", "index_header", "manifest_via_index_header", "check_manifest_bytes",
           "is_varstore_checkpoint"]


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
    if not check_readable(path):
        raise CheckpointNotFoundError(f"no checkpoint at '{path}'")
    if path.is_dir():
        if get_backend("zarr").sniff(path):
            return "zarr"
        raise NotACheckpointError(f"'{path}' is a directory without a Zarr v3 zarr.json")
    if get_backend("h5").sniff(path):
        return "h5"
    raise NotACheckpointError(f"'{path}' is neither an HDF5 file nor a Zarr v3 directory")


def index_header(storage: Storage, key: str) -> tuple[int, int, int] | None:
    """(manifest offset, manifest bytes, manifest crc32c) from the index header at the start of `key`, or None.

    None for anything without a valid header: a directory, a short file, a
    file from an older writer, or an unreadable one.

    Raises:
      ObjectChangedError: an object kept open was replaced meanwhile (not a reason to try another way).
    """
    try:
        data = bytes(storage.read_range(key, 0, INDEX_HEADER_BYTES))
    except ObjectChangedError:
        raise
    except (OSError, VarstoreError):
        return None
    return decode_index_header(data)


def manifest_via_index_header(storage: Storage, key: str) -> bytes | None:
    """The manifest's bytes found through the index header, when its crc32c matches; else None.

    None sends the caller to the backend (the HDF5 library), which also
    reports whatever is wrong with the file.

    Raises:
      ObjectChangedError: an object kept open was replaced meanwhile.
    """
    where = index_header(storage, key)
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

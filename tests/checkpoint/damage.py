"""Damage a saved checkpoint as a bug, a disk or another tool would (shared by the regression tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

VALUES = {"dense/kernel": np.arange(8 * 16, dtype=np.float32).reshape(8, 16),
          "dense/bias": np.arange(16, dtype=np.float32), "global_step": np.array(7, np.int64)}


def rewrite_zarr_manifest(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Applies `edit` to a Zarr checkpoint's manifest document and stores it back (its crc32c updated)."""
    from varstore.checkpoint.format.checksum import crc32c_raw

    chunk = path / "_varstore/manifest/0"
    document = json.loads(chunk.read_bytes())
    edit(document)
    raw = json.dumps(document).encode()
    chunk.write_bytes(raw)
    meta_file = path / "_varstore/manifest/zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [len(raw)]
    meta_file.write_text(json.dumps(meta))
    root = json.loads((path / "zarr.json").read_text())
    if "varstore_manifest_crc32c" in root["attributes"]:
        root["attributes"]["varstore_manifest_crc32c"] = crc32c_raw(raw)
        (path / "zarr.json").write_text(json.dumps(root))


def manifest_bytes(path: Path) -> bytes:
    from tests.checkpoint.plain import plain_array

    return plain_array(path, "_varstore/manifest").tobytes()


def root_attrs(path: Path) -> dict:
    if path.suffix == ".zarr":
        return json.loads((path / "zarr.json").read_text())["attributes"]
    import h5py

    with h5py.File(path, "r") as handle:
        return {key: handle.attrs[key] for key in handle.attrs}


def set_root_attr(path: Path, key: str, value: object) -> None:
    """Sets (value not None) or deletes a root attribute, as another tool would."""
    if path.suffix == ".zarr":
        document = json.loads((path / "zarr.json").read_text())
        if value is None:
            document["attributes"].pop(key, None)
        else:
            document["attributes"][key] = value
        (path / "zarr.json").write_text(json.dumps(document))
        return
    import h5py

    with h5py.File(path, "r+") as handle:
        if value is None:
            del handle.attrs[key]
        else:
            handle.attrs[key] = value


def flip_name(path: Path) -> None:
    """'global_step' -> 'global_qtep' inside the stored manifest bytes (one bit)."""
    target = path if path.suffix == ".h5" else path / "_varstore/manifest/0"
    raw = bytearray(target.read_bytes())
    raw[raw.index(b'"global_step"') + 8] ^= 0x02
    target.write_bytes(bytes(raw))


def wipe_index_header(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"\0" * 512)


def flip_packed(path: Path, name: str, at: int = 0) -> None:
    """Flips one bit `at` bytes into packed variable `name`'s bytes inside the packed blob (either format)."""
    from varstore.backends import get_backend
    from varstore.checkpoint import open_varstore

    with open_varstore(path) as reader:
        offset = int(reader.record(name).offset) + at
    store = get_backend("h5" if path.suffix == ".h5" else "zarr").open_reader(path)
    nbytes = len(store.read_bytes("_varstore/packed"))
    extent = store.raw_extent("_varstore/packed", np.dtype("u1"), (nbytes,))
    store.close()
    assert extent is not None
    with open(extent.file, "r+b") as handle:
        handle.seek(extent.offset + offset)
        byte = handle.read(1)[0]
        handle.seek(extent.offset + offset)
        handle.write(bytes([byte ^ 0x01]))

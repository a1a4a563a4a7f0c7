"""Read varstore checkpoints with plain h5py / zarr only (what a user without varstore does)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import zarr


def plain_root_attrs(path: Path) -> dict[str, Any]:
    if path.suffix == ".h5":
        with h5py.File(path, "r") as handle:
            return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in handle.attrs.items()}
    return dict(zarr.open_group(str(path), mode="r").attrs)


def plain_array(path: Path, name: str) -> np.ndarray:
    """The stored array at `name` (storage dtype/shape), read with h5py or zarr."""
    if path.suffix == ".h5":
        with h5py.File(path, "r") as handle:
            return handle[name][()]
    return zarr.open_group(str(path), mode="r")[name][...]


def plain_attrs(path: Path, name: str) -> dict[str, Any]:
    if path.suffix == ".h5":
        with h5py.File(path, "r") as handle:
            return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in handle[name].attrs.items()}
    return dict(zarr.open_group(str(path), mode="r")[name].attrs)


def plain_manifest(path: Path) -> dict[str, Any]:
    return json.loads(plain_array(path, "_varstore/manifest").tobytes())


def plain_packed_value(path: Path, name: str) -> bytes:
    """The bytes of a packed variable, found through the manifest as docs/checkpoint-format.md says."""
    manifest = plain_manifest(path)
    index = manifest["variables"]["name"].index(name)
    offset = manifest["variables"]["offset"][index]
    nbytes = manifest["variables"]["nbytes"][index]
    blob = plain_array(path, manifest["packed"]["path"])
    return blob[offset:offset + nbytes].tobytes()

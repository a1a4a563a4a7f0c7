"""Helpers for the converter tests: fixture manifests and their value hashes."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

#: fixture path (relative to fixtures/) -> its manifest (relative to fixtures/).
CHECKPOINT_FIXTURES = {
    "tf1_scopes/model.ckpt": "tf1_scopes/model.ckpt.manifest.json",
    "keras3/model.weights.h5": "keras3/model.weights.h5.manifest.json",
    "keras3/model.keras": "keras3/model.keras.manifest.json",
    "safetensors/mixed_numpy.safetensors": "safetensors/mixed_numpy.safetensors.manifest.json",
    "safetensors/mixed_torch.safetensors": "safetensors/mixed_torch.safetensors.manifest.json",
    "npz/arrays.npz": "npz/arrays.npz.manifest.json",
    "npz/arrays_compressed.npz": "npz/arrays_compressed.npz.manifest.json",
    "foreign_h5/generic.h5": "foreign_h5/generic.h5.manifest.json",
    "foreign_zarr/v2_group.zarr": "foreign_zarr/v2_group.zarr.manifest.json",
    "foreign_zarr/v3_group.zarr": "foreign_zarr/v3_group.zarr.manifest.json",
}

EXPECTED_FORMAT = {
    "tf1_scopes/model.ckpt": "tf", "keras3/model.weights.h5": "keras3", "keras3/model.keras": "keras3",
    "safetensors/mixed_numpy.safetensors": "safetensors", "safetensors/mixed_torch.safetensors": "safetensors",
    "npz/arrays.npz": "npz", "npz/arrays_compressed.npz": "npz", "foreign_h5/generic.h5": "hdf5",
    "foreign_zarr/v2_group.zarr": "zarr", "foreign_zarr/v3_group.zarr": "zarr",
}


def variables(fixtures: Path, manifest: str) -> dict[str, dict[str, Any]]:
    """name -> manifest record for every variable a reader should list (plain arrays only).

    generic.h5 and the Zarr groups list "objects"; only their raw numeric
    datasets (not compound, vlen or references) are variables. Names lose the
    leading "/".
    """
    data = json.loads((fixtures / manifest).read_text())
    records = data.get("variables")
    if records is None:
        records = [o for o in data["objects"] if o.get("kind") in ("dataset", "array")
                   and o.get("hash_scheme") == "raw_c_order" and "compound_fields" not in o]
    return {r["name"].lstrip("/"): r for r in records}


def expected_dtype(record: dict[str, Any], value: np.ndarray) -> str:
    """The logical dtype name varstore should report for a manifest record."""
    if record["dtype"] == "bytes":  # TF strings: fixed length, the longest element
        return f"S{max(1, value.dtype.itemsize)}"
    if record["dtype"].startswith("str"):
        return "U" + record["dtype_str"][2:]
    return record["dtype"]


def value_sha256(record: dict[str, Any], value: np.ndarray) -> str:
    """sha256 of a value by the manifest's hash scheme."""
    if record["hash_scheme"] == "len_prefixed_elements":
        return hashlib.sha256(b"".join(struct.pack("<Q", len(e)) + e
                                       for e in value.reshape(-1).tolist())).hexdigest()
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()

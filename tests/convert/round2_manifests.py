"""The round-2 fixtures (PyTorch, sharded safetensors, DCP, Orbax, Keras sharded, GGUF) and their manifests.

Each entry: what to open, its manifest, the format varstore should report,
and how a manifest record maps to the name and expected bytes varstore gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: path to open (relative to fixtures/) -> (manifest, expected reader format).
ROUND2_FIXTURES = {
    "torch/state_dict.pt": ("torch/state_dict.pt.manifest.json", "pytorch"),
    "torch/state_dict_legacy.pt": ("torch/state_dict_legacy.pt.manifest.json", "pytorch"),
    "torch_zip/state_dict_mixed.pt": ("torch_zip/state_dict_mixed.pt.manifest.json", "pytorch"),
    "torch_zip/optimizer.pt": ("torch_zip/optimizer.pt.manifest.json", "pytorch"),
    "torch_zip/legacy_format.pt": ("torch_zip/legacy_format.pt.manifest.json", "pytorch"),
    "hf_sharded/model": ("hf_sharded/model.manifest.json", "safetensors-sharded"),
    "dcp/default": ("dcp/default.manifest.json", "dcp"),
    "dcp/per_item_files": ("dcp/per_item_files.manifest.json", "dcp"),
    "dcp/safetensors_format": ("dcp/safetensors_format.manifest.json", "dcp"),
    "orbax/default": ("orbax/default.manifest.json", "orbax"),
    "orbax/no_ocdbt": ("orbax/no_ocdbt.manifest.json", "orbax"),
    "keras3_sharded/model.weights.json": ("keras3_sharded/model.weights.json.manifest.json", "keras3-sharded"),
    "gguf/mini.gguf": ("gguf/mini.gguf.manifest.json", "gguf"),
}

MALICIOUS = ["torch/evil.pt", "torch_zip/evil_reduce.pt", "torch_zip/evil_builtins.pt",
             "torch_zip/evil_global_in_tensor.pt"]
MARKERS = (Path("/tmp/varstore_pwned_marker"), Path("/tmp/varstore_pwned_marker2"))


def expected_variables(fixtures: Path, fixture: str) -> dict[str, dict[str, Any]]:
    """varstore name -> {"dtype", "shape", "sha256"} varstore should give for one round-2 fixture.

    Orbax leaves become "/"-joined scopes; GGUF quantized tensors are raw
    blocks (uint8, the manifest's raw_byte_shape, hashed as stored).
    """
    manifest = json.loads((fixtures / ROUND2_FIXTURES[fixture][0]).read_text())
    result = {}
    for record in manifest["variables"]:
        name = "/".join(record["tree_path"]) if "tree_path" in record else record["name"]
        if record.get("quantized"):
            result[name] = {"dtype": "uint8", "shape": record["raw_byte_shape"], "sha256": record["sha256"]}
        else:
            result[name] = {"dtype": record["dtype"], "shape": record["shape"], "sha256": record["sha256"]}
    return result


def non_tensor_entries(fixtures: Path, fixture: str) -> dict[str, Any]:
    """Dotted name -> JSON value of the manifest's non-tensor leaves ({} when it lists none)."""
    manifest = json.loads((fixtures / ROUND2_FIXTURES[fixture][0]).read_text())
    return {e["name"]: e["value"] for e in manifest.get("non_tensor_entries", [])}

"""Metadata a destination can hold is kept (issue 38, item 5): safetensors __metadata__ -> safetensors, GGUF
key-values -> GGUF, varstore metadata -> varstore; other destinations record the source under source_metadata."""

from __future__ import annotations

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

import varstore as vs
from varstore import open_checkpoint


def test_safetensors_to_safetensors_keeps_the_metadata(tmp_path):
    src = tmp_path / "m.safetensors"
    save_file({"w": np.ones(2, np.float32)}, str(src), metadata={"author": "me", "format": "pt"})
    vs.convert(src, tmp_path / "copy.safetensors")
    with safe_open(str(tmp_path / "copy.safetensors"), "np") as real:  # read back by the real library
        assert real.metadata() == {"author": "me", "format": "np", "converted_from": "m.safetensors",
                                   "source_format": "safetensors"}
    vs.convert(src, tmp_path / "copy.h5")
    with open_checkpoint(tmp_path / "copy.h5") as reader:
        assert reader.metadata["source_metadata"] == {"author": "me", "format": "pt"}


def test_varstore_to_varstore_keeps_the_metadata_as_it_was(tmp_path):
    src = vs.save(tmp_path / "m.h5", {"w": np.ones(2)}, metadata={"run": "a7", "lr": 0.1})
    vs.convert(src, tmp_path / "m.zarr")
    with open_checkpoint(tmp_path / "m.zarr") as reader:
        assert reader.metadata == {"run": "a7", "lr": 0.1, "converted_from": str(src),
                                   "source_format": "varstore-hdf5"}


def test_gguf_to_gguf_keeps_the_key_values(tmp_path, fixtures_dir):
    src = fixtures_dir / "gguf" / "mini.gguf"
    with open_checkpoint(src) as reader:
        keys = reader.metadata["gguf"]
        names = [n for n in reader.keys() if reader.info(n).dtype in ("float32", "float16")]
    vs.convert(src, tmp_path / "copy.gguf", filter=names)
    with open_checkpoint(tmp_path / "copy.gguf") as copy:
        kept = copy.metadata["gguf"]
    assert "general.architecture" in keys and "tokenizer.ggml.tokens" in keys
    assert {k: kept.get(k) for k in keys} == keys  # every key-value, e.g. the tokenizer, kept with its value

"""Round-2 formats: every benign fixture reads and round-trips to .h5/.zarr bit-exactly against its manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from round2_manifests import ROUND2_FIXTURES, expected_variables, non_tensor_entries

from varstore import convert, detect_format, open_checkpoint


def _sha(value: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()


def _check(path: Path, expected: dict[str, dict[str, object]]) -> None:
    with open_checkpoint(path) as reader:
        assert sorted(reader.keys()) == sorted(expected)
        for name, record in expected.items():
            value = reader[name]
            info = reader.info(name)
            assert info.dtype == record["dtype"], name
            assert list(value.shape) == list(record["shape"]) == list(info.shape), name
            assert info.nbytes == value.nbytes, name
            assert _sha(value) == record["sha256"], name


@pytest.mark.parametrize("fixture", sorted(ROUND2_FIXTURES))
def test_fixture_reads_bit_exact_against_its_manifest(fixtures_dir: Path, fixture: str) -> None:
    assert detect_format(fixtures_dir / fixture) == ROUND2_FIXTURES[fixture][1]
    with open_checkpoint(fixtures_dir / fixture) as reader:
        assert reader.format == ROUND2_FIXTURES[fixture][1]
        reader.verify()
    _check(fixtures_dir / fixture, expected_variables(fixtures_dir, fixture))


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("fixture", sorted(ROUND2_FIXTURES))
def test_fixture_converts_to_varstore_bit_exact(fixtures_dir: Path, tmp_path: Path, fixture: str,
                                                suffix: str) -> None:
    dst = tmp_path / f"converted{suffix}"
    expected = expected_variables(fixtures_dir, fixture)
    report = convert(fixtures_dir / fixture, dst)
    assert report.variables == len(expected)
    assert report.source_format == ROUND2_FIXTURES[fixture][1]
    with open_checkpoint(dst) as reader:
        reader.verify()
        assert reader.metadata["source_format"] == ROUND2_FIXTURES[fixture][1]
        carried = reader.metadata.get("source_metadata", {}).get("non_tensor", {})
        assert carried == non_tensor_entries(fixtures_dir, fixture)
    _check(dst, expected)


def test_torch_non_tensor_leaves_are_metadata(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "torch_zip/optimizer.pt") as reader:
        leaves = reader.metadata["non_tensor"]
        assert leaves["epoch"] == 3 and leaves["lr"] == 0.001
        assert leaves["optimizer.param_groups.0.betas"] == [0.9, 0.999]
        assert leaves["optimizer.param_groups.0.params"] == [0, 1, 2, 3, 4, 5]
        assert leaves["optimizer.param_groups.0.foreach"] is None
        assert reader.info("model.inp.weight").trainable is None  # a state dict does not record it
    with open_checkpoint(fixtures_dir / "torch_zip/state_dict_mixed.pt") as reader:
        assert reader.metadata == {"non_tensor": {"extra.comment": "nested dict with a str leaf"}}


def test_torch_views_and_shared_storage_are_exact(fixtures_dir: Path) -> None:
    for fixture in ("torch_zip/state_dict_mixed.pt", "torch_zip/legacy_format.pt"):
        with open_checkpoint(fixtures_dir / fixture) as reader:
            assert reader.format_version == ("zip" if "mixed" in fixture else "legacy")
            np.testing.assert_array_equal(reader["head.cache.k"], np.arange(8, dtype=np.float32) / 2)
            np.testing.assert_array_equal(reader["head.cache.v"],
                                          np.array([[4.0, 4.5, 5.0], [5.5, 6.0, 6.5]], np.float32))
            assert reader.info("head.cache.k").attributes["storage"] == \
                reader.info("head.cache.v").attributes["storage"]
            assert reader.info("head.cache.v").attributes["storage_offset"] == 8
            transposed = reader["backbone.blocks.0.ffn.w1.weight"]
            assert transposed.flags.c_contiguous and transposed.shape == (4, 3)
            assert reader.info("backbone.blocks.0.ffn.w1.weight").attributes["stride"] == [1, 4]
            assert reader["head.unused"].shape == (0, 3)
            assert reader["head.logit_scale"].shape == () and float(reader["head.logit_scale"]) == 1.25
            assert reader["backbone.causal_mask"].tolist() == [[False, True], [False, True]]
            assert reader["extra.counters.seen"].tolist() == [1, 2, 3]


def test_read_into_out_and_unknown_names(fixtures_dir: Path) -> None:
    from varstore import dtypes
    from varstore.errors import UnknownVariableError

    with open_checkpoint(fixtures_dir / "torch_zip/state_dict_mixed.pt") as reader:
        out = np.empty((4, 4), dtype=dtypes.as_dtype("bfloat16"))
        assert reader.read("backbone.blocks.0.mixer.out_proj.weight", out=out) is out
        with pytest.raises(UnknownVariableError, match="no tensor 'nope'"):
            reader.read("nope")


def test_dcp_values_and_chunks(fixtures_dir: Path) -> None:
    for layout in ("default", "per_item_files", "safetensors_format"):
        with open_checkpoint(fixtures_dir / "dcp" / layout) as reader:
            assert reader.metadata["non_tensor"] == {"opt.lr": 0.001, "opt.betas": [0.9, 0.999],
                                                     "iteration": 3, "label": "trial-b"}
            assert reader["net.updates"].tolist() == 5
            assert reader["net.pad.mask"].tolist() == [True, False, True, True]
    with open_checkpoint(fixtures_dir / "dcp/per_item_files") as reader:
        files = {reader.info(n).attributes["chunks"][0]["file"] for n in reader.keys()}
        assert len(files) == len(reader.keys())  # each tensor in its own file
    with open_checkpoint(fixtures_dir / "dcp/per_item_files/__0_3.distcp") as reader:  # any file opens the set
        assert reader.format == "dcp" and len(reader.keys()) == 7


def test_orbax_pytree_paths_become_scopes(fixtures_dir: Path) -> None:
    for layout, version in (("default", "ocdbt"), ("no_ocdbt", "zarr")):
        with open_checkpoint(fixtures_dir / "orbax" / layout) as reader:
            assert reader.format_version == version
            assert reader.keys() == ["counter", "optim/count", "optim/ids", "optim/mu/kernel", "weights/ln/scale",
                                     "weights/mlp/fc/bias", "weights/mlp/fc/kernel", "weights/mlp/tok/embedding"]
            assert reader.info("weights/mlp/tok/embedding").dtype == "bfloat16"
            assert reader.info("weights/mlp/fc/kernel").attributes["param"] == "weights.mlp.fc.kernel"


def test_keras_sharded_matches_the_unsharded_file(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "keras3_sharded/model.weights.json") as sharded, \
            open_checkpoint(fixtures_dir / "keras3_sharded/model.weights.h5") as whole:
        assert sorted(sharded.keys()) == sorted(whole.keys())
        for name in whole.keys():
            np.testing.assert_array_equal(sharded[name], whole[name])
        assert sharded.info("optimizer/vars/15").attributes["shard"] == "model_00002.weights.h5"
        assert sharded.metadata["layer_names"]["layers/dense/vars"] == "fc_a"


def test_gguf_metadata_raw_blocks_and_dequantize(fixtures_dir: Path, tmp_path: Path) -> None:
    manifest = json.loads((fixtures_dir / "gguf/mini.gguf.manifest.json").read_text())
    q8 = next(v for v in manifest["variables"] if v["name"] == "blk.1.ffn_gate.weight")
    with open_checkpoint(fixtures_dir / "gguf/mini.gguf") as reader:
        kv = reader.metadata["gguf"]
        assert kv["general.architecture"] == "qwen2" and kv["qwen2.block_count"] == 2
        assert kv["tokenizer.ggml.tokens"] == ["<unk>", "a", "b"]
        info = reader.info("blk.1.ffn_gate.weight")
        assert (info.dtype, info.shape) == ("uint8", (4, 68))
        assert info.attributes == {"ggml_type": "Q8_0", "ggml_ne": [64, 4], "raw_blocks": True, "shape": [4, 64]}
        assert reader.info("token_embd.weight").attributes["ggml_ne"] == [32, 16]
    with open_checkpoint(fixtures_dir / "gguf/mini.gguf", dequantize=True) as reader:
        value = reader["blk.1.ffn_gate.weight"]
        assert value.dtype == np.float32 and value.shape == (4, 64)
        assert _sha(value) == q8["dequantized"]["sha256"]
        assert _sha(reader["blk.1.attn_q.weight"]) == next(
            v["sha256"] for v in manifest["variables"] if v["name"] == "blk.1.attn_q.weight")
    report = convert(fixtures_dir / "gguf/mini.gguf", tmp_path / "dq.h5", dequantize=True)
    assert report.variables == 7
    with open_checkpoint(tmp_path / "dq.h5") as reader:
        assert _sha(reader["blk.1.ffn_gate.weight"]) == q8["dequantized"]["sha256"]
        assert reader.metadata["source_metadata"]["gguf"]["general.name"] == "mini-qwen"


def test_gguf_dequantize_matches_the_gguf_package(fixtures_dir: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from varstore.formats.gguf.reader import GGML_TYPES, _dequantize

    for type_id, (name, block, block_bytes, _) in GGML_TYPES.items():
        if name in gguf.GGMLQuantizationType.__members__:
            assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]] == (block, block_bytes), name
            assert gguf.GGMLQuantizationType[name].value == type_id
    rng = np.random.default_rng(0)
    for name in ("Q8_0", "Q4_0", "Q4_1"):
        qtype = gguf.GGMLQuantizationType[name]
        data = rng.standard_normal((4, 64)).astype(np.float32)
        raw = gguf.quants.quantize(data, qtype)
        expected = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        np.testing.assert_array_equal(_dequantize(name, raw.reshape(-1)).reshape(4, 64), expected)

"""Round-2 formats through the CLI: ls/show/diff/verify/convert, sharded output, and damaged copies.

Damaged inputs give one line "varstore: error: ..." naming the part at
fault, exit status 2, and nothing written.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from varstore import convert, open_checkpoint


def _one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("varstore: error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_ls_show_verify_diff_on_every_new_format(run, fixtures_dir: Path, tmp_path: Path) -> None:
    result = run("ls", fixtures_dir / "torch_zip/optimizer.pt")
    assert result.exit_code == 0 and "(pytorch, version zip)" in result.output
    assert "optimizer.state.5.exp_avg_sq" in result.output and "total: 27 variables" in result.output
    result = run("show", fixtures_dir / "torch_zip/optimizer.pt", "model.out.bias")
    assert result.exit_code == 0
    lines = {line.split()[0] + " " + line.split()[1]: line for line in result.output.splitlines() if line}
    assert lines["non-tensor epoch"].split()[-1] == "3"
    assert lines["non-tensor optimizer.param_groups.0.betas"].endswith("[0.9, 0.999]")
    for path in ("hf_sharded/model", "dcp/default", "orbax/no_ocdbt", "keras3_sharded/model.weights.json",
                 "gguf/mini.gguf", "torch_zip/legacy_format.pt"):
        assert run("verify", fixtures_dir / path).exit_code == 0, path
    # diff across formats: the same Keras weights sharded and unsharded are equal
    same = run("diff", fixtures_dir / "keras3_sharded/model.weights.json", fixtures_dir / "keras3_sharded/model.weights.h5")
    assert same.exit_code == 0, same.output
    # the two Orbax layouts hold the same values
    assert run("diff", fixtures_dir / "orbax/default", fixtures_dir / "orbax/no_ocdbt").exit_code == 0
    out = tmp_path / "opt.zarr"
    assert run("convert", fixtures_dir / "torch_zip/optimizer.pt", out).exit_code == 0
    assert run("diff", fixtures_dir / "torch_zip/optimizer.pt", out).exit_code == 0


def test_convert_to_sharded_safetensors_writes_the_hf_layout(run, fixtures_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sharded"
    result = run("convert", fixtures_dir / "torch_zip/optimizer.pt", out, "--max-shard-size", "300B")
    assert result.exit_code == 0, result.output
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index) == {"metadata", "weight_map"}
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) >= 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert sorted(set(index["weight_map"].values())) == shards
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    # every shard is a valid safetensors file of at most 300 bytes of data, unless one tensor is larger
    from safetensors.numpy import load_file

    total = 0
    with open_checkpoint(fixtures_dir / "torch_zip/optimizer.pt") as source:
        for shard in shards:
            tensors = load_file(str(out / shard))
            nbytes = sum(v.nbytes for v in tensors.values())
            assert nbytes <= 300 or len(tensors) == 1
            total += nbytes
            for name, value in tensors.items():
                assert index["weight_map"][name] == shard
                np.testing.assert_array_equal(value, source[name])
    assert index["metadata"]["total_size"] == total
    # and it reads back as a whole from the index, the directory or one shard
    for path in (out, out / "model.safetensors.index.json", out / shards[1]):
        with open_checkpoint(path) as reader:
            assert reader.format == "safetensors-sharded" and len(reader.keys()) == 27
    assert run("diff", fixtures_dir / "torch_zip/optimizer.pt", out).exit_code == 0


def test_sharded_writer_rejects_a_bad_size_before_writing(run, fixtures_dir: Path, tmp_path: Path) -> None:
    _one_line_error(run("convert", fixtures_dir / "gguf/mini.gguf", tmp_path / "o", "--max-shard-size", "lots"),
                    "lots")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ damaged copies
def _copy_sharded(fixtures_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fixtures_dir / "hf_sharded/model", tmp_path / "model"))


def test_truncated_shard_names_the_shard(run, fixtures_dir: Path, tmp_path: Path) -> None:
    model = _copy_sharded(fixtures_dir, tmp_path)
    shard = model / "model-00003-of-00004.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    _one_line_error(run("ls", model), "model-00003-of-00004.safetensors", "outside the")
    _one_line_error(run("convert", model, tmp_path / "out.h5"), "model-00003-of-00004.safetensors")
    assert not (tmp_path / "out.h5").exists()


def test_index_naming_a_missing_shard(run, fixtures_dir: Path, tmp_path: Path) -> None:
    model = _copy_sharded(fixtures_dir, tmp_path)
    (model / "model-00002-of-00004.safetensors").unlink()
    _one_line_error(run("verify", model / "model.safetensors.index.json"),
                    "shard 'model-00002-of-00004.safetensors', which is missing")


def _rewrite_zip(src: Path, dst: Path, member_suffix: str, cut: int) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith(member_suffix):
                data = data[:-cut]
            zout.writestr(info, data)


def test_torch_record_shorter_than_its_storage(run, fixtures_dir: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "short.pt"
    _rewrite_zip(fixtures_dir / "torch_zip/state_dict_mixed.pt", damaged, "/data/0", 4)
    line = _one_line_error(run("ls", damaged), "short.pt", "storage record 'state_dict_mixed/data/0' holds 60 bytes")
    assert "needs 64" in line


def test_truncated_legacy_torch_file(run, fixtures_dir: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "legacy.pt"
    data = (fixtures_dir / "torch_zip/legacy_format.pt").read_bytes()
    damaged.write_bytes(data[:-10])
    _one_line_error(run("ls", damaged), "legacy.pt", "storage record")


def test_gguf_cut_mid_tensor(run, fixtures_dir: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "cut.gguf"
    data = (fixtures_dir / "gguf/mini.gguf").read_bytes()
    damaged.write_bytes(data[:4000])  # inside blk.1.attn_output.weight (data bytes 2048..6144 after the header)
    _one_line_error(run("ls", damaged), "cut.gguf", "blk.1.attn_output.weight", "truncated")
    _one_line_error(run("convert", damaged, tmp_path / "o.zarr"), "blk.1.attn_output.weight")
    assert not (tmp_path / "o.zarr").exists()


def test_gguf_hostile_counts_are_refused_without_allocating(fixtures_dir: Path, tmp_path: Path) -> None:
    from varstore.errors import CorruptCheckpointError

    data = bytearray((fixtures_dir / "gguf/mini.gguf").read_bytes())
    data[8:16] = struct.pack("<Q", 10**15)  # tensor count
    (tmp_path / "big.gguf").write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="cannot fit"):
        open_checkpoint(tmp_path / "big.gguf")


def test_dcp_missing_data_file_and_orbax_missing_array(run, fixtures_dir: Path, tmp_path: Path) -> None:
    dcp = Path(shutil.copytree(fixtures_dir / "dcp/per_item_files", tmp_path / "dcp"))
    (dcp / "__0_2.distcp").unlink()
    _one_line_error(run("ls", dcp), "data file '__0_2.distcp'", "net.tok.table")
    orbax = Path(shutil.copytree(fixtures_dir / "orbax/no_ocdbt", tmp_path / "orbax"))
    shutil.rmtree(orbax / "optim.ids")
    _one_line_error(run("ls", orbax), "optim.ids")


def test_dcp_truncated_data_file(run, fixtures_dir: Path, tmp_path: Path) -> None:
    dcp = Path(shutil.copytree(fixtures_dir / "dcp/default", tmp_path / "dcp"))
    data = (dcp / "__0_0.distcp").read_bytes()
    (dcp / "__0_0.distcp").write_bytes(data[:len(data) - 2000])
    _one_line_error(run("ls", dcp), "__0_0.distcp", "truncated")


def test_convert_carries_non_tensor_metadata_into_safetensors(fixtures_dir: Path, tmp_path: Path) -> None:
    convert(fixtures_dir / "dcp/default", tmp_path / "d.safetensors")
    with open_checkpoint(tmp_path / "d.safetensors") as reader:
        assert json.loads(reader.metadata["non_tensor"])["label"] == "trial-b"
        assert hashlib.sha256(reader["net.fc.bias"].tobytes()).hexdigest() == json.loads(
            (fixtures_dir / "dcp/default.manifest.json").read_text())["variables"][1]["sha256"]

"""The round-2 formats as registry entries: one probe per detection, writer options, names and the refusal split."""

from __future__ import annotations

import builtins
import io
import os
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore import convert, detect_format, open_checkpoint
from varstore.formats import registry
from varstore.errors import ConversionError, UnsafeFormatError

FILE_FIXTURES = {
    "torch/state_dict.pt": "pytorch",
    "torch/state_dict_legacy.pt": "pytorch",
    "torch_zip/optimizer.pt": "pytorch",
    "gguf/mini.gguf": "gguf",
    "keras3_sharded/model.weights.json": "keras3-sharded",
    "hf_sharded/model/model.safetensors.index.json": "safetensors-sharded",
}


@pytest.mark.parametrize("fixture", sorted(FILE_FIXTURES))
def test_detecting_a_round2_file_opens_it_once(fixtures_dir: Path, fixture: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = fixtures_dir / fixture
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    real_os_open = os.open

    def counting_os_open(file: Any, *args: Any, **kwargs: Any) -> Any:  # the probe's non-blocking open
        opened.append(str(file))
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    monkeypatch.setattr(os, "open", counting_os_open)
    assert detect_format(path) == FILE_FIXTURES[fixture]
    assert opened.count(str(path)) == 1


def test_a_shard_of_a_set_is_detected_as_the_whole_set(fixtures_dir: Path) -> None:
    shard = sorted((fixtures_dir / "hf_sharded/model").glob("*-of-*.safetensors"))[0]
    assert detect_format(shard) == "safetensors-sharded"
    with open_checkpoint(shard) as whole, open_checkpoint(fixtures_dir / "hf_sharded/model") as by_directory:
        assert whole.keys() == by_directory.keys() and len(whole.keys()) > 1


def test_max_shard_size_picks_the_sharded_writer_and_is_refused_by_others(fixtures_dir: Path,
                                                                          tmp_path: Path) -> None:
    src = fixtures_dir / "torch_zip/optimizer.pt"
    report = convert(src, tmp_path / "out", max_shard_size="300B")
    assert report.destination_format == "safetensors-sharded"
    index = json.loads((tmp_path / "out/model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    with pytest.raises(ConversionError, match=r"max_shard_size does not apply to npz \('.*x.npz'\): "
                                              r"it is an option of safetensors-sharded"):
        convert(src, tmp_path / "x.npz", to_format="npz", max_shard_size="1KB")
    assert not (tmp_path / "x.npz").exists()
    with pytest.raises(ConversionError, match="shard size"):
        convert(src, tmp_path / "bad", to_format="hf-sharded", max_shard_size="lots")
    assert not (tmp_path / "bad").exists()


def test_reader_options_reach_the_gguf_reader_by_name_or_detection(fixtures_dir: Path) -> None:
    path = fixtures_dir / "gguf/mini.gguf"
    with open_checkpoint(path, format="ggml", dequantize=True) as named, open_checkpoint(path) as raw:
        assert named.format == raw.format == "gguf"
        quantized = [n for n in raw.keys() if raw.info(n).attributes.get("raw_blocks")]
        assert quantized == ["blk.1.ffn_gate.weight"]
        assert (str(raw.info(quantized[0]).dtype), raw.info(quantized[0]).shape) == ("uint8", (4, 68))
        assert (str(named.info(quantized[0]).dtype), named.info(quantized[0]).shape) == ("float32", (4, 64))
        assert named[quantized[0]].dtype == np.float32


def test_pickles_split_between_the_reader_and_the_refusal(tmp_path: Path) -> None:
    pkl = tmp_path / "data.pickle"
    pkl.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)
    with pytest.raises(UnsafeFormatError, match="a Python pickle but not a torch.save file"):
        detect_format(pkl)
    assert registry.reader_format("torch").name == "pytorch"
    assert [e.name for e in registry.formats() if e.refuses] == ["pickle"]

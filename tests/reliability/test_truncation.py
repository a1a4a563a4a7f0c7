"""Truncation: every format varstore reads, cut at byte offsets, gives a typed error (never partial values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._damage import truncation_campaign
from ._sources import make_sources


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("truncation")
    return truncation_campaign(make_sources(work / "sources"), work / "runs", per_source=40, seed=2)


LABELS = ["varstore .h5", "varstore .zarr", "TF .index", "TF .data", "safetensors", "npz", "npz (deflated)",
          "Keras .weights.h5", "PyTorch .pt (zip)", "PyTorch .pt (legacy)", "GGUF"]


@pytest.mark.parametrize("label", LABELS)
def test_truncated_files_give_typed_errors(figures: dict, label: str) -> None:
    counts = figures[label]
    assert counts["cases"] >= 40
    assert (counts["wrong"], counts["untyped"], counts["crashes"], counts["hangs"]) == (0, 0, 0, 0), counts
    if label == "varstore .zarr":  # group zarr.json files the reader does not need may read back exactly
        assert counts["typed"] + counts["exact"] == counts["cases"]
        assert counts["typed"] >= counts["cases"] // 2
    else:
        assert counts["typed"] == counts["cases"], counts


def test_truncating_a_zarr_chunk_names_the_variable(tmp_path: Path) -> None:
    from varstore.checkpoint import open_varstore as open_checkpoint
    from varstore.errors import CorruptCheckpointError

    from ._sources import write_own

    path = write_own(tmp_path, "zarr")
    chunk = path / "dense/kernel/0.0"
    chunk.write_bytes(chunk.read_bytes()[:100])
    with open_checkpoint(path) as reader, pytest.raises(CorruptCheckpointError, match="dense/kernel"):
        reader.read("dense/kernel")

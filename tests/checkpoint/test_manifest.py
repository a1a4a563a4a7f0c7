"""The manifest (checkpoint/manifest.py): decoding refuses inconsistent columns on open, naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint.damage import rewrite_zarr_manifest, VALUES
from varstore.checkpoint import open_varstore as open_checkpoint, save
from varstore.errors import CorruptCheckpointError

def test_nbytes_disagreeing_with_shape_and_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["nbytes"][columns["name"].index("dense/bias")] = 60

    rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match=r"'dense/bias' has nbytes 60.*\[16\].*float32 make 64"):
        open_checkpoint(path)


def test_unknown_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["dtype"][columns["name"].index("dense/bias")] = "float99"

    rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match="'dense/bias' has an unknown dtype 'float99'"):
        open_checkpoint(path)

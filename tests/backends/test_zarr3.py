"""Zarr v3 backend against the shared BackendContract, plus metadata-document checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import zarr

from tests.backends.contract import BackendContract
from varstore.backends import get_backend


class TestZarr3Backend(BackendContract):
    backend_name = "zarr"
    suffix = ".zarr"

    def plain_read(self, path: Path, array_path: str) -> np.ndarray:
        group = zarr.open_group(str(path), mode="r")
        return group[array_path][...]

    def test_single_chunk_bytes_codec_and_group_documents(self, tmp_path: Path) -> None:
        path = tmp_path / "x.zarr"
        self._write(get_backend("zarr"), path, {"g/v": np.ones((4, 2), dtype="<f4")})
        meta = json.loads((path / "g/v/zarr.json").read_text())
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [4, 2]
        assert meta["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
        assert json.loads((path / "g/zarr.json").read_text())["node_type"] == "group"
        assert (path / "g/v/c/0/0").stat().st_size == 32

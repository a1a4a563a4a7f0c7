"""Zarr v3 backend against the shared BackendContract, plus metadata-document checks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.backends.contract import BackendContract
from tests.checkpoint.damage import VALUES
from varstore.backends import get_backend
from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.errors import CorruptCheckpointError


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
        assert meta["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "."}}
        assert (path / "g/v/0.0").stat().st_size == 32  # the chunk file right in the array directory
        assert sorted(p.name for p in (path / "g/v").iterdir()) == ["0.0", "zarr.json"]


# ------------------------------------------------------------ symlinks out of a Zarr checkpoint
@pytest.mark.parametrize("link", ["dense/kernel", "dense/kernel/0.0", "dense"])
def test_zarr_symlink_leading_outside_is_refused(tmp_path: Path, link: str) -> None:
    """An array directory, a chunk file or a group that is a symlink out of the checkpoint is refused."""
    outside = tmp_path / "outside.zarr"
    save(outside, {"dense/kernel": np.full((8, 16), -1.5, np.float32), "dense/bias": np.zeros(16, np.float32)},
         pack_threshold_bytes=0)
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=0)
    if (path / link).is_dir():
        shutil.rmtree(path / link)
    else:
        (path / link).unlink()
    os.symlink(outside / link, path / link)
    with open_checkpoint(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*outside.*outside\.zarr"):
            reader.read("dense/kernel")
        np.testing.assert_array_equal(reader.read("global_step"), VALUES["global_step"])


def test_zarr_symlink_inside_the_checkpoint_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=0)
    os.rename(path / "dense/kernel/0.0", path / "moved_chunk")
    os.symlink(path / "moved_chunk", path / "dense/kernel/0.0")
    link = tmp_path / "link.zarr"
    os.symlink(path, link)  # the checkpoint itself reached through a symlink
    with open_checkpoint(link) as reader:
        np.testing.assert_array_equal(reader.read("dense/kernel"), VALUES["dense/kernel"])

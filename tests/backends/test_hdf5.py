"""HDF5 backend against the shared BackendContract, plus HDF5-specific layout checks."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from tests.backends.contract import BackendContract
from varstore.backends import get_backend


class TestHdf5Backend(BackendContract):
    backend_name = "h5"
    suffix = ".h5"

    def plain_read(self, path: Path, array_path: str) -> np.ndarray:
        with h5py.File(path, "r") as handle:
            return handle[array_path][()]

    def test_datasets_are_contiguous_uncompressed_and_latest_format(self, tmp_path: Path) -> None:
        path = tmp_path / "x.h5"
        self._write(get_backend("h5"), path, {"g/v": np.ones((8, 8), dtype="<f4")})
        with h5py.File(path, "r") as handle:
            dataset = handle["g/v"]
            assert dataset.chunks is None and dataset.compression is None
            assert isinstance(handle["g"], h5py.Group)
        assert path.read_bytes()[8] >= 2  # superblock version 2+ only with libver >= v108 ("latest")

"""HDF5 backend against the shared BackendContract, plus HDF5-specific layout checks."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.backends.contract import BackendContract
from varstore.backends import get_backend
from varstore.backends.hdf5 import store as hdf5_store


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


def test_held_attributes_go_through_kept_dataset_ids_up_to_the_cap_then_by_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`create_array(hold_attrs=True)` keeps up to HELD_DATASETS dataset ids for `add_attrs`; arrays past the cap
    are opened by their path again: every array ends with the same attributes, and nothing stays held after close."""
    monkeypatch.setattr(hdf5_store, "HELD_DATASETS", 2)
    writer = hdf5_store.Hdf5Writer(tmp_path / "w.h5")
    for i in range(4):
        writer.create_array(f"layer_{i}/kernel", np.dtype("float32"), (8, 1024), {"dtype": "float32"}, hold_attrs=True)
    assert sorted(writer._held) == ["layer_0/kernel", "layer_1/kernel"]
    for i in reversed(range(4)):
        writer.add_attrs(f"layer_{i}/kernel", {"checksum": f"crc32c:0000000{i}"})
    assert writer._held == {}
    writer.create_array("late", np.dtype("float32"), (4,), {}, hold_attrs=True)
    writer.close()
    assert writer._held == {}
    with h5py.File(tmp_path / "w.h5", "r") as f:
        assert {name: dict(f[f"{name}/kernel"].attrs) for name in f if name.startswith("layer_")} == {
            f"layer_{i}": {"dtype": "float32", "checksum": f"crc32c:0000000{i}"} for i in range(4)}
        assert dict(f["late"].attrs) == {}

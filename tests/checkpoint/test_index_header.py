"""HDF5 index header (optional, format 1.0): reads skip the HDF5 library, and files without it still read."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from varstore.checkpoint import open_varstore as open_checkpoint, save
from varstore.checkpoint.manifest import INDEX_HEADER_BYTES


def test_header_points_at_the_manifest_and_offsets_at_the_values(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    kernel = np.arange(8192, dtype=np.float32).reshape(64, 128)
    save(path, {"enc/kernel": kernel, "enc/bias": np.ones(4, np.float32)}, step=5)
    data = path.read_bytes()
    header = data[:INDEX_HEADER_BYTES]
    assert header.startswith(b"varstore-index {") and data[512:520] == b"\x89HDF\r\n\x1a\n"
    where = json.loads(header[len(b"varstore-index "):header.index(b"\n")])
    manifest = json.loads(data[where["manifest_offset"]:where["manifest_offset"] + where["manifest_nbytes"]])
    columns = manifest["variables"]
    i = columns["name"].index("enc/kernel")
    offset = columns["file_offset"][i]
    np.testing.assert_array_equal(np.frombuffer(data[offset:offset + kernel.nbytes], np.float32), kernel.ravel())
    with h5py.File(path, "r") as f:  # plain h5py agrees
        assert f["enc/kernel"].id.get_offset() == offset
        assert json.loads(f["_varstore/manifest"][()].tobytes()) == manifest
    with open_checkpoint(path) as reader:
        assert reader._backend_reader is None  # noqa: SLF001 - no HDF5 library needed for these reads
        np.testing.assert_array_equal(reader["enc/kernel"], kernel)
        assert reader.step == 5 and reader["enc/bias"].tolist() == [1.0] * 4
        assert reader._backend_reader is None  # noqa: SLF001


def test_a_file_whose_header_is_wiped_reads_through_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    save(path, {"w": np.arange(5000, dtype=np.float64), "s": np.float32(2.5)})
    with open(path, "r+b") as handle:
        handle.write(b"\0" * INDEX_HEADER_BYTES)
    with open_checkpoint(path) as reader:
        assert reader["w"][4999] == 4999.0 and float(reader["s"]) == 2.5
        reader.verify()
        assert reader._backend_reader is not None  # noqa: SLF001

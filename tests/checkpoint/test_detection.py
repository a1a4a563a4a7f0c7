"""Recognising own checkpoints (checkpoint/read/detection.py): the HDF5 index header, the varstore_format attribute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.checkpoint.damage import VALUES, set_root_attr, wipe_index_header
from varstore import save
from varstore.checkpoint import is_varstore_checkpoint, open_varstore as open_checkpoint
from varstore.checkpoint.read.detection import detect_container, index_header, manifest_via_index_header
from varstore.checkpoint.format.manifest import INDEX_HEADER_BYTES
from varstore.errors import CheckpointNotFoundError, NotACheckpointError
from varstore.storage import LocalStorage
from varstore.errors import CorruptCheckpointError


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


# ------------------------------------------------------------ a damaged root varstore_format
@pytest.mark.parametrize("found", ["varstore-zaxr", None])
def test_damaged_format_attribute_with_a_manifest_is_corrupt_not_plain(ckpt: Path, found: str | None) -> None:
    from varstore import open_checkpoint as open_any

    save(ckpt, VALUES)
    if ckpt.suffix == ".h5":
        wipe_index_header(ckpt)  # else the index header alone identifies the file (and it reads exactly)
    set_root_attr(ckpt, "varstore_format", found)
    assert is_varstore_checkpoint(ckpt)
    for opener in (open_checkpoint, open_any):
        with pytest.raises(CorruptCheckpointError, match=rf"'{ckpt}'.*varstore_format is {found!r}"):
            opener(ckpt)


def test_plain_zarr_group_is_still_not_a_varstore_checkpoint(tmp_path: Path) -> None:
    from varstore.errors import NotACheckpointError

    path = tmp_path / "model.zarr"
    save(path, VALUES)
    shutil.rmtree(path / "_varstore")
    set_root_attr(path, "varstore_format", None)
    assert not is_varstore_checkpoint(path)
    with pytest.raises(NotACheckpointError, match="not a varstore checkpoint"):
        open_checkpoint(path)


# ------------------------------------------------------------ detection's own calls
def test_detect_container_names_what_it_found(tmp_path: Path) -> None:
    save(tmp_path / "m.h5", VALUES)
    save(tmp_path / "m.zarr", VALUES)
    assert detect_container(tmp_path / "m.h5") == "h5"
    assert detect_container(tmp_path / "m.zarr") == "zarr"
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint at .*absent"):
        detect_container(tmp_path / "absent")
    with pytest.raises(NotACheckpointError, match="notes.txt' is neither an HDF5 file nor a Zarr v3 directory"):
        detect_container(tmp_path / "notes.txt")
    with pytest.raises(NotACheckpointError, match="empty' is a directory without a Zarr v3 zarr.json"):
        detect_container(tmp_path / "empty")


def test_index_header_fast_path_reads_the_manifest_or_says_none(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    save(path, VALUES)
    storage = LocalStorage()
    where = index_header(storage, str(path))
    assert where is not None
    offset, nbytes, _ = where
    manifest = manifest_via_index_header(storage, str(path))
    assert manifest == path.read_bytes()[offset:offset + nbytes]
    assert sorted(json.loads(manifest)["variables"]["name"]) == sorted(VALUES)
    save(tmp_path / "m.zarr", VALUES)
    (tmp_path / "short").write_bytes(b"varstore-index {")
    for other in ("m.zarr", "short", "absent"):
        assert index_header(storage, str(tmp_path / other)) is None
        assert manifest_via_index_header(storage, str(tmp_path / other)) is None
    raw = bytearray(path.read_bytes())
    raw[offset + 3] ^= 0x01  # the manifest no longer matches the header's crc32c
    path.write_bytes(bytes(raw))
    assert index_header(storage, str(path)) == where
    assert manifest_via_index_header(storage, str(path)) is None


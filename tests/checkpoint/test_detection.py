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



def test_open_own_answers_container_and_checked_manifest_in_one_call(tmp_path: Path) -> None:
    from varstore.checkpoint.read.detection import open_own
    from varstore.storage.path_pin import pin_local

    save(tmp_path / "m.h5", VALUES)
    save(tmp_path / "m.zarr", VALUES)
    storage, key, pin = pin_local(tmp_path / "m.h5")
    try:
        assert key in storage._read_fds and not pin.guards_reads  # noqa: SLF001 - the file kept open
        found = open_own(tmp_path / "m.h5", None, storage, key)
        assert (found.backend.name, found.direct, found.backend_reader) == ("h5", True, None)
        assert found.manifest == manifest_via_index_header(storage, key)
    finally:
        storage.close()
        pin.close()
    storage, key, pin = pin_local(tmp_path / "m.zarr")
    assert storage._read_fds == {} and pin.guards_reads  # noqa: SLF001 - a directory's files: opened by name
    found = open_own(tmp_path / "m.zarr", None, storage, key)
    try:
        assert (found.backend.name, found.direct) == ("zarr", False) and found.backend_reader is not None
        assert sorted(json.loads(found.manifest)["variables"]["name"]) == sorted(VALUES)
    finally:
        found.backend_reader.close()
        pin.close()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(NotACheckpointError, match="neither an HDF5 file nor a Zarr v3 directory"):
        open_own(tmp_path / "notes.txt", None, LocalStorage(), str(tmp_path / "notes.txt"))
    with pytest.raises(CheckpointNotFoundError):
        open_own(tmp_path / "absent", None, LocalStorage(), str(tmp_path / "absent"))


def test_read_index_header_reads_the_block_through_the_callers_read(tmp_path: Path) -> None:
    from varstore.checkpoint.format.index_header import encode_index_header, read_index_header

    asked: list[tuple[int, int]] = []

    def read(offset: int, nbytes: int) -> bytes:
        asked.append((offset, nbytes))
        return encode_index_header(4096, 300, 0xDEADBEEF)[offset:offset + nbytes]

    assert read_index_header(read) == (4096, 300, 0xDEADBEEF) and asked == [(0, INDEX_HEADER_BYTES)]
    assert read_index_header(lambda offset, nbytes: b"\0" * nbytes) is None


def test_open_varstore_names_a_missing_or_foreign_path_before_pinning(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint at"):
        open_checkpoint(tmp_path / "absent.h5")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(NotACheckpointError, match="neither an HDF5 file"):
        open_checkpoint(tmp_path / "notes.txt")

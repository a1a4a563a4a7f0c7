"""Format detection (magic bytes first, suffix second) and typed errors for damaged input."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.write.writer import save_entries
from varstore import detect_format, open_checkpoint
from varstore.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    NotACheckpointError,
    UnknownVariableError,
)


def test_varstore_own_checkpoints_dispatch_to_the_checkpoint_reader(tmp_path: Path) -> None:
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    entries = [SaveEntry("dense/kernel", (2, 3), value.dtype, lambda: value)]
    for suffix, fmt in ((".h5", "varstore-hdf5"), (".zarr", "varstore-zarr")):
        path = save_entries(tmp_path / f"own{suffix}", entries, step=5)
        assert detect_format(path) == fmt
        with open_checkpoint(path) as reader:
            assert reader.format == fmt and reader.step == 5
            np.testing.assert_array_equal(reader["dense/kernel"], value)


def test_hdf5_found_behind_a_user_block_and_despite_a_wrong_suffix(tmp_path: Path) -> None:
    path = tmp_path / "weights.dat"
    with h5py.File(path, "w", userblock_size=1024) as f:
        f.create_dataset("w", data=np.ones(3, np.int16))
    with open(path, "r+b") as f:
        f.write(b"user block text")
    assert detect_format(path) == "hdf5"
    with open_checkpoint(path) as reader:
        assert reader.format == "hdf5" and reader["w"].tolist() == [1, 1, 1]


def test_safetensors_and_npz_found_by_magic_without_suffix(fixtures_dir: Path, tmp_path: Path) -> None:
    shutil.copy(fixtures_dir / "safetensors/mixed_torch.safetensors", tmp_path / "weights")
    shutil.copy(fixtures_dir / "npz/arrays.npz", tmp_path / "arrays.bundle")
    assert detect_format(tmp_path / "weights") == "safetensors"
    assert detect_format(tmp_path / "arrays.bundle") == "npz"


def test_missing_empty_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="nothing_here"):
        open_checkpoint(tmp_path / "nothing_here")
    (tmp_path / "empty.h5").write_bytes(b"")
    with pytest.raises(NotACheckpointError, match="empty.h5' is an empty file"):
        open_checkpoint(tmp_path / "empty.h5")
    (tmp_path / "notes.txt").write_bytes(b"hello, not a checkpoint\n" * 4)
    with pytest.raises(NotACheckpointError, match="notes.txt"):
        open_checkpoint(tmp_path / "notes.txt")
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(NotACheckpointError, match="plain_dir"):
        open_checkpoint(tmp_path / "plain_dir")
    with pytest.raises(Exception, match="unknown checkpoint format"):
        open_checkpoint(tmp_path / "notes.txt", format="onnx")


@pytest.mark.parametrize("name,content", [
    ("bad.h5", b"\x89HDF\r\n\x1a\n" + b"\x00" * 40),       # HDF5 magic, no superblock
    ("bad.safetensors", struct.pack("<Q", 5000) + b"{}"),  # header longer than the file
    ("bad2.safetensors", struct.pack("<Q", 4) + b"{]]}"),  # not JSON
    ("bad.npz", b"PK\x03\x04" + b"\x00" * 30),             # zip magic, no directory
    ("bad.keras", b"PK\x05\x06" + b"\x00" * 18),           # empty zip, no weights
    ("bad.index", b"\x00" * 60),                           # no table magic
])
def test_damaged_files_give_typed_errors(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises((CorruptCheckpointError, NotACheckpointError), match=name.replace(".", r"\.")):
        with open_checkpoint(path) as reader:
            for key in reader.keys():
                reader[key]


@pytest.mark.parametrize("fixture", ["safetensors/mixed_numpy.safetensors", "npz/arrays.npz",
                                     "keras3/model.weights.h5", "keras3/model.keras"])
def test_truncated_fixtures_give_typed_errors(fixtures_dir: Path, tmp_path: Path, fixture: str) -> None:
    data = (fixtures_dir / fixture).read_bytes()
    path = tmp_path / Path(fixture).name
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises((CorruptCheckpointError, NotACheckpointError)):
        with open_checkpoint(path) as reader:
            for key in reader.keys():
                reader[key]


def test_safetensors_offsets_outside_data_are_corrupt(tmp_path: Path) -> None:
    header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    path = tmp_path / "short.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 8)
    with pytest.raises(CorruptCheckpointError, match=r"'w'.*outside"):
        open_checkpoint(path)


def test_safetensors_unknown_dtype_is_skipped(tmp_path: Path) -> None:
    header = b'{"a":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}'
    path = tmp_path / "e8.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x01\x02\x03\x04")
    with open_checkpoint(path) as reader:
        assert reader.keys() == ["b"] and reader["b"].tolist() == [3, 4]
        assert reader.skipped[0].name == "a" and "F8_E8M0" in reader.skipped[0].reason
        with pytest.raises(UnknownVariableError, match="'a'"):
            reader["a"]


def test_zarr_with_a_damaged_chunk(fixtures_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "v2.zarr"
    shutil.copytree(fixtures_dir / "foreign_zarr/v2_group.zarr", copy)
    (copy / "encoder/block_0/kernel/0.0").write_bytes(b"garbage, not zlib")
    with open_checkpoint(copy) as reader:
        assert reader["encoder/block_0/bias"].shape == (8,)
        with pytest.raises(CorruptCheckpointError, match="encoder/block_0/kernel"):
            reader["encoder/block_0/kernel"]

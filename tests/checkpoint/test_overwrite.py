"""Issue 9, finding 1: save, convert and CheckpointManager never destroy what is not a checkpoint of theirs.

Every refusal test checks that the old bytes are intact afterwards.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.errors import CheckpointExistsError, VarstoreError

VALUES = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _digest(path: Path) -> str:
    """A hash of every byte (and name) at `path`, file or directory tree."""
    h = hashlib.sha256()
    if path.is_dir():
        for root, dirs, files in sorted(os.walk(path)):
            dirs.sort()
            for name in sorted(files):
                full = Path(root) / name
                h.update(str(full.relative_to(path)).encode() + full.read_bytes())
    else:
        h.update(path.read_bytes())
    return h.hexdigest()


def test_error_class_is_a_varstore_error_and_a_file_exists_error() -> None:
    assert issubclass(CheckpointExistsError, VarstoreError) and issubclass(CheckpointExistsError, FileExistsError)


def test_save_refuses_a_plain_file_and_leaves_it(tmp_path: Path) -> None:
    thesis = tmp_path / "thesis.h5"
    thesis.write_text("chapter 1\n")
    with pytest.raises(CheckpointExistsError, match=r"'.*thesis\.h5' exists and is a plain file \(10 bytes\)") as err:
        vs.save(thesis, VALUES)
    assert "overwrite=True" in str(err.value) and err.value.path == str(thesis)
    assert thesis.read_text() == "chapter 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.h5"]  # no temporary left
    vs.save(thesis, VALUES, overwrite=True)
    assert vs.load(thesis)["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_save_refuses_a_directory_with_other_content(tmp_path: Path) -> None:
    important = tmp_path / "important.zarr"
    important.mkdir()
    (important / "notes.txt").write_text("do not lose")
    (important / "data").mkdir()
    (important / "data" / "x.bin").write_bytes(b"\x01\x02")
    before = _digest(important)
    with pytest.raises(CheckpointExistsError, match="a directory with 2 entries that is not a varstore checkpoint"):
        vs.save(important, VALUES)
    assert _digest(important) == before


def test_save_refuses_a_keras_h5(tmp_path: Path, fixtures_dir: Path) -> None:
    keras = tmp_path / "model.h5"
    shutil.copy(fixtures_dir / "keras3" / "model.weights.h5", keras)
    before = _digest(keras)
    with pytest.raises(CheckpointExistsError, match="a Keras HDF5 file"):
        vs.save(keras, VALUES)
    assert _digest(keras) == before


def test_save_refuses_a_plain_hdf5_file(tmp_path: Path, fixtures_dir: Path) -> None:
    source = next((fixtures_dir / "foreign_h5").glob("*.h5"))
    plain = tmp_path / "data.h5"
    shutil.copy(source, plain)
    before = _digest(plain)
    with pytest.raises(CheckpointExistsError, match="an HDF5 file not written by varstore|a Keras HDF5 file"):
        vs.save(plain, VALUES)
    assert _digest(plain) == before


def test_save_refuses_the_other_format(tmp_path: Path) -> None:
    zarr_ckpt = vs.save(tmp_path / "m.zarr", VALUES)
    before = _digest(zarr_ckpt)
    with pytest.raises(CheckpointExistsError, match=r"a varstore Zarr checkpoint \(not HDF5\)"):
        vs.save(zarr_ckpt, VALUES, format="h5")
    assert _digest(zarr_ckpt) == before


def test_save_refuses_a_symlink_and_never_touches_its_target(tmp_path: Path) -> None:
    target = vs.save(tmp_path / "real.h5", VALUES)
    before = _digest(target)
    link = tmp_path / "link.h5"
    link.symlink_to(target)
    with pytest.raises(CheckpointExistsError, match=r"a symlink to '.*real\.h5'"):
        vs.save(link, {"w": np.zeros(3)})
    assert _digest(target) == before and link.is_symlink()
    vs.save(link, {"w": np.zeros(3)}, overwrite=True)  # explicit: the link is replaced, not its target
    assert not link.is_symlink() and _digest(target) == before
    assert vs.load(link)["w"].tolist() == [0, 0, 0]


@pytest.mark.parametrize("suffix, existing", [(".zarr", "file"), (".h5", "directory"), (".zarr", "file-link"),
                                             (".h5", "directory-link"), (".zarr", "h5-checkpoint")])
def test_overwrite_true_replaces_whatever_kind_of_thing_stands_there(tmp_path: Path, suffix: str,
                                                                     existing: str) -> None:
    """A directory checkpoint over a file, a file over a directory, and either over a symlink (the link goes,
    its target stays): one swap (renameat2 RENAME_EXCHANGE), then the old one is deleted."""
    path = tmp_path / f"model{suffix}"
    target = tmp_path / "kept"
    if existing == "file":
        path.write_text("draft")
    elif existing == "directory":
        path.mkdir()
        (path / "notes.txt").write_text("draft")
    elif existing == "h5-checkpoint":
        vs.save(path, {"old": np.zeros(2)}, format="h5")
    else:
        if existing == "file-link":
            target.write_text("draft")
        else:
            target.mkdir()
            (target / "notes.txt").write_text("draft")
        path.symlink_to(target)
    before = _digest(target) if target.exists() else None
    with pytest.raises(CheckpointExistsError):
        vs.save(path, VALUES)
    vs.save(path, VALUES, overwrite=True)
    assert vs.load(path)["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not path.is_symlink() and path.is_dir() == (suffix == ".zarr")
    expected = sorted([path.name] + (["kept"] if before is not None else []))
    assert sorted(p.name for p in tmp_path.iterdir()) == expected  # no temporary and no old copy left
    if before is not None:
        assert _digest(target) == before  # a symlink's target is never touched


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_save_replaces_its_own_checkpoint_atomically(tmp_path: Path, suffix: str) -> None:
    path = vs.save(tmp_path / f"model{suffix}", VALUES)
    vs.save(path, {"w": np.ones(2)})
    assert vs.load(path)["w"].tolist() == [1.0, 1.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"model{suffix}"]


def test_async_save_refuses_before_copying(tmp_path: Path) -> None:
    thesis = tmp_path / "thesis.h5"
    thesis.write_bytes(b"x" * 100)
    with pytest.raises(CheckpointExistsError, match="plain file"):
        vs.save(thesis, VALUES, blocking=False)
    assert thesis.read_bytes() == b"x" * 100


def test_manager_refuses_a_ckpt_path_holding_something_else(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=2)
    manager.save(VALUES, step=1)
    squatter = tmp_path / "run" / "ckpt-2.h5"
    squatter.write_text("someone else's file")
    with pytest.raises(CheckpointExistsError, match=r"ckpt-2\.h5' exists and is a plain file"):
        manager.save(VALUES, step=2)
    assert squatter.read_text() == "someone else's file"
    assert manager.latest.name == "ckpt-1.h5"
    manager.save({"w": np.ones(1)}, step=1)  # its own checkpoint: replaced
    assert vs.load(manager.latest)["w"].tolist() == [1.0]


def test_convert_refuses_any_existing_destination_without_force(tmp_path: Path) -> None:
    src = vs.save(tmp_path / "a.h5", VALUES)
    dst = vs.save(tmp_path / "b.zarr", {"w": np.zeros(1)})
    before = _digest(dst)
    with pytest.raises(CheckpointExistsError, match=r"'.*b\.zarr' exists and is a varstore Zarr checkpoint.*force=True"):
        vs.convert(src, dst)
    assert _digest(dst) == before
    important = tmp_path / "important.zarr"
    important.mkdir()
    (important / "notes.txt").write_text("keep")
    with pytest.raises(CheckpointExistsError, match="directory with 1 entry"):
        vs.convert(src, important)
    assert (important / "notes.txt").read_text() == "keep"
    vs.convert(src, dst, force=True)
    assert vs.load(dst)["w"].tolist() == VALUES["w"].tolist()


def test_convert_refuses_the_same_file_always_also_through_a_symlink(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    model = tmp_path / "model.safetensors"
    save_file({"w": np.ones(3, np.float32)}, str(model))
    before = _digest(model)
    with pytest.raises(CheckpointExistsError, match="is the source"):
        vs.convert(model, model, force=True)
    link = tmp_path / "self.safetensors"
    link.symlink_to(model)
    with pytest.raises(CheckpointExistsError, match="through a symlink"):
        vs.convert(link, model, force=True)
    with pytest.raises(CheckpointExistsError, match="is the source"):
        vs.convert(model, link, force=True)
    assert _digest(model) == before


def test_manager_retention_never_deletes_what_replaced_its_checkpoint(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=1)
    manager.save(VALUES, step=1)
    old = tmp_path / "run" / "ckpt-1.h5"
    old.unlink()
    old.write_text("a user's file that took the name")
    manager.save(VALUES, step=2)  # retention drops step 1 from its list but leaves the file
    assert old.read_text() == "a user's file that took the name"
    assert [p.name for p in manager.checkpoints] == ["ckpt-1.h5", "ckpt-2.h5"] and manager.latest.name == "ckpt-2.h5"

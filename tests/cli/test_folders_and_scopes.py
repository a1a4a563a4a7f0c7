"""`varstore ls DIR` on a folder of checkpoints lists them; `show PATH conv1` names the scope's variables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import varstore as vs


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    vs.save(folder / "model.h5", {"conv1/weights": np.ones((2, 2)), "conv1/biases": np.zeros(2), "step": np.int64(3)})
    vs.save(folder / "model.zarr", {"w": np.ones(2)})
    manager = vs.CheckpointManager(folder / "run")
    manager.save({"w": np.ones(2)}, 100)
    manager.save({"w": np.ones(2)}, 200)
    (folder / "notes.txt").write_text("not a checkpoint")
    return folder


def test_ls_on_a_folder_of_checkpoints_lists_each_with_its_format(run, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    listed = run("ls", folder)
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        f"{folder}: a folder of 3 checkpoints (`varstore ls {folder}/<name>` lists one)",
        "name        format",
        "model.h5    varstore-hdf5",
        "model.zarr  varstore-zarr",
        "notes.txt   not a checkpoint: its content matches no format varstore reads",
        "run         manager directory, latest ckpt-200.h5",
    ]
    document = json.loads(run("ls", "--json", folder).stdout)
    assert document == {"schema": "varstore.folder/1", "directory": str(folder), "checkpoints": [
        {"name": "model.h5", "path": str(folder / "model.h5"), "format": "varstore-hdf5"},
        {"name": "model.zarr", "path": str(folder / "model.zarr"), "format": "varstore-zarr"},
        {"name": "run", "path": str(folder / "run"), "format": "manager directory, latest ckpt-200.h5"}],
        "not_checkpoints": [{"name": "notes.txt", "path": str(folder / "notes.txt"),
                             "reason": "its content matches no format varstore reads"}]}


def test_ls_on_a_folder_without_checkpoints_is_still_an_error(run, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    listed = run("ls", tmp_path / "empty")
    assert listed.exit_code == 2
    assert listed.stderr.startswith(f"varstore: error: directory '{tmp_path / 'empty'}' holds no checkpoint")


def test_show_a_scope_with_or_without_its_slash_shows_each_variable(run, tmp_path: Path) -> None:
    path = _folder(tmp_path) / "model.h5"
    blocks = [run("show", path, f"conv1/{leaf}").stdout for leaf in ("weights", "biases")]
    for name in ("conv1", "conv1/"):
        shown = run("show", path, name)
        assert shown.exit_code == 0, shown.stderr
        assert shown.stdout == (f"scope conv1: 2 variables in {path}  (varstore-hdf5, version 1.0)\n"
                                f"\n{blocks[0]}\n{blocks[1]}")
        documents = json.loads(run("show", "--json", path, name).stdout)
        assert [d["variable"]["name"] for d in documents] == ["conv1/weights", "conv1/biases"]
        assert documents[0] == json.loads(run("show", "--json", path, "conv1/weights").stdout)
        assert documents[1]["values"] == [0.0, 0.0] and documents[1]["schema"] == "varstore.show/1"


def test_ls_folder_tells_checkpoints_by_content_never_by_suffix(run, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    vs.save(folder / "a.h5", {"w": np.ones(2)})
    (folder / "notes.h5").write_text("a text file, not HDF5")
    (folder / "junk.safetensors").write_text("x" * 64)
    (folder / "empty.npz").write_bytes(b"")
    lines = run("ls", folder).stdout.splitlines()
    assert lines[1:] == [
        "name              format",
        "a.h5              varstore-hdf5",
        "empty.npz         not a checkpoint: an empty file",
        "junk.safetensors  not a checkpoint: its content matches no format varstore reads "
        "(only its suffix '.safetensors' names safetensors)",
        "notes.h5          not a checkpoint: its content matches no format varstore reads "
        "(only its suffix '.h5' names hdf5)",
    ]
    document = json.loads(run("ls", "--json", folder).stdout)
    assert [e["name"] for e in document["checkpoints"]] == ["a.h5"]
    assert all(entry["reason"] and "format" not in entry for entry in document["not_checkpoints"])


def test_an_error_about_a_folder_names_what_is_in_it(tmp_path: Path) -> None:
    vs.save(tmp_path / "out" / "a.h5", {"w": np.ones(2)})
    vs.save(tmp_path / "out" / "b.zarr", {"w": np.ones(2)})
    with pytest.raises(vs.errors.NotACheckpointError) as raised:
        vs.restore(tmp_path / "out", vs.VariableStore())
    assert str(raised.value).endswith(
        "; it holds 2 checkpoints: a.h5 (varstore-hdf5), b.zarr (varstore-zarr): open one of them")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "notes.txt").write_text("hi")
    with pytest.raises(vs.errors.NotACheckpointError, match=r"; it holds no checkpoint, only notes.txt$"):
        vs.open_checkpoint(tmp_path / "text")

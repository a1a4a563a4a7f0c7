"""`varstore ls DIR` on a folder of checkpoints lists them; `show PATH conv1` names the scope's variables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

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
        "run         manager directory, latest ckpt-200.h5",
    ]
    document = json.loads(run("ls", "--json", folder).stdout)
    assert document == {"schema": "varstore.folder/1", "directory": str(folder), "checkpoints": [
        {"name": "model.h5", "path": str(folder / "model.h5"), "format": "varstore-hdf5"},
        {"name": "model.zarr", "path": str(folder / "model.zarr"), "format": "varstore-zarr"},
        {"name": "run", "path": str(folder / "run"), "format": "manager directory, latest ckpt-200.h5"}]}


def test_ls_on_a_folder_without_checkpoints_is_still_an_error(run, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    listed = run("ls", tmp_path / "empty")
    assert listed.exit_code == 2
    assert listed.stderr.startswith(f"varstore: error: directory '{tmp_path / 'empty'}' holds no checkpoint")


def test_show_a_scope_with_or_without_its_slash_names_its_variables(run, tmp_path: Path) -> None:
    path = _folder(tmp_path) / "model.h5"
    for name in ("conv1", "conv1/"):
        shown = run("show", path, name)
        assert shown.exit_code == 2
        assert shown.stderr == (
            f"varstore: error: '{name}' in '{path}' is a scope of 2 variables (conv1/weights, conv1/biases), "
            f"not a variable: show one of them, or `varstore ls {path} --filter 'conv1/*'` lists them\n")

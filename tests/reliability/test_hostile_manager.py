"""CheckpointManager touches only what it made (issue 26, item 3).

A "latest" pointer naming a path outside the manager's directory is refused
before anything is deleted; a malformed pointer is a typed error and
rebuild_state() rebuilds it from the listing; the stale-temporary sweep
removes only temporaries carrying varstore's owner marker, never a user's
"notes.tmp-99999-cafe/" or an "X.tmp-PID-hex" varstore did not create.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from varstore import CheckpointManager, save
from varstore.checkpoint.publish import atomic
from varstore.errors import CorruptCheckpointError, PathOutsideCheckpointError

from ._hostile_run import changed_paths, run_hostile, tree_state

DEAD_PID = 999999999


def _model(value: float = 1.0) -> dict[str, np.ndarray]:
    return {"w": np.full((4,), value)}


@pytest.fixture
def run(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    manager = CheckpointManager(directory, max_to_keep=1)
    manager.save(_model(), step=1)
    return directory


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim" / "ckpt-1.h5"
    save(path, _model(7.0))
    return path


@pytest.mark.parametrize("field", ["latest", "checkpoints", "preserved"])
def test_a_pointer_naming_a_path_outside_is_refused_and_nothing_outside_is_deleted(
        run: Path, victim: Path, field: str) -> None:
    state = json.loads((run / "latest").read_text())
    if field == "latest":
        state["latest"] = "../victim/ckpt-1.h5"
    elif field == "checkpoints":
        state["checkpoints"].insert(0, {"name": "../victim/ckpt-1.h5", "step": 0, "time": 0.0})
    else:
        state["preserved"] = ["../victim/ckpt-1.h5"]
    (run / "latest").write_text(json.dumps(state))
    before = tree_state(victim.parent)
    manager = CheckpointManager(run, max_to_keep=1)
    with pytest.raises(PathOutsideCheckpointError, match=r"run/latest'.*'\.\./victim/ckpt-1\.h5'.*rebuild_state"):
        manager.save(_model(2.0), step=2)
    assert changed_paths(before, tree_state(victim.parent)) == []
    assert victim.exists()


def test_an_absolute_pointer_is_refused_in_a_child_process_and_the_victim_stays(run: Path, victim: Path) -> None:
    state = json.loads((run / "latest").read_text())
    state["checkpoints"].insert(0, {"name": str(victim), "step": 0, "time": 0.0})
    (run / "latest").write_text(json.dumps(state))
    before = tree_state(victim.parent)
    outcome = run_hostile("api", ["manager_save", str(run), "1", "2"], timeout_s=120)
    assert (outcome.status, outcome.error) == ("typed", "PathOutsideCheckpointError")
    assert str(victim) in outcome.message and "latest" in outcome.message
    assert changed_paths(before, tree_state(victim.parent)) == []


@pytest.mark.parametrize("content, found", [
    (b"{not json", "is not valid JSON"),
    (b"[1, 2]", "holds list, expected a JSON object"),
    (b'{"latest": 5}', "\"latest\" is 5, expected a checkpoint name"),
    (b'{"checkpoints": [{"name": "ckpt-1.h5", "step": "one"}]}', "checkpoints[0] is"),
])
def test_a_malformed_pointer_is_a_typed_error_and_rebuild_state_repairs_it(
        run: Path, content: bytes, found: str) -> None:
    (run / "latest").write_bytes(content)
    manager = CheckpointManager(run, max_to_keep=1)
    with pytest.raises(CorruptCheckpointError, match=f"{run / 'latest'}.*rebuild_state") as caught:
        manager.save(_model(2.0), step=2)
    assert found in str(caught.value)
    assert manager.rebuild_state() == run / "ckpt-1.h5"
    assert manager.latest == run / "ckpt-1.h5"
    assert manager.save(_model(2.0), step=2) == run / "ckpt-2.h5"
    assert sorted(p.name for p in run.iterdir()) == [".lock", "ckpt-2.h5", "latest"]  # retention kept 1


def test_rebuild_state_adopts_only_varstore_checkpoints(run: Path) -> None:
    (run / "ckpt-5.h5").write_bytes(b"not a checkpoint")
    save(run / "ckpt-3.h5", _model(3.0))
    (run / "latest").write_text("garbage")
    manager = CheckpointManager(run, max_to_keep=5)
    assert manager.rebuild_state() == run / "ckpt-3.h5"
    state = json.loads((run / "latest").read_text())
    assert [entry["name"] for entry in state["checkpoints"]] == ["ckpt-1.h5", "ckpt-3.h5"]
    assert (run / "ckpt-5.h5").read_bytes() == b"not a checkpoint"


def test_the_sweep_never_deletes_what_varstore_did_not_create(run: Path) -> None:
    notes = run / "notes.tmp-99999-cafe"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me")
    foreign = run / f"ckpt-9.h5.tmp-{DEAD_PID}-abcdef01"
    foreign.write_bytes(b"a user's file")
    forged = run / f".ckpt-8.h5.tmp-{DEAD_PID}-abcdef02.varstore-temporary"  # a marker without our text
    forged.write_text("hello")
    (run / f"ckpt-8.h5.tmp-{DEAD_PID}-abcdef02").write_text("also a user's")
    CheckpointManager(run, max_to_keep=1).save(_model(2.0), step=2)
    assert (notes / "todo.txt").read_text() == "keep me"
    assert foreign.read_bytes() == b"a user's file"
    assert (run / f"ckpt-8.h5.tmp-{DEAD_PID}-abcdef02").read_text() == "also a user's" and forged.exists()


def test_the_sweep_removes_a_marked_temporary_of_a_dead_writer(run: Path) -> None:
    # what a SIGKILLed writer leaves: the temporary and its owner marker (the crash tests make real ones)
    dead = run / f"ckpt-7.h5.tmp-{DEAD_PID}-0badc0de"
    dead.mkdir()
    marker = run / f".{dead.name}.varstore-temporary"
    marker.write_bytes(b"varstore temporary of pid " + str(DEAD_PID).encode())
    orphan = run / f".ckpt-6.h5.tmp-{DEAD_PID}-0badc0df.varstore-temporary"
    orphan.write_bytes(b"varstore temporary of pid " + str(DEAD_PID).encode())
    live = run / f"ckpt-5.h5.tmp-{os.getpid()}-0badc0e0"
    live.write_bytes(b"x")
    (run / f".{live.name}.varstore-temporary").write_bytes(b"varstore temporary of pid " + str(os.getpid()).encode())
    assert atomic.sweep_directory(run) == [dead]
    assert not dead.exists() and not marker.exists() and not orphan.exists() and live.exists()


def test_a_save_leaves_no_marker_behind(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "run", max_to_keep=1)
    for step in (1, 2, 3):
        manager.save(_model(float(step)), step=step)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock", "ckpt-3.h5", "latest"]


def test_readers_of_a_hostile_pointer_never_follow_it_outside(run: Path, victim: Path) -> None:
    from varstore.checkpoint.manage.managed import latest_checkpoint

    state = json.loads((run / "latest").read_text())
    state["latest"] = "../victim/ckpt-1.h5"
    (run / "latest").write_text(json.dumps(state))
    with pytest.raises(PathOutsideCheckpointError, match=r"'\.\./victim/ckpt-1\.h5'"):
        CheckpointManager(run).latest  # noqa: B018 - the property reads the pointer
    assert latest_checkpoint(run) == run / "ckpt-1.h5"  # the listing's highest step, never the victim
    outcome = run_hostile("cli", ["ls", str(run)], timeout_s=120)
    assert outcome.status == "exit0" and str(run / "ckpt-1.h5") in outcome.stdout, outcome
    assert "victim" not in outcome.stdout

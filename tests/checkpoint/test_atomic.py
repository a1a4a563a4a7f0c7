"""Checkpoint contract, part 3 (both formats): atomic saves, SIGKILLed writers, stale temporaries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.publish import atomic
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.write.writer import save_entries

from ._atomic_writer import write

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).resolve().parent / "_atomic_writer.py"


def _run_writer(path: Path, value: float, fault: str, manager: bool = False, fmt: str = "h5") -> int:
    """Saves in a child that SIGKILLs itself at the fault point `fault`; returns its exit code."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), VARSTORE_FAULT=fault)
    proc = subprocess.run([sys.executable, str(WRITER), str(path), str(value), "1" if manager else "0", fmt],
                          env=env, capture_output=True, timeout=60)
    return proc.returncode


def _save_here(path: Path, value: float, manager: bool = False, fmt: str = "h5") -> None:
    """The saves that are not killed run in this process (one child start less each): the same call."""
    assert "VARSTORE_FAULT" not in os.environ
    write(str(path), value, manager, fmt)


def _values(path: Path) -> set[float]:
    with open_checkpoint(path) as reader:
        reader.verify()
        return {float(reader[name].reshape(-1)[0]) for name in reader.keys()}


@pytest.mark.parametrize("fault", ["after_data", "before_checksums", "before_rename"])
def test_killed_writer_leaves_old_checkpoint(ckpt: Path, fault: str) -> None:
    _save_here(ckpt, 1.0)
    assert _run_writer(ckpt, 2.0, fault) == -signal.SIGKILL
    assert _values(ckpt) == {1.0}
    leftovers = [p for p in ckpt.parent.iterdir() if atomic.is_temporary(p)]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(ckpt.name + ".tmp-")
    _save_here(ckpt, 3.0)
    assert _values(ckpt) == {3.0}
    assert [p for p in ckpt.parent.iterdir() if atomic.is_temporary(p)] == []


def test_killed_first_writer_leaves_nothing_under_final_name(ckpt: Path) -> None:
    assert _run_writer(ckpt, 2.0, "before_rename") == -signal.SIGKILL
    assert not ckpt.exists()


def test_killed_manager_after_rename_keeps_directory_consistent(tmp_path: Path, fmt: str) -> None:
    from varstore import CheckpointManager

    directory = tmp_path / "run"
    _save_here(directory, 1.0, manager=True, fmt=fmt)
    assert _run_writer(directory, 2.0, "after_rename_before_latest", manager=True, fmt=fmt) == -signal.SIGKILL
    assert _run_writer(directory, 3.0, "before_rename", manager=True, fmt=fmt) == -signal.SIGKILL
    manager = CheckpointManager(directory, format=fmt)
    suffix = ".h5" if fmt == "h5" else ".zarr"
    assert [p.name for p in manager.checkpoints] == [f"ckpt-1{suffix}", f"ckpt-2{suffix}"]
    assert manager.latest.name == f"ckpt-1{suffix}"  # the pointer was not updated before the kill
    target = {"a": np.zeros(1000), "b/c": np.zeros(10, np.float32), "d": np.zeros(5000)}
    manager.restore_latest(target)
    assert target["a"][0] == 1.0
    _save_here(directory, 4.0, manager=True, fmt=fmt)
    assert [p.name for p in manager.checkpoints] == [f"ckpt-{s}{suffix}" for s in (1, 2, 4)]
    assert not [p for p in directory.iterdir() if atomic.is_temporary(p)]


def test_writer_exception_leaves_no_final_path_and_no_temporary(ckpt: Path) -> None:
    def boom() -> np.ndarray:
        raise RuntimeError("disk on fire")

    entries = [SaveEntry("a", (3,), np.dtype("f8"), lambda: np.ones(3)),
               SaveEntry("b", (3000,), np.dtype("f8"), boom)]
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_entries(ckpt, entries)
    assert list(ckpt.parent.iterdir()) == []


def test_failed_overwrite_keeps_old_checkpoint(ckpt: Path) -> None:
    save(ckpt, {"a": np.ones(3)})
    entries = [SaveEntry("a", (3,), np.dtype("f8"), lambda: np.full(3, 9.0)),
               SaveEntry("b", (2,), np.dtype("f8"), lambda: np.ones(5))]
    with pytest.raises(Exception, match="shape"):
        save_entries(ckpt, entries)
    assert _values(ckpt) == {1.0}
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]


def test_overwrite_replaces_contents(ckpt: Path) -> None:
    save(ckpt, {"a": np.ones(3), "gone": np.ones(5000)}, pack_threshold_bytes=0)
    save(ckpt, {"a": np.full(3, 2.0)}, pack_threshold_bytes=0)
    with open_checkpoint(ckpt) as reader:
        assert reader.keys() == ["a"] and reader["a"][0] == 2.0
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]


def test_live_writers_temporaries_are_not_swept(tmp_path: Path) -> None:
    final = tmp_path / "m.h5"
    live = tmp_path / f"m.h5.tmp-{os.getpid()}-deadbeef"
    live.write_bytes(b"x")
    dead = tmp_path / "m.h5.tmp-999999999-cafe0000"
    dead.write_bytes(b"x")
    for temporary, pid in ((live, os.getpid()), (dead, 999999999)):  # the owner markers a writer creates
        (tmp_path / f".{temporary.name}.varstore-temporary").write_bytes(b"varstore temporary of pid %d" % pid)
    assert atomic.sweep_stale(final) == [dead]
    assert live.exists() and not dead.exists()
    assert not (tmp_path / f".{dead.name}.varstore-temporary").exists()

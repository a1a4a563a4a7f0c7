"""CheckpointManager (both formats): naming, latest pointer, retention, lock, concurrent writers."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import VALUES as _DAMAGE_VALUES
from varstore import CheckpointManager
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.errors import CheckpointLockedError

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = {"h5": ".h5", "zarr": ".zarr"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_names_pointer_and_max_to_keep(tmp_path: Path, fmt: str) -> None:
    manager = CheckpointManager(tmp_path / "run", max_to_keep=3, format=fmt)
    for step in (100, 200, 300, 400, 500):
        path = manager.save({"w": np.full(4, step, np.float32)}, step=step)
        assert path.name == f"ckpt-{step}{SUFFIX[fmt]}"
    assert [p.name for p in manager.checkpoints] == [f"ckpt-{s}{SUFFIX[fmt]}" for s in (300, 400, 500)]
    assert manager.latest.name == f"ckpt-500{SUFFIX[fmt]}"
    pointer = json.loads((tmp_path / "run" / "latest").read_text())
    assert pointer["latest"] == f"ckpt-500{SUFFIX[fmt]}" and pointer["latest_step"] == 500
    with open_checkpoint(manager.latest) as reader:
        assert reader.step == 500
    target = {"w": np.zeros(4, np.float32)}
    manager.restore_latest(target)
    assert target["w"][0] == 500


def test_keep_every_n_hours_preserves_as_tensorflow(tmp_path: Path) -> None:
    clock = Clock()
    manager = CheckpointManager(tmp_path, max_to_keep=2, keep_every_n_hours=1.0, clock=clock)
    for step in range(8):
        clock.now += 1800  # every half hour
        manager.save({"w": np.zeros(2)}, step=step)
    # steps 0..5 fell off; one per hour since creation is kept: 1 (t0+3600), 3 (t0+7200), 5 (t0+10800)
    assert [p.name for p in manager.checkpoints] == ["ckpt-1.h5", "ckpt-3.h5", "ckpt-5.h5", "ckpt-6.h5",
                                                     "ckpt-7.h5"]


def test_max_to_keep_none_keeps_all(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, max_to_keep=None)
    for step in range(7):
        manager.save({"w": np.zeros(2)}, step=step)
    assert len(manager.checkpoints) == 7


def test_restore_latest_skips_damaged_and_temporaries(tmp_path: Path, fmt: str) -> None:
    manager = CheckpointManager(tmp_path, format=fmt)
    manager.save({"w": np.full(2, 1.0)}, step=1)
    manager.save({"w": np.full(2, 2.0)}, step=2)
    newest = manager.latest
    if fmt == "h5":
        newest.write_bytes(b"garbage")
    else:
        (newest / "zarr.json").write_text("{")
    (tmp_path / f"ckpt-3{SUFFIX[fmt]}.tmp-999999999-abcdef01").mkdir()
    assert [p.name for p in manager.checkpoints] == [f"ckpt-1{SUFFIX[fmt]}", f"ckpt-2{SUFFIX[fmt]}"]
    target = {"w": np.zeros(2)}
    reason = "NotACheckpointError" if fmt == "h5" else "CorruptCheckpointError"
    with pytest.warns(RuntimeWarning, match=rf"skipped 1 damaged checkpoint\(s\) .*ckpt-2{SUFFIX[fmt]}' \({reason}: "
                                            rf".*restoring '.*ckpt-1{SUFFIX[fmt]}', the newest that opens cleanly"):
        result = manager.restore_latest(target)
    assert result is not None and target["w"][0] == 1.0


def test_restore_latest_warns_when_every_checkpoint_is_damaged(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, format="h5")
    manager.save({"w": np.full(2, 1.0)}, step=1).write_bytes(b"garbage")
    with pytest.warns(RuntimeWarning, match=r"no checkpoint in '.*' that opens cleanly; skipped '.*ckpt-1\.h5' "
                                            r"\(NotACheckpointError: "):
        assert manager.restore_latest({"w": np.zeros(2)}) is None


def test_restore_latest_on_empty_directory_returns_none(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "nothing")
    assert manager.latest is None and manager.checkpoints == []
    assert manager.restore_latest({"w": np.zeros(2)}) is None


def test_locked_directory_raises_clear_error(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, lock_timeout_s=0.1)
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(CheckpointLockedError, match="another process"):
            manager.save({"w": np.zeros(2)}, step=1)
    finally:
        os.close(fd)
    assert manager.save({"w": np.zeros(2)}, step=1).exists()


CONCURRENT = """
import sys, numpy as np
from varstore import CheckpointManager
directory, offset, fmt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
manager = CheckpointManager(directory, max_to_keep=4, format=fmt)
for i in range(6):
    step = offset + i
    manager.save({"w": np.full(20000, step, np.float64), "b": np.full(3, step)}, step=step)
"""


def test_two_processes_saving_into_one_directory(tmp_path: Path, fmt: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(tmp_path), str(offset), fmt], env=env)
             for offset in (0, 100)]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    manager = CheckpointManager(tmp_path, format=fmt)
    assert len(manager.checkpoints) == 4
    for path in manager.checkpoints:
        with open_checkpoint(path) as reader:
            reader.verify()
            assert reader["w"][0] == reader.step and reader["b"][0] == reader.step
    pointer = json.loads((tmp_path / "latest").read_text())
    assert sorted(entry["name"] for entry in pointer["checkpoints"]) == sorted(
        p.name for p in manager.checkpoints)
    assert pointer["latest"] in {p.name for p in manager.checkpoints}


# ------------------------------------------------------------ restore_latest closes its reader
def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_restore_latest_leaks_no_file_descriptors(tmp_path: Path, fmt: str) -> None:
    manager = CheckpointManager(tmp_path, format=fmt)
    manager.save(_DAMAGE_VALUES, step=1)
    target = {name: np.zeros_like(value) for name, value in _DAMAGE_VALUES.items()}
    manager.restore_latest(target)
    before = _open_descriptors()
    for _ in range(20):
        manager.restore_latest(target)
    assert _open_descriptors() == before
    np.testing.assert_array_equal(target["dense/kernel"], _DAMAGE_VALUES["dense/kernel"])


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_restore_latest_lazy_values_still_read_after_it_returns(tmp_path: Path, fmt: str) -> None:
    from varstore.store.scopes import VariableStore

    manager = CheckpointManager(tmp_path, format=fmt)
    manager.save(_DAMAGE_VALUES, step=1)
    store = VariableStore()
    kernel = store.get_variable("dense/kernel", shape=(8, 16))
    manager.restore_latest(store, lazy=True)
    np.testing.assert_array_equal(kernel.read_value(), _DAMAGE_VALUES["dense/kernel"])

"""Concurrency: two writers and a reader on one CheckpointManager directory; HDF5 locking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ._concurrency import concurrency_campaign
from ._crash_writer import TEST_SIZE

SAVES = int(os.environ.get("VARSTORE_RELIABILITY_SAVES", "6"))


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_two_writers_and_a_reader_never_see_a_half_written_checkpoint(tmp_path: Path, fmt: str) -> None:
    figures = concurrency_campaign(tmp_path / "run", fmt, SAVES, size=TEST_SIZE)
    assert figures["failures"] == []
    assert figures["reads"] > 0
    assert len(figures["final_steps"]) == 3  # max_to_keep
    assert set(figures["final_steps"]) <= set(range(1000, 1000 + SAVES)) | set(range(2000, 2000 + SAVES))


HOLD = """
import sys, time, h5py
f = h5py.File(sys.argv[1], "r+")   # HDF5's own lock (exclusive while open for writing)
print("locked", flush=True)
time.sleep(30)
"""


def test_readers_ignore_hdf5_write_locks(tmp_path: Path) -> None:
    """varstore opens checkpoints with locking=False: a process holding HDF5's write lock does not block reads."""
    from varstore import save
    from varstore.checkpoint import open_varstore as open_checkpoint

    path = save(tmp_path / "m.h5", {"w": np.arange(10.0)})
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with open_checkpoint(path) as reader:
            np.testing.assert_array_equal(reader["w"], np.arange(10.0))
    finally:
        holder.kill()
        holder.wait()


def test_saving_works_with_hdf5_file_locking_off(tmp_path: Path) -> None:
    """HDF5_USE_FILE_LOCKING=FALSE (the NFS switch) is honoured by the writer; the manager's .lock still applies."""
    code = ("import numpy as np; from varstore import CheckpointManager; "
            f"CheckpointManager({str(tmp_path)!r}, format='h5').save({{'w': np.arange(3.0)}}, step=5)")
    env = dict(os.environ, HDF5_USE_FILE_LOCKING="FALSE")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    from varstore import CheckpointManager
    from varstore.checkpoint import open_varstore as open_checkpoint

    manager = CheckpointManager(tmp_path, format="h5")
    assert manager.latest.name == "ckpt-5.h5"
    with open_checkpoint(manager.latest) as reader:
        np.testing.assert_array_equal(reader["w"], np.arange(3.0))


def test_second_writer_waits_then_fails_with_a_clear_error(tmp_path: Path) -> None:
    import fcntl

    from varstore import CheckpointManager
    from varstore.errors import CheckpointLockedError

    tmp_path.mkdir(exist_ok=True)
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(CheckpointLockedError, match="another process"):
            CheckpointManager(tmp_path, format="h5", lock_timeout_s=0.1).save({"w": np.zeros(2)}, step=1)
    finally:
        os.close(fd)
    assert CheckpointManager(tmp_path, format="h5").checkpoints == []

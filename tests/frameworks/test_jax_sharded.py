"""varstore.jax with sharded jax.Arrays: 8 forced CPU devices in one process, and 2 processes under jax.distributed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
h5py = pytest.importorskip("h5py")

SCRIPT = Path(__file__).parent / "scripts" / "jax_sharded_job.py"
ROOT = Path(__file__).resolve().parents[2]


def _run(directory: Path, mode: str, processes: int) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    env.pop("XLA_FLAGS", None)
    jobs = [subprocess.Popen([sys.executable, str(SCRIPT), str(directory), mode, str(p), str(port)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in range(processes)]
    outputs = []
    try:
        for job in jobs:
            out, err = job.communicate(timeout=180)
            assert job.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
                job.communicate()
    return outputs


def test_eight_devices_save_once_per_shard_and_restore_into_another_sharding(tmp_path: Path) -> None:
    (result,) = _run(tmp_path, "one", 1)
    assert result["restored"] == {"w": True, "b": True, "e": True}
    assert result["shardings"] == ["P('b', 'a')", "P(('a', 'b'),)"] and result["shard_shapes"] == [[4, 3]]
    assert result["step"] == 3
    with h5py.File(tmp_path / "one.h5", "r") as f:  # one global array per leaf
        np.testing.assert_array_equal(f["params/w"][()], np.load(tmp_path / "one_w.npy"))
        np.testing.assert_array_equal(f["params/e"][()], np.arange(40, dtype=np.int32).reshape(8, 5))
    import varstore as vs

    with vs.open_checkpoint(tmp_path / "one.h5") as reader:
        writes = reader.distributed["arrays"]["params/w"]["writes"]
    assert sorted((w["offset"], w["shape"]) for w in writes) == [([r, c], [4, 3]) for r in (0, 4, 8, 12) for c in (0, 3)]


def test_two_jax_processes_write_one_checkpoint_and_restore_their_shards(tmp_path: Path) -> None:
    results = _run(tmp_path, "multi", 2)
    assert [r["process"] for r in results] == [[0, 2, 2, 4], [1, 2, 2, 4]]
    assert all(r["local_exact"] and r["n"] == 7 for r in results)
    with h5py.File(tmp_path / "multi.h5", "r") as f:
        np.testing.assert_array_equal(f["w"][()], np.arange(64, dtype=np.float32).reshape(16, 4) * 1.5)

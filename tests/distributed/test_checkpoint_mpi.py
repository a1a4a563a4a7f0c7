"""Collective checkpoints under real `mpiexec` (no mocks): N -> M restores for every pair of 1..4, faults."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import varstore as vs
import varstore.checkpoint  # noqa: F401 - vs.checkpoint below, also when this file runs alone
from tests.distributed.mpi import run_mpi

SCRIPTS = Path(__file__).resolve().parent / "scripts"
pytestmark = pytest.mark.mpi
FULL = np.arange(30, dtype=np.float32).reshape(10, 3)


def test_saved_by_n_ranks_restores_on_m_ranks_for_every_pair(tmp_path):
    run = run_mpi(SCRIPTS / "reshard_job.py", 4, tmp_path, args=(str(tmp_path),))
    assert run.returncode == 0, run
    results = run.json_lines()
    pairs = {f"{n}->{m}.{suffix}" for n in range(1, 5) for m in range(1, 5) for suffix in ("h5", "zarr")}
    assert set(results[0]["checks"]) == pairs
    for rank, result in enumerate(results):  # rank r takes part in every restore on m > r ranks
        assert set(result["checks"]) == {p for p in pairs if int(p.split("->")[1].split(".")[0]) > rank}
        assert all(result["checks"].values()), result["checks"]
    # save(check_replicas=True) names the diverged replicated variable on every rank and writes nothing
    assert results[0]["replica_error"] == results[1]["replica_error"]
    assert "'global_step' (ranks [1] differ from rank 0)" in results[0]["replica_error"]
    assert results[0]["diverged_written"] is False and "replica_error" not in results[2]
    # rank 1 cannot read its (lazily restored) value mid-save: both ranks raise its error, nothing is left
    assert results[0]["save_error"] == results[1]["save_error"]
    assert results[0]["save_error"].startswith("CorruptCheckpointError: rank 1 of 2: cannot read variable")
    assert "lazy-source.h5" in results[0]["save_error"]
    assert results[0]["failed_left"] == results[1]["failed_left"] == []
    # a wrong shape raises the same error on every rank of the restoring job
    for m in range(1, 5):
        messages = {results[r]["errors"][str(m)] for r in range(m)}
        assert len(messages) == 1
        assert ("ShapeMismatchError: cannot restore partitioned variable 'model/embedding' (part "
                "'model/embedding/part_0'): the checkpoint's array 'model/embedding' has shape (10, 3), "
                "the variable was created with (11, 3)") in messages
    for n in range(1, 5):
        with h5py.File(tmp_path / f"saved-by-{n}.h5") as f:  # plain h5py reads the global array whole
            np.testing.assert_array_equal(f["model/embedding"][...], FULL)
            assert int(f.attrs["varstore_written_by_ranks"]) == n
            manifest = json.loads(bytes(f["_varstore/manifest"][...]))
        writes = manifest["distributed"]["arrays"]["model/embedding"]["writes"]
        assert sorted(w["rank"] for w in writes) == list(range(n))  # each part written by its owner, once
        assert manifest["distributed"]["world_size"] == n and manifest["step"] == n
        reader = vs.checkpoint.open_varstore(tmp_path / f"saved-by-{n}.zarr")
        reader.verify()  # the combined crc32c of every multi-writer array
        np.testing.assert_array_equal(reader.read("model/embedding"), FULL)


def test_a_rank_killed_mid_save_leaves_the_previous_checkpoint_and_the_next_job_resumes(tmp_path):
    directory = tmp_path / "run"
    segments = set(Path("/dev/shm").glob("mpich_shm_*"))
    crashed = run_mpi(SCRIPTS / "fault_job.py", 2, tmp_path, args=(str(directory), "save"), timeout_s=60)
    assert crashed.returncode != 0
    assert set(Path("/dev/shm").glob("mpich_shm_*")) <= segments  # the killed job's shared memory went too
    assert json.loads(crashed.stdout[0].splitlines()[0])["saved"].endswith("ckpt-1.h5")
    assert "unreachable" not in "".join(crashed.stdout)
    names = sorted(p.name for p in directory.iterdir())
    assert "ckpt-2.h5" not in names and "ckpt-1.h5" in names
    assert any(".tmp-" in name for name in names)  # the dead job's temporary
    resumed = run_mpi(SCRIPTS / "fault_job.py", 2, tmp_path / "again", args=(str(directory), "resume"), timeout_s=60)
    assert resumed.returncode == 0, resumed
    for result in resumed.json_lines():
        assert result["restored"] == ["embedding/part_0", "embedding/part_1", "global_step"]
        assert result["values"] == [1.0, 1]  # step 1's values, not the half-written step 2
        assert result["temporaries_after"] == []
        assert result["checkpoints"] == ["ckpt-1.h5", "ckpt-3.h5"]

    # varstore ls shows the partitioned variable as one, written by 2 ranks
    from click.testing import CliRunner

    from varstore_cli.main import cli

    result = CliRunner().invoke(cli, ["ls", str(directory / "ckpt-3.h5")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("(varstore-hdf5, version 1.0, step 3, written by 2 ranks)")
    assert lines[1].split() == ["name", "shape", "dtype", "size", "trainable", "collections"]
    assert [line.split()[:4] for line in lines[2:4]] == [["embedding", "[8,", "2]", "float32"],
                                                          ["global_step", "[]", "int64", "8"]]
    assert ("embedding: partitioned variable, one array from 2 parts (embedding/part_0 ...), "
            "written by 2 ranks") in lines
    document = json.loads(CliRunner().invoke(cli, ["ls", "--json", str(directory / "ckpt-3.h5")]).output)
    assert document["written_by_ranks"] == 2
    assert document["partitioned"] == {"embedding": ["embedding/part_0", "embedding/part_1"]}


def test_deferred_restore_fills_parts_created_later_on_the_ranks_that_own_them(tmp_path):
    run = run_mpi(SCRIPTS / "deferred_job.py", 2, tmp_path, args=(str(tmp_path),), timeout_s=90)
    assert run.returncode == 0, run
    results = run.json_lines()
    for rank, result in enumerate(results):
        assert result["initializer_calls"] == 0
        for suffix in ("h5", "zarr"):
            got = result[suffix]
            assert got["deferred"] == ["model/embedding"]
            assert got["values"] == got["expected"]  # each owned part is its region of the saved array
            owned = {0: ["model/embedding/part_0", "model/embedding/part_2"], 1: ["model/embedding/part_1"]}[rank]
            assert sorted(got["values"]) == owned and got["allocated"] == owned  # others take no memory
    assert results[0]["h5"]["values"]["model/embedding/part_2"][0] == [28.0, 29.0, 30.0, 31.0]

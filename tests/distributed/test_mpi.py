"""Real MPI jobs (mpiexec -n 2 and -n 4, no mocks): ownership, partitioned initial values, consistency checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.mpi import run_mpi

SCRIPTS = Path(__file__).resolve().parent / "scripts"
pytestmark = pytest.mark.mpi


def test_two_ranks_own_their_tasks_and_agree_on_everything(tmp_path):
    run = run_mpi(SCRIPTS / "ps_job.py", 2, tmp_path, args=("4",))
    assert run.returncode == 0, run
    r0, r1 = run.json_lines()
    # round robin over ps tasks 0, 1: parts 0..3 -> tasks 0, 1, 0, 1; the kernel -> task 0
    assert r0["owners"] == {"model/embedding/part_0": 0, "model/embedding/part_1": 1, "model/embedding/part_2": 0,
                            "model/embedding/part_3": 1, "model/dense/kernel": 0, "global_step": None}
    assert r0["owned"] == ["global_step", "model/dense/kernel", "model/embedding/part_0", "model/embedding/part_2"]
    assert r1["owned"] == ["global_step", "model/embedding/part_1", "model/embedding/part_3"]
    assert r0["initialized"] == ["global_step", "model/dense/kernel", "model/embedding/part_0", "model/embedding/part_2"]
    assert r1["initialized"] == r1["owned"]
    assert "cannot read variable 'model/embedding/part_1' on rank 0" in r0["not_owned_error"]
    assert "owned by rank 1" in r0["not_owned_error"]
    assert "cannot read variable 'model/embedding/part_0' on rank 1" in r1["not_owned_error"]
    assert "shape (3, 4) and dtype float32" in r1["not_owned_error"]
    assert r0["uninitialized"] == r1["uninitialized"] == []  # only what the rank holds counts
    assert r0["embedding_matches_one_process"] and r1["embedding_matches_one_process"]
    assert r0["embedding_sum"] == r1["embedding_sum"]
    # the same error on every rank, naming the first difference
    assert r0["structure_error"] == r1["structure_error"]
    assert "'model/embedding' " not in r0["structure_error"]
    assert "variable 'model/embedding/part_0' has a different shape on different ranks (rank 0: [3, 4]; rank 1: [4, 4])" \
        in r0["structure_error"]
    assert r0["replica_error"] == r1["replica_error"]
    assert "1 replicated variable(s) differ across the 2 ranks: 'global_step' (ranks [1] differ from rank 0)" \
        in r0["replica_error"]
    assert r0["step_checksums"] == r1["step_checksums"] and len(set(r0["step_checksums"])) == 2
    assert "'orphan' is placed on '/job:ps/task:2', but the communicator has only 2 rank(s)" in r0["task_error"]
    assert r0["allreduce"] == [3, 1, 0.0] and r1["allreduce_array"] == [1, 2]
    assert r0["bcast"] == r1["bcast"] == {"from": 1}
    assert r0["gather"] == [0, 10] and r1["gather"] is None
    assert r0["sub"] == [0, 1, [0]] and r1["sub"] == [0, 1, [1]]
    assert r0["sub_owned"] == ["w"] and r1["sub_owned"] == ["w"]


def test_four_ranks_with_two_parts_agree_with_one_process(tmp_path):
    run = run_mpi(SCRIPTS / "ps_job.py", 4, tmp_path, args=("2",))
    assert run.returncode == 0, run
    results = run.json_lines()
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert all(r["embedding_matches_one_process"] for r in results)
    assert len({r["embedding_sum"] for r in results}) == 1
    # 2 parts on tasks 0, 1; the kernel on task 2; rank 3 holds only the replicated step
    assert [r["owned"] for r in results] == [["global_step", "model/embedding/part_0"],
                                             ["global_step", "model/embedding/part_1"],
                                             ["global_step", "model/dense/kernel"], ["global_step"]]
    assert len({r["structure_error"] for r in results}) == 1
    assert "'model/embedding/part_0' has a different shape on different ranks (ranks [0, 1, 2]: [6, 4]; rank 3: [7, 4])" \
        in results[0]["structure_error"]
    assert "ranks [1, 2, 3] differ from rank 0" in results[3]["replica_error"]
    assert [r["sub"] for r in results] == [[0, 2, [0, 2]], [0, 2, [1, 3]], [1, 2, [0, 2]], [1, 2, [1, 3]]]
    assert results[0]["allreduce"] == [10, 3, 0.0]

"""docs/guide/distributed.md runs as written under `mpiexec -n 2`: rank 0 prints what the guide shows, rank 1 nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_guide import _MARKER, guide_blocks
from tests.distributed.mpi import run_mpi

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "distributed.md"


def test_guide_has_the_issue_examples():
    text = GUIDE.read_text(encoding="utf-8")
    for snippet in ["replica_device_setter(ps_tasks=comm.size)", "partitioner=vs.fixed_size_partitioner(comm.size)",
                    "store.initialize(comm=comm)", "check_structure(store, comm)", "check_replicas(store, comm)",
                    "mpiexec -n 2"]:
        assert snippet in text, snippet


@pytest.mark.mpi
def test_guide_runs_under_mpiexec_and_prints_what_it_shows(tmp_path):
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    script = tmp_path / "guide_script.py"
    script.write_text("\n".join(f"print({_MARKER!r})\n{code}" for code, _ in blocks), encoding="utf-8")
    run = run_mpi(script, 2, tmp_path)
    assert run.returncode == 0, f"the guide's code failed:\n{run.stderr}"
    outputs = run.stdout[0].split(_MARKER + "\n")[1:]
    assert len(outputs) == len(blocks)
    for number, ((code, expected), actual) in enumerate(zip(blocks, outputs), start=1):
        assert actual == expected, f"python block {number} printed something else:\n{code}"
    assert run.stdout[1].replace(_MARKER + "\n", "") == ""

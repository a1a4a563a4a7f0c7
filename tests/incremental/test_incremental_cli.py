"""The CLI on an incremental checkpoint repository: `ls DIR` (one row per kept step, bytes added), and
ls/show/diff/verify/convert/report on `DIR@ckpt-<k>`; `verify DIR` checks every kept step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import varstore as vs
from varstore_cli.main import cli

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")


def _run(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], prog_name="varstore")
    return result.exit_code, result.output


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    base = np.arange(1024, dtype=np.float32)
    for step in (1, 2, 3):
        manager.save({"base/w": base, "adapter/a": np.full(16, step, np.float32)}, step=step)
    return tmp_path / "run"


def test_ls_lists_one_row_per_step_with_the_bytes_it_added(repo: Path) -> None:
    code, out = _run("ls", repo)
    assert code == 0, out
    rows = [line.split() for line in out.splitlines() if "@ckpt-" in line]
    assert [row[0] for row in rows] == [f"{repo}@ckpt-{k}" for k in (1, 2, 3)]
    assert rows[1][2:4] == ["64", "B"]  # step 2 wrote the adapter alone (16 float32)
    code, out = _run("ls", "--json", repo)
    document = json.loads(out)
    assert [s["added_bytes"] for s in document["steps"]] == [4096 + 64, 64, 64]


def test_commands_open_a_step(repo: Path, tmp_path: Path) -> None:
    code, out = _run("ls", f"{repo}@ckpt-2")
    assert code == 0 and "adapter/a" in out and "step 2" in out, out
    code, out = _run("show", f"{repo}@ckpt-2", "adapter/a")
    assert code == 0 and "min          2" in out, out
    code, out = _run("diff", f"{repo}@ckpt-1", f"{repo}@ckpt-3")
    assert code != 0 or "1 values differ" in out
    assert "adapter/a" in out and "1 equal" in out, out
    code, out = _run("verify", repo)
    assert code == 0 and out.count("ok: ") == 3, out
    code, out = _run("convert", f"{repo}@ckpt-3", tmp_path / "three.safetensors")
    assert code == 0, out
    assert vs.load(tmp_path / "three.safetensors")["adapter/a"].tolist() == [3.0] * 16
    code, out = _run("report", f"{repo}@ckpt-1", f"{repo}@ckpt-3", "-o", tmp_path / "report.html")
    assert code == 0 and (tmp_path / "report.html").stat().st_size > 0, out

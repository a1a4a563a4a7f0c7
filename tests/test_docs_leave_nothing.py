"""The documentation's runnable examples clean up after themselves: nothing is left in the temporary directory.

Each example runs in a child process whose TMPDIR is an empty folder of its
own; afterwards the folder must still be empty (tempfile, and everything built
on it, honours TMPDIR).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_with_private_tmpdir(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    private = tmp_path / "TMPDIR"
    work = tmp_path / "work"
    private.mkdir()
    work.mkdir(exist_ok=True)
    paths = [str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, TMPDIR=str(private), PYTHONPATH=os.pathsep.join(p for p in paths if p))
    result = subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True, text=True,
                            timeout=600)
    left = sorted(str(p.relative_to(private)) for p in private.rglob("*"))
    return result, left


def test_the_main_job_without_out_removes_its_temporary_directory(tmp_path: Path, fixtures_dir: Path) -> None:
    pytest.importorskip("safetensors")
    source = fixtures_dir / "safetensors" / "mixed_numpy.safetensors"
    result, left = _run_with_private_tmpdir([str(ROOT / "docs" / "examples" / "minilm.py"), "--source",
                                             str(source)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every value bit-exact" in result.stdout and "removed " in result.stdout
    assert left == []


def test_the_cli_page_examples_leave_nothing(tmp_path: Path) -> None:
    result, left = _run_with_private_tmpdir([str(ROOT / "docs" / "cli_examples.py"), "--check"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert left == []


def test_the_readme_tour_leaves_nothing(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "tour.py").write_text(tour, encoding="utf-8")
    result, left = _run_with_private_tmpdir(["tour.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert left == []

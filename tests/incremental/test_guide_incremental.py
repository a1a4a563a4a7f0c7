"""docs/guide/incremental.md runs as written and prints what it shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_guide import guide_blocks, run_guide

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "incremental.md"


def test_incremental_guide_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    outputs = run_guide(blocks, tmp_path)
    assert len(outputs) == len(blocks)
    for (code, expected), output in zip(blocks, outputs):
        assert output == expected, f"block\n{code}\nprinted\n{output}\nexpected\n{expected}"

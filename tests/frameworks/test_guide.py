"""docs/guide/frameworks.md runs as written and prints what it shows (the rules of tests/core/test_guide.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "frameworks.md"


def _guide_runner():
    spec = importlib.util.spec_from_file_location("_variables_guide_test", ROOT / "tests" / "core" / "test_guide.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guide_shows_the_issue_flows():
    text = GUIDE.read_text(encoding="utf-8")
    for snippet in ["vst.save(", "vst.restore(", "vst.load(", "opt2.load_state_dict(", "vsj.save(",
                    "vsj.restore(", "vsj.load(", "varstore.aliases", "data_ptr()"]:
        assert snippet in text, snippet


def test_guide_code_runs_and_prints_what_the_guide_shows(tmp_path):
    runner = _guide_runner()
    blocks = runner.guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    outputs = runner.run_guide(blocks, tmp_path)
    assert len(outputs) == len(blocks)
    for number, ((code, expected), actual) in enumerate(zip(blocks, outputs), start=1):
        assert actual == expected, f"python block {number} printed something else:\n{code}\n---\n{actual}"

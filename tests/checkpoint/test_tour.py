"""The README tour (docs/checkpoint-tour.md) runs as written, as a script in a temporary directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "docs" / "checkpoint-tour.md"


def test_tour_runs(tmp_path: Path) -> None:
    code = "\n".join(re.findall(r"```python\n(.*?)```", TOUR.read_text(), re.S))  # every block, top to bottom
    script = tmp_path / "tour.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "['conv1/weights'] 1200 {'run': 'a7'} crc32c:" in result.stdout
    assert "ckpt/run/ckpt-1300.h5 [PosixPath('ckpt/run/ckpt-1300.h5')]" in result.stdout
    assert "['encoder/layer_a/weights'] 1" in result.stdout  # the second block's TF restore
    assert (tmp_path / "ckpt" / "model.h5").is_file() and (tmp_path / "ckpt" / "run" / "latest").is_file()

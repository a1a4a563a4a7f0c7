"""Behavior 13: docs/guide/variables.md runs as written and prints what it shows.

The guide's ```python blocks run in order as one script (one namespace) in a
fresh interpreter with the GPU disabled (so devices print as on any machine).
A ```text block right after a python block is that block's exact stdout; a
python block without one must print nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "variables.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)
_MARKER = "@@varstore-guide-block@@"


def guide_blocks(text: str) -> list[tuple[str, str]]:
    """(code, expected stdout) for each python block, in order."""
    fences = list(_FENCE.finditer(text))
    blocks = []
    for index, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        expected = ""
        following = fences[index + 1] if index + 1 < len(fences) else None
        if following is not None and following.group(1) == "text" \
                and text[fence.end():following.start()].strip() == "":
            expected = following.group(2)
        blocks.append((fence.group(2), expected))
    return blocks


def run_guide(blocks: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    """Runs the blocks as one script; returns each block's stdout."""
    script = "\n".join(f"print({_MARKER!r})\n{code}" for code, _ in blocks)
    path = tmp_path / "guide_script.py"
    path.write_text(script, encoding="utf-8")
    env = dict(os.environ, VARSTORE_DISABLE_GPU="1", PYTHONHASHSEED="0")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, f"the guide's code failed:\n{done.stderr}"
    return done.stdout.split(_MARKER + "\n")[1:]


def test_guide_has_the_issue_examples():
    text = GUIDE.read_text(encoding="utf-8")
    for snippet in ["vs.Variable(", "np.reshape(v, (1, 6))", ".assign_add(", "vs.device(", "set_log_device_placement",
                    "store.variable_scope(", "get_collection(", "add_to_collection(", "store.initialize()",
                    "report_uninitialized()", "initialized_value()", "replica_device_setter(", "vs.AUTO_REUSE",
                    "reuse_variables()", "my_image_filter"]:
        assert snippet in text, snippet


def test_guide_code_runs_and_prints_what_the_guide_shows(tmp_path):
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 10
    outputs = run_guide(blocks, tmp_path)
    assert len(outputs) == len(blocks)
    for number, ((code, expected), actual) in enumerate(zip(blocks, outputs), start=1):
        assert actual == expected, f"python block {number} printed something else:\n{code}"

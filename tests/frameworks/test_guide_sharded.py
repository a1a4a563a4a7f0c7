"""docs/guide/distributed.md's PyTorch section runs on 2 gloo ranks and its JAX section on 8 forced devices, as written.

Those blocks are fenced `py` (the MPI guide test runs only `python` blocks); a
`text` block after each holds what rank 0 prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.frameworks.torch_ranks import ROOT, run_ranks

GUIDE = ROOT / "docs" / "guide" / "distributed.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)
_MARKER = "@@varstore-guide-block@@"


def _section_blocks(heading: str) -> list[tuple[str, str]]:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start:end if end >= 0 else len(text)]
    fences = list(_FENCE.finditer(section))
    blocks = []
    for index, fence in enumerate(fences):
        if fence.group(1) == "py":
            following = fences[index + 1] if index + 1 < len(fences) else None
            expected = following.group(2) if following is not None and following.group(1) == "text" else ""
            blocks.append((fence.group(2), expected))
    return blocks


def _script(blocks: list[tuple[str, str]], path: Path) -> Path:
    path.write_text("\n".join(f"if __import__('os').environ.get('RANK', '0') == '0': print({_MARKER!r})\n{code}"
                              for code, _ in blocks), encoding="utf-8")
    return path


def test_pytorch_section_runs_on_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    blocks = _section_blocks("## PyTorch: FSDP2")
    assert len(blocks) == 4
    run = run_ranks(_script(blocks, tmp_path / "guide_torch.py"), 2, tmp_path)
    assert run.returncodes == [0, 0], run.stderr
    outputs = run.stdout[0].split(_MARKER + "\n")[1:]
    assert outputs == [expected for _, expected in blocks]
    assert run.stdout[1] == ""


def test_jax_section_runs_on_eight_devices(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    blocks = _section_blocks("## JAX: sharded arrays")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, str(_script(blocks, tmp_path / "guide_jax.py"))], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split(_MARKER + "\n")[1:] == [expected for _, expected in blocks]

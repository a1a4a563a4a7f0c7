"""Every documentation page's ```python blocks run top to bottom in an empty folder (issue 38, item 10).

A page makes what it reads (or copies it from fixtures/ in a line the reader sees). Pages with a test of
their own (which also checks what each block prints, or runs under MPI or against an object-store server)
are listed in DEDICATED; this test checks that each such test names its page and runs every block in a
fresh tmp_path, and runs every other page itself, so a new page is run without anyone remembering to.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_PYTHON = re.compile(r"^```python\n(.*?)^```\s*$", re.S | re.M)

#: page -> the test that runs all of its python blocks, in order, in an empty tmp_path.
DEDICATED = {
    "README.md": "tests/test_readme.py",
    "docs/checkpoint-tour.md": "tests/checkpoint/test_tour.py",
    "docs/checkpoint-format.md": "tests/checkpoint/test_plain_readers.py",
    "docs/guide/variables.md": "tests/core/test_guide.py",
    "docs/guide/from-tensorflow.md": "tests/core/test_tf_fidelity_guide.py",
    "docs/guide/frameworks.md": "tests/frameworks/test_guide.py",
    "docs/guide/distributed.md": "tests/distributed/test_guide_mpi.py",
    "docs/guide/object-storage.md": "tests/storage/test_guide_object_storage.py",
}


def _pages() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [str(p.relative_to(ROOT)) for p in pages if _PYTHON.search(p.read_text(encoding="utf-8"))]


def test_every_page_with_python_blocks_is_run_somewhere() -> None:
    pages = _pages()
    assert "docs/checkpoint-tour.md" in pages and "docs/guide/variables.md" in pages
    for page, test in DEDICATED.items():
        assert page in pages, f"{page} has no python block any more: drop it from DEDICATED"
        text = (ROOT / test).read_text(encoding="utf-8")
        assert Path(page).name in text and "tmp_path" in text, f"{test} does not run {page} in a fresh folder"


@pytest.mark.parametrize("page", [p for p in _pages() if p not in DEDICATED] or ["(none)"])
def test_page_runs_top_to_bottom_in_an_empty_folder(page: str, tmp_path: Path) -> None:
    if page == "(none)":  # every page has its own test today; the parameter keeps this test checking that
        assert all(p in DEDICATED for p in _pages())
        return
    code = "\n".join(_PYTHON.findall((ROOT / page).read_text(encoding="utf-8")))
    paths = [str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p)), timeout=600)
    assert result.returncode == 0, f"{page}:\n{result.stderr}"

"""docs/cli.md shows real output: re-running its examples must reproduce it exactly."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_examples_script():
    spec = importlib.util.spec_from_file_location("cli_examples", ROOT / "docs" / "cli_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_outputs_are_current(tmp_path):
    examples = _load_examples_script()
    page = examples.PAGE.read_text(encoding="utf-8")
    with examples.scratch_directory(tmp_path):
        fresh = examples.render(page)
    stale = "".join(difflib.unified_diff(page.splitlines(True), fresh.splitlines(True), "docs/cli.md", "fresh"))
    assert fresh == page, f"docs/cli.md is stale; run `python docs/cli_examples.py`:\n{stale}"


def test_docs_cover_every_command():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in ("ls", "ls --tree", "ls --json", "show", "show --json", "diff", "diff --rtol", "verify",
                    "verify --json", "convert", "convert --json"):
        assert f"\n$ varstore {command}" in page, command
    for schema in ("varstore.ls/1", "varstore.show/1", "varstore.diff/1", "varstore.verify/1",
                   "varstore.convert/1"):
        assert f'"schema": "{schema}"' in page, schema

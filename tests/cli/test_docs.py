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


def _load_synopsis_script():
    spec = importlib.util.spec_from_file_location("cli_synopsis", ROOT / "docs" / "cli_synopsis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_synopsis_is_the_click_commands_own() -> None:
    synopsis = _load_synopsis_script()
    page = synopsis.PAGE.read_text(encoding="utf-8")
    assert synopsis.render(page) == page, "docs/cli.md's synopsis is stale; run `python docs/cli_synopsis.py`"
    text = synopsis.synopsis()
    from varstore.formats.registry import read_format_names, write_format_names
    from varstore_cli.main import cli

    for name, command in cli.commands.items():  # every option of every command is on the page
        assert f"varstore {name} " in text
        for param in command.params:
            long = [o for o in param.opts if o.startswith("--") and o != "--help"]
            assert not long or long[0] in text, (name, long)
    assert ", ".join(read_format_names()) in text.replace("\n    ", " ")
    assert ", ".join(write_format_names()) in text


def test_docs_name_formats_only_through_the_registry_list() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    prose = page.split("<!-- end of synopsis -->", 1)[1]
    assert "`keras3`, `keras2`" not in prose and "`h5`, `zarr`, `safetensors`, `npz`" not in prose


def test_docs_describe_the_checkpoints_and_folder_schemas() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for schema in ("varstore.checkpoints/1", "varstore.folder/1"):
        assert f"**`{schema}`**" in page, schema

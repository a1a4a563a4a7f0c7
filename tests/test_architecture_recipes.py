"""docs/architecture.md's recipes name real places: every file path in "Adding a format" and "Adding a
storage" exists (placeholders such as <format> aside), each recipe has five steps, and the names the
seams section calls the seam's calls are on the protocols."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end != -1 else None]


@pytest.mark.parametrize("title", ["Adding a format", "Adding a storage", "The two seams"])
def test_every_path_a_recipe_names_exists(title: str) -> None:
    paths = set(re.findall(r"`((?:varstore|tests|docs|fixtures|cli)/[^`\s]*)`", _section(title)))
    assert paths, title
    missing = sorted(p for p in paths if "<" not in p and not (ROOT / p).exists())
    assert not missing, f"{title} names files that do not exist: {missing}"


@pytest.mark.parametrize("title", ["Adding a format", "Adding a storage"])
def test_each_recipe_has_five_steps(title: str) -> None:
    steps = re.findall(r"^(\d)\. ", _section(title), re.M)
    assert steps == ["1", "2", "3", "4", "5"], steps


def test_the_storage_recipe_lists_exactly_the_protocol_calls() -> None:
    from varstore.storage import ObjectStore, Storage

    recipe = _section("Adding a storage")
    step1, step2 = recipe.split("\n2. ")[0], recipe.split("\n2. ")[1].split("\n3. ")[0]
    storage_calls = {n for n in vars(Storage) if not n.startswith("_")} | set(Storage.__annotations__)
    object_calls = ({n for n in vars(ObjectStore) if not n.startswith("_")} - storage_calls) | {"put_if", "version"}
    assert {n for n in storage_calls if f"`{n}`" not in step1} == set()
    assert {n for n in object_calls if f"`{n}`" not in step2 and f"`{n}`/" not in step2 and f"/`{n}`" not in step2} == set()


def test_the_format_recipe_names_every_format_entry_field() -> None:
    import dataclasses

    from varstore.formats.format_entry import FormatEntry

    recipe = _section("Adding a format")
    fields = {f.name for f in dataclasses.fields(FormatEntry)} - {"name", "description", "write_names",
                                                                    "write_suffixes", "refuses"}
    missing = sorted(f for f in fields if f"{f}=" not in recipe)
    assert not missing, f"the recipe's FormatEntry leaves out {missing}"

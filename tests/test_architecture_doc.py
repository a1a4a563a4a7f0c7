"""docs/architecture.md is true: its module list is the code's, each with its job, and its layers are checked.

The module list is the first code block under "## Modules": a tree, two
spaces per level, a folder ends with "/", each module line is
"<file>  <one-line job>". The arrow line (the layers) is checked against every
import by tests/test_layering.py; here we check that it parses and places
every module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests import import_graph as graph

ROOT = graph.ROOT
DOC = graph.ARCHITECTURE_DOC
# Words too common to show that a job line and a docstring talk about the same thing.
COMMON_WORDS = {"with", "from", "that", "every", "each", "into", "only", "this", "them", "their", "what",
                "varstore", "module", "modules", "package", "file", "files", "read", "reads", "written"}


def parse_module_list(text: str) -> dict[str, str]:
    """Repo-relative file -> job, from the first code block after "## Modules"."""
    lines = text.splitlines()
    start = lines.index("## Modules")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    last = next(i for i in range(first + 1, len(lines)) if lines[i].startswith("```"))
    listed: dict[str, str] = {}
    folders: list[str] = []
    for number, line in enumerate(lines[first + 1:last], start=first + 2):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent % 2:
            raise AssertionError(f"docs/architecture.md:{number}: indent by two spaces per level")
        level = indent // 2
        if level > len(folders):
            raise AssertionError(f"docs/architecture.md:{number}: indented deeper than its folder")
        del folders[level:]
        name, _, job = line.strip().partition("  ")
        if name.endswith("/"):
            folders.append(name)
            continue
        if not job.strip():
            raise AssertionError(f"docs/architecture.md:{number}: {name} needs its one-line job after two spaces")
        path = "".join(folders) + name
        if path in listed:
            raise AssertionError(f"docs/architecture.md:{number}: {path} is listed twice")
        listed[path] = job.strip()
    return listed


LISTED = parse_module_list(DOC.read_text(encoding="utf-8"))
ON_DISK = {str(path.relative_to(ROOT)): path for path in graph.modules().values()}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9_]+", text.lower()) if len(w) >= 4 and w not in COMMON_WORDS}


def test_the_doc_lists_every_module_and_nothing_else() -> None:
    missing = sorted(set(ON_DISK) - set(LISTED))
    stale = sorted(set(LISTED) - set(ON_DISK))
    assert not missing, f"docs/architecture.md does not list {missing}: add '<file>  <one-line job>' under its folder"
    assert not stale, f"docs/architecture.md lists modules that do not exist: {stale}"


@pytest.mark.parametrize("path", sorted(ON_DISK))
def test_every_module_has_a_docstring_that_matches_its_job_in_the_doc(path: str) -> None:
    docstring = ast.get_docstring(ast.parse(ON_DISK[path].read_text(encoding="utf-8")))
    assert docstring and docstring.splitlines()[0].strip(), f"{path} has no module docstring saying its job"
    if path in LISTED:  # a missing entry is reported by the test above
        shared = _words(LISTED[path]) & _words(docstring)
        assert shared, (f"the job of {path} in docs/architecture.md ({LISTED[path]!r}) shares no word with its "
                        f"docstring ({docstring.splitlines()[0]!r}): one of them is out of date")


def test_the_arrow_line_places_every_module() -> None:
    layers = {name for layer in graph.layer_order() for name in layer}
    unplaced = sorted({graph.layer_of(module) for module in graph.modules()} - layers)
    assert not unplaced, f"the arrow line in docs/architecture.md does not place {unplaced}"


def test_module_list_parsing() -> None:
    text = "## Modules\n\n```\npkg/\n  a.py  job a\n  sub/\n    b.py   job b\nc.py  job c\n```\n"
    assert parse_module_list(text) == {"pkg/a.py": "job a", "pkg/sub/b.py": "job b", "c.py": "job c"}
    with pytest.raises(AssertionError, match="one-line job"):
        parse_module_list("## Modules\n\n```\nx.py\n```\n")
    with pytest.raises(AssertionError, match="listed twice"):
        parse_module_list("## Modules\n\n```\nx.py  one\nx.py  two\n```\n")



def test_the_top_of_the_package_stays_small() -> None:
    """At most 14 modules at varstore/'s top (issue 42): the core lives in varstore/store/, the adapters' helpers under their faces."""
    top = sorted(p.name for p in (ROOT / "varstore").glob("*.py"))
    assert len(top) <= 14, top
    assert (ROOT / "varstore" / "torch" / "__init__.py").exists() and (ROOT / "varstore" / "jax" / "__init__.py").exists()

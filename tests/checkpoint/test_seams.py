"""The checkpoint layer's modules talk through public calls: no private names imported across modules,
no reader privates used outside the reader, no HDF5-specific branch outside the backends."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "varstore" / "checkpoint").rglob("*.py")) + sorted((ROOT / "varstore" / "storage").glob("*.py"))
#: Every module of the library and the CLI (the 500-line rule holds everywhere).
ALL_MODULES = sorted((ROOT / "varstore").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_name_is_imported_from_another_module(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("varstore"):
            package = ROOT.joinpath(*node.module.split("."))
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                       and not (package / f"{a.name}.py").exists()]  # a private module is fine, its privates not
            assert not private, f"{path.name} imports {private} from {node.module}"


@pytest.mark.parametrize("name", ["read/restoration.py", "read/read_engine.py", "manage/manager.py"])
def test_callers_of_the_reader_use_no_private_attribute(name: str) -> None:
    text = (ROOT / "varstore" / "checkpoint" / name).read_text(encoding="utf-8")
    assert not re.search(r"\breader\._[a-z]", text), f"{name} reaches into the reader"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_format_specific_branch_in_the_checkpoint_layer(path: Path) -> None:
    assert not re.search(r"""_fmt\s*==|fmt\s*==\s*["']h5|== ["']zarr["']""", path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", ALL_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


def test_the_read_engine_asks_the_reader_for_one_plan_and_nothing_else() -> None:
    """read_engine.py hands the reader to plan_read once and executes the plan (issue 42, item 3)."""
    tree = ast.parse((ROOT / "varstore" / "checkpoint" / "read" / "read_engine.py").read_text(encoding="utf-8"))
    reaches = [node.attr for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "reader"]
    passed = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
              and any(isinstance(arg, ast.Name) and arg.id == "reader" for arg in node.args)]
    assert reaches == [], f"read_engine.py reaches into the reader: {reaches}"
    assert [ast.unparse(call.func) for call in passed] == ["plan_read"]

"""mypy is part of CI: .ci/run runs it after the tests, and (slow) the tree type-checks clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STRICT_CORE = {"varstore.store._array_interop", "varstore.store._assignment", "varstore._core_api", "varstore.store._naming", "varstore._version",
               "varstore.store.collections", "varstore.store.devices", "varstore.dtypes", "varstore.errors",
               "varstore.initializers", "varstore.store.ownership", "varstore.store.partitioning", "varstore.store.placement", "varstore.store.scopes", "varstore.store.variables",
               "varstore.store.value_sources", "varstore.store.values", "varstore.store.variable_batches",
               "varstore.store._variable_scope", "varstore.store._variable_state", "varstore.store.reuse", "varstore.store.default_store",
               "varstore.store.partitioners"}
#: The public face and both seams (issue 29), strict too.
STRICT_FACES = {"varstore", "varstore._open", "varstore.distributed.api", "varstore.storage", "varstore.storage.protocol",
                "varstore.storage.staged_read", "varstore.formats.format_entry", "varstore.formats.registry"}


def _mypy_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def test_ci_runs_mypy_after_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    tests = script.index('python -m pytest -q -n auto\n')
    mypy = script.index("python -m mypy varstore cli\n")
    assert tests < mypy
    assert 'exit "$mypy_rc"' in script[mypy:]


def test_the_core_public_api_modules_and_the_seams_are_strict() -> None:
    strict = next(o for o in _mypy_config()["overrides"] if "disallow_untyped_defs" in o)
    assert set(strict["module"]) == STRICT_CORE | STRICT_FACES
    for flag in ("disallow_untyped_defs", "disallow_any_generics", "warn_return_any", "disallow_untyped_calls",
                 "no_implicit_reexport", "warn_unused_ignores"):
        assert strict[flag] is True, flag


@pytest.mark.slow
def test_mypy_passes_on_varstore_and_cli(tmp_path: Path) -> None:
    if shutil.which("mypy") is None and subprocess.run([sys.executable, "-m", "mypy", "--version"],
                                                      capture_output=True).returncode != 0:
        pytest.skip("mypy is not installed")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "varstore", "cli"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout

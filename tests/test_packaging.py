"""The wheel carries what a user of the package needs: py.typed, the LICENSE, the Python floor, the SPDX license.

The wheel is built from a copy of the sources in tmp_path (setuptools writes
build/ and *.egg-info next to pyproject.toml; the working tree stays clean),
without build isolation: the setuptools installed here builds it, offline.
"""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("setuptools", minversion="77")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    for package in ("varstore", "cli"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "--no-index", "-q", "-w", str(out), str(source)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "SetuptoolsDeprecationWarning" not in result.stderr, result.stderr
    (built,) = out.glob("varstore-*.whl")
    return built


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def test_wheel_ships_py_typed_and_the_license(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        license_members = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert "varstore/py.typed" in names
        assert len(license_members) == 1
        text = archive.read(license_members[0]).decode("utf-8")
    assert text == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "varstore_cli/main.py" in names and not any("__pycache__" in n for n in names)


def test_wheel_metadata_says_python_3_11_and_apache_2(wheel: Path) -> None:
    metadata = _metadata(wheel)
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    classifiers = metadata.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression replaces them
    requirements = metadata.get_all("Requires-Dist")
    assert 'torch<2.14,>=2.4; extra == "torch"' in requirements


def test_extras_name_ranges_not_exact_pins() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    pinned = [req for reqs in extras.values() for req in reqs if "==" in req]
    assert pinned == []
    assert extras["torch"] == ["torch>=2.4,<2.14"]


def test_python_floor_agrees_with_mypy_and_the_interpreter() -> None:
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == "3.11"
    assert sys.version_info >= (3, 11)

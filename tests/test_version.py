"""__version__ is written once (varstore/_version.py) and read by the package, the manifest and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import varstore as vs
from varstore import _version
from tests.checkpoint.plain import plain_root_attrs
from varstore_cli.main import cli

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_version_is_the_one_in_version_py_and_pyproject():
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert vs.__version__ is _version.__version__
    assert vs.__version__ == declared == "0.1.0"


def test_the_manifest_and_the_cli_report_the_same_version(tmp_path):
    path = tmp_path / "model.h5"
    vs.save(path, {"w": np.arange(3, dtype=np.float32)})
    assert plain_root_attrs(path)["varstore_library_version"] == _version.__version__
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip().endswith(_version.__version__)

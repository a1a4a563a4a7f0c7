"""Report test helpers: two small varstore checkpoints with known values (A in HDF5, B in Zarr) and the page's data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import varstore

#: A name that would be markup if it reached the page unescaped.
HOSTILE = "</script><script>alert(1)</script>"


def values_a() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    kernel = rng.normal(0.0, 0.5, size=(64, 48)).astype(np.float32)
    return {
        "encoder/dense/kernel": kernel,
        "encoder/dense/bias": np.linspace(-1, 1, 48, dtype=np.float32),
        "encoder/steps": np.arange(12, dtype=np.int64),
        "decoder/out/kernel": np.ones((8, 4), dtype=np.float64),
        "decoder/old": np.zeros(5, dtype=np.float32),
        HOSTILE: np.full(3, 2.0, dtype=np.float32),
    }


def values_b() -> dict[str, np.ndarray]:
    a = values_a()
    kernel = a["encoder/dense/kernel"].copy()
    kernel[0, :] += 1.0          # one row moved
    kernel[1, 2] = np.nan        # NaN appeared
    kernel[3, 3] = np.inf        # Inf appeared
    return {
        "encoder/dense/kernel": kernel,
        "encoder/dense/bias": a["encoder/dense/bias"],
        "encoder/steps": a["encoder/steps"],
        "decoder/out/kernel": np.ones((4, 8), dtype=np.float64),   # shape changed
        "decoder/new": np.full((2, 3), 0.5, dtype=np.float32),     # added
        HOSTILE: a[HOSTILE],
    }


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(A: a varstore HDF5 file, B: a varstore Zarr directory)."""
    root = tmp_path_factory.mktemp("report_checkpoints")
    a, b = root / "a.h5", root / "b.zarr"
    varstore.save(a, values_a(), step=1000, metadata={"run": "demo"})
    varstore.save(b, values_b(), step=2000)
    return a, b


@pytest.fixture(scope="session")
def single(checkpoints: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(page, ReportResult) of B alone, with 2 figures (shared by the API and browser tests)."""
    out = tmp_path_factory.mktemp("single") / "report.html"
    return out, varstore.report(checkpoints[1], output=out, figures=2)


@pytest.fixture(scope="session")
def diff(checkpoints: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(page, ReportResult) of A -> B, without histogram figures."""
    out = tmp_path_factory.mktemp("diff") / "diff.html"
    return out, varstore.report(checkpoints[0], checkpoints[1], output=out, figures=0)


def page_data(path: Path) -> dict[str, Any]:
    """The JSON data island of a report page."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert found is not None, f"{path} has no data island"
    return json.loads(found.group(1))


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in data["variables"]}

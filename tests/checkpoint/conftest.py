"""Checkpoint test fixtures: the format parameter ("h5", "zarr") and path factories."""

from __future__ import annotations

from pathlib import Path

import pytest

SUFFIX = {"h5": ".h5", "zarr": ".zarr"}


@pytest.fixture(params=["h5", "zarr"])
def fmt(request: pytest.FixtureRequest) -> str:
    """Every checkpoint contract test runs for both formats."""
    return request.param


@pytest.fixture
def ckpt(tmp_path: Path, fmt: str) -> Path:
    """A not-yet-existing checkpoint path of the current format."""
    return tmp_path / f"model{SUFFIX[fmt]}"

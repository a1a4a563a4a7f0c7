"""Shared test fixtures and markers: fixtures_dir, gpu / slow / minilm skips, hypothesis profiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# "ci" is derandomized so a CI run is reproducible; "long" explores (HYPOTHESIS_PROFILE=long).
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _has_gpu() -> bool:
    try:
        import cupy  # noqa: F401  (tests may import cupy to check for a device)

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = _has_gpu()
    slow = os.environ.get("VARSTORE_SLOW") == "1"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs CuPy and a CUDA device"))
        if "slow" in item.keywords and not slow:
            item.add_marker(pytest.mark.skip(reason="slow; run with VARSTORE_SLOW=1"))


@pytest.fixture
def fixtures_dir() -> Path:
    """The repository's fixtures/ folder (small real checkpoint files with manifests)."""
    return FIXTURES

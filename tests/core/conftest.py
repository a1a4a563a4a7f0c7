"""Fixtures for the core tests: a fresh store and a reset of process-wide settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from varstore import initializers
from varstore.store import default_store
from varstore.store import devices
from varstore.store.scopes import VariableStore


@pytest.fixture(autouse=True)
def _reset_core_state() -> Iterator[None]:
    """Each test starts with no seed, soft placement on, placement logging off, an empty default store."""
    initializers.set_random_seed(None)
    devices.set_soft_device_placement(True)
    devices.set_log_device_placement(False)
    default_store.reset_default_store()
    yield
    initializers.set_random_seed(None)
    devices.set_soft_device_placement(True)
    devices.set_log_device_placement(False)
    devices._set_gpu_count_override(None)


@pytest.fixture
def store() -> VariableStore:
    return VariableStore()

"""Crash consistency: SIGKILLed CheckpointManager writers (named fault points and random delays)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ._crash import crash_campaign

KILLS = int(os.environ.get("VARSTORE_RELIABILITY_KILLS", "12"))


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_every_kill_leaves_a_restorable_directory(tmp_path: Path, fmt: str) -> None:
    figures = crash_campaign(tmp_path / "run", fmt, KILLS, seed=1)
    assert figures["failures"] == []
    assert figures["kills"] == KILLS
    assert figures["survived"] == KILLS
    assert figures["named_kills"] >= 4 and figures["delay_kills"] >= 1
    assert figures["leftover_temporaries"] == []

"""Crash campaign: SIGKILL a CheckpointManager writer at many points, check the directory after each kill.

Kills come from the named fault points of varstore/checkpoint/publish/atomic.py
(VARSTORE_FAULT: after_data, before_checksums, before_rename,
after_rename_before_latest) and from random delays spread over a
calibrated save time. After every kill: every listed checkpoint opens,
verifies and holds exactly the values of its step (no partial checkpoint
is listed); `latest` restores through restore_latest and verifies; and
saving the same step again succeeds and is then the latest. A kill that
came after the save had finished counts as "completed", not as a kill.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from varstore import CheckpointManager
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.publish.atomic import FAULT_POINTS, is_temporary

from ._crash_writer import FULL_SIZE, model as _model  # the same values the writer saves

WRITER = Path(__file__).resolve().parent / "_crash_writer.py"
ROOT = Path(__file__).resolve().parents[2]


class _Writer:
    """The forking writer process (see _crash_writer.py)."""

    def __init__(self, directory: Path, fmt: str, size: tuple[int, int]) -> None:
        env = dict(os.environ)
        env.pop("VARSTORE_FAULT", None)
        self._proc = subprocess.Popen([sys.executable, str(WRITER), str(directory), fmt, *map(str, size)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def save(self, step: int, fault: str | None = None, delay_s: float | None = None) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"step": step, "fault": fault, "delay_s": delay_s}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"crash writer died (exit {self._proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        if self._proc.stdout:
            self._proc.stdout.close()


def _check_values(path: Path, expected_step: int | None = None, size: tuple[int, int] = FULL_SIZE) -> int:
    """Opens, verifies and compares one checkpoint with model(step, size); returns its step."""
    with open_checkpoint(path) as reader:
        reader.verify()
        step = int(reader.step)
        if expected_step is not None and step != expected_step:
            raise AssertionError(f"{path.name} holds step {step}, expected {expected_step}")
        expected = _model(step, size)
        if sorted(reader.keys()) != sorted(expected):
            raise AssertionError(f"{path.name}: names differ from model({step})")
        for name, value in expected.items():
            if not np.array_equal(reader[name], value):
                raise AssertionError(f"{path.name}: '{name}' differs from model({step})")
    return step


def check_directory(directory: Path, fmt: str, must_have_latest: bool,
                    size: tuple[int, int] = FULL_SIZE) -> list[str]:
    """Every promise about a manager directory after a kill; returns the broken ones (empty: survived)."""
    problems = []
    manager = CheckpointManager(directory, format=fmt, max_to_keep=3)
    for path in manager.checkpoints:
        if is_temporary(path):
            problems.append(f"temporary {path.name} listed")
            continue
        try:
            _check_values(path, size=size)
        except Exception as err:  # noqa: BLE001 - every failure is a finding
            problems.append(f"listed checkpoint {path.name} is partial or wrong: {type(err).__name__}: {err}")
    latest = manager.latest
    if latest is None:
        if must_have_latest:
            problems.append("no latest checkpoint after a successful save")
        return problems
    try:
        step = _check_values(latest, size=size)
        expected = _model(step, size)
        target = {name: np.zeros_like(value) for name, value in expected.items()}
        result = manager.restore_latest(target)
        if result is None or any(not np.array_equal(target[n], expected[n]) for n in expected):
            problems.append(f"restore_latest did not restore step {step}")
    except Exception as err:  # noqa: BLE001
        problems.append(f"latest {latest.name} does not restore: {type(err).__name__}: {err}")
    return problems


def crash_campaign(directory: Path, fmt: str, kills: int, *, seed: int = 0,
                   size: tuple[int, int] = FULL_SIZE) -> dict[str, Any]:
    """Kills writers until `kills` SIGKILLs landed mid-save; returns the figures.

    `size` is the model's (own, small) array counts (see _crash_writer.model).

    Returns:
      {"format", "kills", "survived", "named_kills", "delay_kills", "completed" (kills that came
      too late), "failures": [first problems], "save_ms_median"}.
    """
    rng = random.Random(seed)
    writer = _Writer(directory, fmt, size)
    failures: list[str] = []
    survived = landed = named = delayed = completed = 0
    try:
        durations = []
        for step in (1, 2, 3):  # calibration saves (also give the directory a history)
            answer = writer.save(step)
            if answer["exit"] != 0:
                raise RuntimeError(f"calibration save of step {step} failed: {answer}")
            durations.append(answer["elapsed_s"])
        window = max(durations) * 1.1
        named_quota = max(len(FAULT_POINTS), kills // 5)
        plan: list[tuple[str | None, float | None]] = [
            (FAULT_POINTS[i % len(FAULT_POINTS)], None) for i in range(named_quota)]
        attempts = 0
        while landed < kills and attempts < kills * 8:
            attempts += 1
            fault, delay = plan.pop(0) if plan else (None, rng.uniform(0.0, window))
            step = 4 + rng.randrange(6)  # a few steps reused, so saves replace existing checkpoints
            answer = writer.save(step, fault, delay)
            if not answer["killed"]:
                if answer["exit"] != 0:
                    failures.append(f"writer exited {answer['exit']} without being killed")
                completed += 1
            else:
                landed += 1
                named += fault is not None
                delayed += fault is None
            problems = check_directory(directory, fmt, must_have_latest=True, size=size)
            again = writer.save(step)
            if again["exit"] != 0 or again["killed"]:
                problems.append(f"saving step {step} again after the kill failed: {again}")
            else:
                manager = CheckpointManager(directory, format=fmt, max_to_keep=3)
                try:
                    if manager.latest is None or _check_values(manager.latest, step, size) != step:
                        problems.append(f"step {step} saved again is not the latest")
                except Exception as err:  # noqa: BLE001
                    problems.append(f"step {step} saved again does not verify: {err}")
            if answer["killed"]:
                if problems:
                    failures.append(f"kill {landed} ({fault or f'delay {delay * 1000:.1f} ms'}): "
                                    + "; ".join(problems))
                else:
                    survived += 1
            elif problems:
                failures.append("after a completed save: " + "; ".join(problems))
    finally:
        writer.close()
    leftovers = [p.name for p in directory.iterdir() if is_temporary(p)]
    return {"format": fmt, "kills": landed, "survived": survived, "named_kills": named,
            "delay_kills": delayed, "completed": completed, "failures": failures[:10],
            "save_ms_median": round(statistics.median(durations) * 1000, 1), "leftover_temporaries": leftovers}

"""Concurrency campaign: two writer processes and a reader share one CheckpointManager directory.

The writers (_concurrent_writer.py) save interleaved steps while this
process reads in a loop: every listed checkpoint and `latest` must open,
verify and hold exactly model(step). A read that fails because retention
deleted the checkpoint under the reader is counted as "deleted while
reading" (a typed error on a path that no longer exists), never as a
half-written checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from varstore import CheckpointManager
from varstore.errors import VarstoreError

from ._crash import _check_values
from ._crash_writer import FULL_SIZE

HERE = Path(__file__).resolve().parent


def concurrency_campaign(directory: Path, fmt: str, saves_per_writer: int,
                         size: tuple[int, int] = FULL_SIZE) -> dict[str, Any]:
    """Returns {"format", "saves", "reads", "deleted_while_reading", "failures", "final_steps"}.

    `size` is the model's (own, small) array counts (see _crash_writer.model).
    """
    env = dict(os.environ)
    env.pop("VARSTORE_FAULT", None)
    writers = [subprocess.Popen([sys.executable, str(HERE / "_concurrent_writer.py"), str(directory), fmt,
                                 str(start), str(saves_per_writer), *map(str, size)],
                                env=env, stderr=subprocess.PIPE, text=True)
               for start in (1000, 2000)]
    reads = deleted = 0
    failures: list[str] = []
    manager = CheckpointManager(directory, format=fmt, max_to_keep=3)
    while any(w.poll() is None for w in writers):
        for path in manager.checkpoints + ([manager.latest] if manager.latest else []):
            try:
                _check_values(path, size=size)
                reads += 1
            except VarstoreError as err:
                if path.exists():
                    failures.append(f"{path.name}: {type(err).__name__}: {err}")
                else:
                    deleted += 1
            except Exception as err:  # noqa: BLE001 - an untyped error is a finding
                if path.exists():
                    failures.append(f"{path.name}: untyped {type(err).__name__}: {err}")
                else:
                    deleted += 1
    codes = [w.wait() for w in writers]
    for writer, code in zip(writers, codes):
        if code != 0:
            failures.append(f"writer exited {code}: {(writer.stderr.read() if writer.stderr else '')[-300:]}")
        if writer.stderr:
            writer.stderr.close()
    final = []
    for path in manager.checkpoints:
        final.append(_check_values(path, size=size))
    return {"format": fmt, "saves": 2 * saves_per_writer, "reads": reads, "deleted_while_reading": deleted,
            "failures": failures[:10], "final_steps": sorted(final)}

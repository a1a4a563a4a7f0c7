"""Concurrent writer (a script): saves steps START..START+COUNT-1 into one CheckpointManager directory.

    python _concurrent_writer.py DIRECTORY FORMAT START COUNT [OWN SMALL]

Values are _crash_writer.model(step, (OWN, SMALL)) (default: its FULL_SIZE), so readers can check any checkpoint
they see. Runs next to another writer and readers (tests/reliability/test_concurrency.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _crash_writer import FULL_SIZE, model  # noqa: E402

from varstore import CheckpointManager  # noqa: E402

if __name__ == "__main__":
    directory, fmt, start, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    size = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else FULL_SIZE
    manager = CheckpointManager(directory, format=fmt, max_to_keep=3, lock_timeout_s=120)
    for step in range(start, start + count):
        manager.save(model(step, size), step=step)

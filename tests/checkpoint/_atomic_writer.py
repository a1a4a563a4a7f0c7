"""One save of data(value) for test_atomic.py, run in a child that VARSTORE_FAULT may SIGKILL mid-save.

    python _atomic_writer.py PATH VALUE MANAGER FORMAT

MANAGER "1" saves step int(VALUE) through CheckpointManager(PATH, format=FORMAT), "0" saves
to PATH with varstore.checkpoint.save. The tests call write() in their own process for the
saves that are not killed: the same call on the same values.
"""

from __future__ import annotations

import sys

import numpy as np

from varstore import CheckpointManager, save


def data(value: float) -> dict[str, np.ndarray]:
    """Three variables, every element `value`: "a" (1000,) float64, "b/c" (10,) float32, "d" (5000,) float64."""
    return {"a": np.full(1000, value), "b/c": np.full(10, value, np.float32), "d": np.full(5000, value)}


def write(path: str, value: float, manager: bool, fmt: str) -> None:
    if manager:
        CheckpointManager(path, format=fmt).save(data(value), step=int(value))
    else:
        save(path, data(value))


if __name__ == "__main__":
    write(sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1", sys.argv[4])

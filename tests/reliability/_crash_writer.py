"""Writer process for the crash campaign: forks one child per save and SIGKILLs it on request.

Run as a script (never imported by pytest):

    python _crash_writer.py DIRECTORY FORMAT [OWN SMALL]

It imports varstore once, then reads JSON commands from stdin, one a line:
`{"step": s, "fault": "before_rename" | null, "delay_s": 0.013 | null}`.
For each it forks a child that saves `model(step)` through
CheckpointManager(DIRECTORY, format=FORMAT, max_to_keep=3) (with
VARSTORE_FAULT=<fault> set, so the child kills itself at that point), and,
when `delay_s` is given, sends the child SIGKILL after that many seconds.
OWN and SMALL size the model (default FULL_SIZE, the documented figures);
the pytest runs save TEST_SIZE.
It answers one JSON line: `{"killed": bool, "exit": code, "elapsed_s": t}`.
Forking keeps a kill cheap (no interpreter start), so hundreds fit in a run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np

from varstore import CheckpointManager


#: (own arrays, small arrays) of the documented figures (tests/reliability/figures.py).
FULL_SIZE = (24, 300)
#: (own, small) of the pytest runs (test_crash.py, test_concurrency.py): 32 datasets / Zarr arrays
#: instead of 324. The same per-variable write, checksum, rename and retention steps and every fault
#: point, at a tenth of the time per Zarr save (one folder and file per array).
TEST_SIZE = (8, 24)


def model(step: int, size: tuple[int, int] = FULL_SIZE) -> dict[str, np.ndarray]:
    """The values saved at `step`, all step-dependent.

    `size` = (own, small): `own` arrays of 64 KB each in groups of four (block_*/dense_*/kernel)
    and `small` int32 arrays of 96 bytes (norm/layer_*/scale); each is its own dataset / Zarr
    array (the default per-variable layout of a save of fewer than 4,096 variables).
    """
    own, count = size
    values = {}
    base = np.arange(16384, dtype=np.float32)
    for i in range(own):
        values[f"block_{i // 4}/dense_{i % 4}/kernel"] = base + np.float32(step * 1000 + i)
    small = np.arange(24, dtype=np.int32)
    for i in range(count):
        values[f"norm/layer_{i}/scale"] = small + np.int32(step * 1000 + i)
    return values


def main(directory: str, fmt: str, size: tuple[int, int] = FULL_SIZE) -> int:
    for line in sys.stdin:
        command = json.loads(line)
        step = int(command["step"])
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # child: save, then leave without running atexit handlers of the parent
            code = 0
            try:
                if command.get("fault"):
                    os.environ["VARSTORE_FAULT"] = command["fault"]
                CheckpointManager(directory, format=fmt, max_to_keep=3).save(model(step, size), step=step)
            except BaseException as err:  # noqa: BLE001 - reported through the exit code
                sys.stderr.write(f"writer failed: {err!r}\n")
                code = 3
            os._exit(code)
        delay = command.get("delay_s")
        if delay is not None:
            time.sleep(float(delay))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        answer = {"killed": killed, "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                  "elapsed_s": time.monotonic() - started}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sizes = tuple(int(n) for n in sys.argv[3:5]) if len(sys.argv) > 3 else FULL_SIZE
    sys.exit(main(sys.argv[1], sys.argv[2], (sizes[0], sizes[1])))

"""Writer process for the crash campaign: forks one child per save and SIGKILLs it on request.

Run as a script (never imported by pytest):

    python _crash_writer.py DIRECTORY FORMAT

It imports varstore once, then reads JSON commands from stdin, one a line:
`{"step": s, "fault": "before_rename" | null, "delay_s": 0.013 | null}`.
For each it forks a child that saves `model(step)` through
CheckpointManager(DIRECTORY, format=FORMAT, max_to_keep=3) (with
VARSTORE_FAULT=<fault> set, so the child kills itself at that point), and,
when `delay_s` is given, sends the child SIGKILL after that many seconds.
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


def model(step: int) -> dict[str, np.ndarray]:
    """The values saved at `step`: 24 own arrays (64 KB each) and 300 small packed ones, all step-dependent."""
    values = {}
    base = np.arange(16384, dtype=np.float32)
    for i in range(24):
        values[f"block_{i // 4}/dense_{i % 4}/kernel"] = base + np.float32(step * 1000 + i)
    small = np.arange(24, dtype=np.int32)
    for i in range(300):
        values[f"norm/layer_{i}/scale"] = small + np.int32(step * 1000 + i)
    return values


def main(directory: str, fmt: str) -> int:
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
                CheckpointManager(directory, format=fmt, max_to_keep=3).save(model(step), step=step)
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
    sys.exit(main(sys.argv[1], sys.argv[2]))

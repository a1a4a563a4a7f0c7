"""Stopping a test server the tests started: its process group by PID, politely first."""

from __future__ import annotations

import os
import signal
import subprocess


def terminate_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (by its PID), SIGKILL after 10 s, then reap (also one that already exited)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)
    else:
        process.wait()

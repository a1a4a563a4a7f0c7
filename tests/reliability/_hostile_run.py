"""Run one API call or CLI command on a hostile file in a fresh process, bounded in memory and time.

    outcome = run_hostile("cli", ["ls", str(path)], rlimit_as=2 << 30, timeout_s=60)
    assert outcome.status == "exit2" and "outside the checkpoint" in outcome.stderr
    outcome = run_hostile("api", ["read_all", str(path)])
    assert outcome.status == "typed" and outcome.error == "PathOutsideCheckpointError"

The child (`_hostile_child.py`, run as a script) sets RLIMIT_AS before importing varstore, points TMPDIR
at a fresh folder of its own, performs the action and writes one JSON result to a file: its status,
the error class and message, and its peak RSS. The parent kills the child's process group at the
timeout, so a FIFO or a loop never hangs the suite. `Outcome.tmp_left` lists what the child left in
its TMPDIR (must stay empty). `tree_state` / `changed_paths` prove nothing outside the checkpoint was
read-modified, written or deleted.

Statuses: "ok" (no error), "typed" (a VarstoreError), "untyped" (any other exception: a bug),
"exit0"/"exit1"/"exit2" (a CLI command's exit code), "timeout", "crashed" (no result: killed by the
kernel, MemoryError outside Python, a segfault).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHILD = Path(__file__).resolve().parent / "_hostile_child.py"
ROOT = Path(__file__).resolve().parents[2]

#: Address-space limit a hostile read runs under: NumPy, h5py and zarr map ~1 GiB of code and arenas
#: before reading anything, so this leaves about 1 GiB for the read itself.
DEFAULT_RLIMIT_AS = 2 << 30


@dataclass
class Outcome:
    """What one hostile run did."""

    status: str
    error: str | None = None  # exception class name (api) or None
    message: str = ""
    peak_rss_mb: float | None = None
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    tmp_left: list[str] = field(default_factory=list)
    result: Any = None  # what the action returned (names, counts), JSON-compatible


def _env(tmpdir: Path, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
    env.pop("VARSTORE_FAULT", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "cli"), env.get("PYTHONPATH", "")])
    env["TMPDIR"] = str(tmpdir)
    env["COLUMNS"] = "200"
    return env


def run_hostile(kind: str, args: list[str], *, rlimit_as: int = DEFAULT_RLIMIT_AS, timeout_s: float = 60.0,
                env: dict[str, str] | None = None, cwd: Path | None = None) -> Outcome:
    """Runs `kind` ("api" or "cli") with `args` in a child process under RLIMIT_AS and a timeout.

    api actions (args[0]): "read_all PATH" (open_checkpoint, keys, read every value; result: the
    names), "ls PATH" (open_checkpoint, keys and info only: nothing may be allocated), "load PATH"
    (varstore.load), "verify PATH" (open_varstore + verify), "restore_latest DIR" (a CheckpointManager
    on DIR restores its latest into an empty dict, strict=False), "manager_save DIR" (a
    CheckpointManager on DIR saves one small checkpoint). cli: args are the `varstore` command line.
    """
    scratch = Path(tempfile.mkdtemp(prefix="varstore-hostile-"))
    try:
        tmpdir = scratch / "tmp"
        tmpdir.mkdir()
        result_file = scratch / "result.json"
        command = [sys.executable, str(CHILD), kind, str(result_file), str(rlimit_as), *args]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmpdir, env),
                                cwd=cwd, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return Outcome("timeout", stdout=out.decode("utf-8", "replace"), stderr=err.decode("utf-8", "replace"),
                           tmp_left=_left(tmpdir))
        outcome = Outcome("crashed", returncode=proc.returncode, stdout=out.decode("utf-8", "replace"),
                          stderr=err.decode("utf-8", "replace"), tmp_left=_left(tmpdir))
        if result_file.exists():
            report = json.loads(result_file.read_text())
            outcome.status = report["status"]
            outcome.error = report.get("error")
            outcome.message = report.get("message", "")
            outcome.peak_rss_mb = report.get("peak_rss_mb")
            outcome.result = report.get("result")
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _left(tmpdir: Path) -> list[str]:
    return sorted(str(p.relative_to(tmpdir)) for p in tmpdir.rglob("*"))


def tree_state(root: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime_ns, inode) of every entry under `root` (symlinks not followed), for changed_paths."""
    state: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            state[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return state


def changed_paths(before: dict[str, tuple[int, int, int]], after: dict[str, tuple[int, int, int]]) -> list[str]:
    """Paths added, removed or modified between two tree_state snapshots, sorted."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))

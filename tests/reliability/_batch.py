"""Runs damage cases in worker subprocesses, counting crashes and hangs instead of dying of them.

`run_cases` starts `_worker.py` on a batch of cases; when the worker dies
(a signal from a C library, an abort) the case it had started is counted
as a crash and a fresh worker resumes after it; when a case runs longer
than `timeout_s` the worker is killed, the case is counted as a hang and a
fresh worker resumes. Several workers run side by side (`jobs`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "_worker.py"
ROOT = Path(__file__).resolve().parents[2]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **(extra or {}))
    env.pop("VARSTORE_FAULT", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "cli"), env.get("PYTHONPATH", "")])
    return env


def _run_slice(cases: list[dict[str, Any]], workdir: Path, timeout_s: float,
               env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    workdir.mkdir(parents=True, exist_ok=True)
    cases_file = workdir / "cases.json"
    cases_file.write_text(json.dumps(cases))
    results: list[dict[str, Any] | None] = [None] * len(cases)
    start = 0
    while start < len(cases):
        stderr_file = workdir / "stderr.txt"
        with open(stderr_file, "wb") as stderr:  # a file, so a chatty worker never blocks on a full pipe
            proc = subprocess.Popen([sys.executable, str(WORKER), str(cases_file), str(start),
                                     str(workdir / "scratch")], stdout=subprocess.PIPE, stderr=stderr, env=_env(env))
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()  # poll, not select: no limit on descriptor numbers
        poller.register(fd, select.POLLIN | select.POLLHUP)
        current = None
        deadline = time.monotonic() + timeout_s * 4  # the first case also imports and reads the baseline
        pending = b""
        while True:
            if b"\n" in pending:  # handle every complete line before waiting again
                line, pending = pending.split(b"\n", 1)
                message = json.loads(line)
                if "start" in message:
                    current = message["start"]
                    deadline = time.monotonic() + (timeout_s if current != start else timeout_s * 4)
                else:
                    results[message.pop("done")] = message
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                proc.kill()
                proc.wait()
                index = current if current is not None else start
                results[index] = {"hang": True}
                start = index + 1
                break
            if not poller.poll(remaining * 1000):
                continue
            chunk = os.read(fd, 1 << 16)
            if chunk:
                pending += chunk
                continue
            code = proc.wait()  # end of output: finished, or died during case `current`
            stderr_text = stderr_file.read_text(errors="replace")[-800:]
            index = current if current is not None else start
            if results[index] is None:
                results[index] = {"crash": True, "returncode": code, "stderr": stderr_text}
            start = index + 1
            break
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        while start < len(cases) and results[start] is not None:
            start += 1
    return [r if r is not None else {"crash": True, "returncode": None} for r in results]


def run_cases(cases: list[dict[str, Any]], workdir: Path, *, timeout_s: float = 20.0,
              jobs: int = 2, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Runs every case; returns one result per case, in order (see _worker.py for the fields).

    Args:
      cases: damage cases for _worker.py.
      workdir: scratch directory (per-worker subfolders are made).
      timeout_s: a case running longer than this (seconds) is a hang.
      jobs: worker processes run side by side.
      env: extra environment variables for the workers (VARSTORE_TEST_RLIMIT_AS=<bytes>).
    """
    if not cases:
        return []
    jobs = max(1, min(jobs, len(cases)))
    # Interleave so each worker gets a mix of sources (and each computes each baseline once).
    slices = [cases[i::jobs] for i in range(jobs)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(lambda i: _run_slice(slices[i], workdir / f"w{i}", timeout_s, env), range(jobs)))
    results: list[dict[str, Any]] = [{}] * len(cases)
    for i, part in enumerate(parts):
        for j, result in enumerate(part):
            results[i + j * jobs] = result
    return results


def tally(results: list[dict[str, Any]], mode: str = "read") -> dict[str, Any]:
    """Counts outcomes of one mode: cases, typed, exact, wrong, untyped, crashes, hangs (+ examples)."""
    counts = {"cases": len(results), "typed": 0, "exact": 0, "wrong": 0, "untyped": 0, "crashes": 0, "hangs": 0}
    examples: dict[str, list[Any]] = {"wrong": [], "untyped": [], "crashes": [], "hangs": []}
    for index, result in enumerate(results):
        if result.get("crash"):
            counts["crashes"] += 1
            examples["crashes"].append((index, result.get("returncode"), result.get("stderr", "")[-200:]))
        elif result.get("hang"):
            counts["hangs"] += 1
            examples["hangs"].append(index)
        else:
            outcome = result[mode]
            counts[outcome["outcome"]] += 1
            if outcome["outcome"] in ("wrong", "untyped"):
                examples[outcome["outcome"]].append((index, outcome))
    counts["examples"] = {k: v[:5] for k, v in examples.items() if v}
    return counts

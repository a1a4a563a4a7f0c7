"""Test helper: run a script on K local torch.distributed ranks (what torchrun does), with a timeout, one JSON line per rank.

Each rank is `python script *args` with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1
and MASTER_PORT in its environment (the script calls init_process_group("gloo")).
The rendezvous store is this process's, bound to port 0 (the kernel picks a free
port atomically), and the ranks join it as torchrun's agent store
(TORCHELASTIC_USE_AGENT_STORE): a port picked free and bound later by rank 0
could be taken meanwhile by another test run on the host. stdout and stderr go
to files under `workdir`.
Every rank is killed when the job runs past `timeout_s`, and no process
outlives the call. Skips the calling test when torch.distributed or gloo is missing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class TorchRun:
    """What `run_ranks` saw: each rank's exit status and streams (index = rank)."""

    returncodes: list[int]
    stdout: list[str]
    stderr: list[str]

    def json_lines(self) -> list[dict]:
        """The last stdout line of every rank, parsed as JSON (the scripts' result convention)."""
        out = []
        for rank, text in enumerate(self.stdout):
            lines = text.strip().splitlines()
            assert lines, f"rank {rank} printed nothing; stderr:\n{self.stderr[rank][-3000:]}"
            out.append(json.loads(lines[-1]))
        return out


def require_gloo() -> None:
    """Skips the test unless torch.distributed with the gloo backend is importable."""
    torch = pytest.importorskip("torch")
    distributed = pytest.importorskip("torch.distributed")
    if not distributed.is_available() or not distributed.is_gloo_available():
        pytest.skip(f"torch {torch.__version__} has no torch.distributed gloo backend")


def run_ranks(script: Path, ranks: int, workdir: Path, args: tuple[str, ...] = (), timeout_s: float = 120) -> TorchRun:
    """Runs `python script *args` as `ranks` torch.distributed ranks in `workdir`; kills them all after `timeout_s` s.

    Raises:
      AssertionError: the job ran past `timeout_s` (with what each rank had written so far).
    """
    require_gloo()
    import datetime

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, world_size=ranks, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    port = store.port
    logs = workdir / f"ranks-{script.stem}-{ranks}"
    logs.mkdir(parents=True, exist_ok=True)
    processes = []
    files = []
    path = os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")])
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONPATH=path, PYTHONUNBUFFERED="1", VARSTORE_DISABLE_GPU="1",
                   OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", TORCHELASTIC_USE_AGENT_STORE="True")
        out, err = open(logs / f"out.{rank}", "w"), open(logs / f"err.{rank}", "w")
        files += [out, err]
        processes.append(subprocess.Popen([sys.executable, str(script), *args], cwd=workdir, env=env, stdout=out,
                                          stderr=err, start_new_session=True))
    timed_out = False
    deadline = time.monotonic() + timeout_s
    try:
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for f in files:
            f.close()
        del store  # the ranks are gone: close the rendezvous
    run = TorchRun([p.returncode for p in processes],
                   [(logs / f"out.{r}").read_text(errors="replace") for r in range(ranks)],
                   [(logs / f"err.{r}").read_text(errors="replace") for r in range(ranks)])
    assert not timed_out, f"{ranks} ranks of {script.name} ran past {timeout_s} s: {run}"
    return run

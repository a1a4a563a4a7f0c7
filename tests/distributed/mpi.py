"""Test helper: run a script under `mpiexec -n K` with a timeout, capturing each rank's stdout and stderr.

Skips the calling test cleanly when mpi4py or mpiexec is missing. MPICH's
Hydra (the `mpich` wheel) runs more ranks than cores without a flag and
writes each rank's streams to files through -outfile-pattern / -errfile-pattern;
Open MPI needs --oversubscribe and --output-filename.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest


@dataclasses.dataclass
class MPIRun:
    """What `run_mpi` saw: the launcher's exit status and each rank's streams (index = rank)."""

    returncode: int
    stdout: list[str]
    stderr: list[str]
    launcher_output: str

    def json_lines(self) -> list[dict]:
        """The last stdout line of every rank, parsed as JSON (the scripts' result convention)."""
        return [json.loads(out.strip().splitlines()[-1]) for out in self.stdout]


def mpiexec() -> str:
    """The mpiexec to use, or skip the test."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install 'varstore[mpi]')")
    found = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.skip("mpiexec is not on PATH (pip install 'varstore[mpi]' brings MPICH's)")
    return found


def _is_hydra(launcher: str) -> bool:
    done = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=30)
    return "HYDRA" in done.stdout or "MPICH" in done.stdout


_SHM = Path("/dev/shm")


def _remove_orphaned_segments(segments: set[Path]) -> None:
    """Deletes MPICH shared-memory segments this job created that no process maps any more.

    A job whose rank is killed (the fault tests do it on purpose) leaves its
    segment behind, 2 MB of RAM per run of the suite; one still mapped by a
    live process (another job on the machine) is left alone.
    """
    if not segments:
        return
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.rsplit(" ", 1)[-1].strip() for line in maps.read_text().splitlines() if "/dev/shm/" in line)
        except OSError:
            continue  # the process ended, or is not ours to read
    for segment in segments:
        if str(segment) not in mapped:
            segment.unlink(missing_ok=True)


def run_mpi(script: Path, ranks: int, workdir: Path, args: tuple[str, ...] = (), timeout_s: float = 120) -> MPIRun:
    """Runs `python script *args` on `ranks` MPI processes in `workdir`; kills the whole job after `timeout_s` seconds.

    Raises:
      AssertionError: the job timed out (with what each rank had printed so far).
    """
    launcher = mpiexec()
    outdir = workdir / f"mpi-output-{script.stem}-{ranks}"
    outdir.mkdir(parents=True, exist_ok=True)
    if _is_hydra(launcher):
        flags = ["-outfile-pattern", str(outdir / "out.%r"), "-errfile-pattern", str(outdir / "err.%r")]

        def files(rank: int) -> tuple[Path, Path]:
            return outdir / f"out.{rank}", outdir / f"err.{rank}"
    else:  # Open MPI
        flags = ["--oversubscribe", "--output-filename", str(outdir)]

        def files(rank: int) -> tuple[Path, Path]:
            base = outdir / "1" / f"rank.{rank}"
            return base / "stdout", base / "stderr"
    segments_before = set(_SHM.glob("mpich_shm_*"))
    command = [launcher, "-n", str(ranks), *flags, sys.executable, str(script), *args]
    env = dict(os.environ, VARSTORE_DISABLE_GPU="1", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    timed_out = False
    try:
        launcher_output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        launcher_output, _ = process.communicate()

    def read(path: Path) -> str:
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    _remove_orphaned_segments(set(_SHM.glob("mpich_shm_*")) - segments_before)
    outputs = [read(files(rank)[0]) for rank in range(ranks)]
    errors = [read(files(rank)[1]) for rank in range(ranks)]
    run = MPIRun(process.returncode, outputs, errors, launcher_output)
    assert not timed_out, f"mpiexec -n {ranks} {script.name} ran past {timeout_s} s: {run}"
    return run

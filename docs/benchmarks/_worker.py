"""Benchmark worker: runs ONE (method, workload, phase) measurement in this fresh process.

Imports the method's libraries, records the memory baseline, does the untimed
setup (building the model, preallocating, cold page cache), times exactly the
phase, reads the peak RSS, optionally checks every loaded byte against the
workload's source file, and writes one JSON result. Spawned by run.py; never
spawns anything itself and never prints the report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _memory import peak_bytes, reset_peak, rss_bytes
from _methods import METHODS, Method, files_under, remove, touch_pages
from _workloads import READ_ONE_NAME, Workload, load_workload

__all__ = ["PHASES", "run_worker"]

# workload -> phases; W3/W4 run on W1's checkpoint. W2 "restore" (varstore only): into a new model.
PHASES = {
    "W1": ("save", "save-nofsync", "load"),
    "W2": ("save", "save-nofsync", "load", "restore"),
    "W3": ("read-one",),
    "W4": ("restore",),
}


# -- memory ---------------------------------------------------------------------------------

# VmHWM / VmRSS (not ru_maxrss, which Linux carries over from the parent): _memory.py
_rss_bytes, _reset_peak, _peak_bytes = rss_bytes, reset_peak, peak_bytes


# -- page cache -----------------------------------------------------------------------------

def _cold_cache(path: Path, mode: str) -> str:
    """Evicts `path`'s pages from the page cache; returns how ("drop_caches", "fadvise", "none")."""
    if mode == "none":
        return "none"
    os.sync()
    if mode == "drop":
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
            return "drop_caches"
        except OSError:
            pass
    for file in files_under(path):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "fadvise"


# -- verification ---------------------------------------------------------------------------

def _verify(workload: Workload, out: Any, only: str | None = None) -> None:
    """Checks loaded values equal the source file's bytes; raises AssertionError naming the variable."""
    if only is not None:
        specs, out = [workload.by_name(only)], {only: out}
    elif isinstance(out, np.ndarray):
        if not np.array_equal(out.reshape(-1), workload.read_flat()):
            raise AssertionError(f"{workload.name}: flat load differs from the source")
        return
    else:
        specs = list(workload.variables)
        names = {v.name for v in specs}
        if set(out) != names:
            missing = sorted(names - set(out))[:3]
            extra = sorted(set(out) - names)[:3]
            raise AssertionError(f"{workload.name}: names differ; missing {missing}, unexpected {extra}")
    with open(workload.source, "rb") as f:
        for spec in specs:
            f.seek(spec.offset)
            expected = np.fromfile(f, dtype=np.float32, count=spec.size).reshape(spec.shape)
            got = np.asarray(out[spec.name])
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                raise AssertionError(f"{workload.name}: variable '{spec.name}' differs from the source "
                                     f"(shape {got.shape}, dtype {got.dtype})")


def _py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else (shutil.which("py-spy") or "py-spy")


class _Timer:
    """The timed region: resets the peak-RSS mark, times the block, and optionally runs py-spy on it.

    With `profile` (a path), `py-spy record --format raw --threads` is attached to this process
    for exactly the block (its start-up is waited for outside the timing); the seconds then
    include py-spy's sampling cost and are not reported as results.
    """

    def __init__(self, profile: str | None) -> None:
        self.profile = profile
        self.seconds = 0.0
        self.rss_before = 0
        self.peak_note = ""
        self._spy: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _Timer:
        if self.profile:
            self._spy = subprocess.Popen(
                [_py_spy(), "record", "--pid", str(os.getpid()), "--format", "raw", "--threads",
                 "--rate", "250", "--nonblocking", "-o", self.profile],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # let it attach
        self.peak_note = _reset_peak()
        self.rss_before = _rss_bytes()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        if self._spy is not None:
            time.sleep(0.1)
            self._spy.send_signal(signal.SIGINT)
            self._spy.wait(timeout=60)


# -- one measurement ------------------------------------------------------------------------

def _measure(method: Method, task: dict[str, Any]) -> dict[str, Any]:
    workdir = Path(task["workdir"])
    phase = task["phase"]
    source_name = "W1" if task["workload"] in ("W3", "W4") else task["workload"]
    workload = load_workload(workdir, source_name)
    path = Path(task["checkpoint"])
    result: dict[str, Any] = {"cache": None, "initializer_calls": None}

    method.imports()
    baseline = _rss_bytes()
    out: Any = None

    timer = _Timer(task.get("profile"))
    if phase in ("save", "save-nofsync"):
        model = method.make_model(workload)
        remove(path)
        os.sync()
        result["bytes"] = workload.nbytes
        with timer:
            method.save(model, path, durable=(phase == "save"))
    elif phase == "load":
        state = method.prepare_load(workload, path)
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.nbytes
        with timer:
            out = method.load(state, workload, path)
            if method.touches_pages:
                touch_pages(out)
    elif phase == "read-one":
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.by_name(READ_ONE_NAME).nbytes
        with timer:
            out = method.read_one(workload, path, READ_ONE_NAME)
            if method.touches_pages:
                touch_pages(out)
    elif phase in ("read-all", "vs-load", "keys-info"):
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.nbytes
        call = {"read-all": method.read_all, "vs-load": getattr(method, "vs_load", None),
                "keys-info": method.keys_info}[phase]
        with timer:
            out = call(workload, path)
        if phase == "keys-info":
            expected = {v.name: tuple(v.shape) for v in workload.variables}
            found = {name: tuple(shape) for name, (shape, _) in out.items()}
            if found != expected:
                raise AssertionError(f"{method.name} keys-info: names or shapes differ from the workload")
            out = None
    elif phase in ("process", "import"):
        # a fresh interpreter, timed from start to exit (W3 as users live it: python -c)
        code = method.import_code if phase == "import" else method.process_code(path, READ_ONE_NAME)
        # As installed packages run: with bytecode caches. An editable checkout run with
        # PYTHONDONTWRITEBYTECODE=1 would compile every varstore module from source in each process
        # while numpy/h5py/safetensors load their .pyc. All methods use one cache folder, filled by an
        # untimed run first.
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(workdir / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        result["cache"] = _cold_cache(path, task["cache"]) if phase == "process" else None
        result["bytes"] = workload.by_name(READ_ONE_NAME).nbytes
        with timer:
            subprocess.run([sys.executable, "-c", code], check=True, env=env)
    elif phase == "restore":
        state = method.prepare_restore(workload, path)
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.nbytes
        with timer:
            out, calls = method.restore(state, workload, path)
        result["initializer_calls"] = calls
    else:
        raise ValueError(f"unknown phase {phase!r}")
    seconds, before, peak_note = timer.seconds, timer.rss_before, timer.peak_note

    peak = _peak_bytes()
    result.update(
        seconds=seconds,
        baseline_rss_bytes=baseline,
        # peak during the timed region above the RSS after imports: includes the model's own
        # bytes (the in-memory model for saves, the destination arrays for loads).
        peak_rss_bytes=max(0, peak - baseline),
        # peak during the timed region above the RSS when the timer started.
        extra_rss_bytes=max(0, peak - before),
        peak_rss_note=peak_note,
        verified=False,
    )
    if task.get("verify") and out is not None and phase not in ("save", "save-nofsync", "process", "import"):
        _verify(workload, out, only=READ_ONE_NAME if phase == "read-one" else None)
        result["verified"] = True
    return result


def run_worker(task: dict[str, Any]) -> None:
    """Runs the measurement described by `task` and writes its JSON to task["result"]."""
    method = METHODS[task["method"]]
    result = _measure(method, task)
    Path(task["result"]).write_text(json.dumps(result))

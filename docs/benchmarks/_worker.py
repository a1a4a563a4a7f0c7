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
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from _methods import METHODS, Method, files_under, remove, touch_pages
from _workloads import READ_ONE_NAME, Workload, load_workload

__all__ = ["run_worker", "PHASES"]

# workload -> phases; W3/W4 run on W1's checkpoint.
PHASES = {
    "W1": ("save", "save-nofsync", "load"),
    "W2": ("save", "save-nofsync", "load"),
    "W3": ("read-one",),
    "W4": ("restore",),
}


# -- memory ---------------------------------------------------------------------------------

def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> str:
    """Resets the peak-RSS mark (VmHWM) to the current RSS; says how peak RSS is read."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return "VmHWM reset at the start of the timed region"
    except OSError:
        return "ru_maxrss since process start (could not reset VmHWM)"


def _peak_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024


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

    if phase in ("save", "save-nofsync"):
        model = method.make_model(workload)
        remove(path)
        os.sync()
        result["bytes"] = workload.nbytes
        peak_note = _reset_peak()
        before = _rss_bytes()
        t0 = time.perf_counter()
        method.save(model, path, durable=(phase == "save"))
        seconds = time.perf_counter() - t0
    elif phase == "load":
        state = method.prepare_load(workload, path)
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.nbytes
        peak_note = _reset_peak()
        before = _rss_bytes()
        t0 = time.perf_counter()
        out = method.load(state, workload, path)
        if method.touches_pages:
            touch_pages(out)
        seconds = time.perf_counter() - t0
    elif phase == "read-one":
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.by_name(READ_ONE_NAME).nbytes
        peak_note = _reset_peak()
        before = _rss_bytes()
        t0 = time.perf_counter()
        out = method.read_one(workload, path, READ_ONE_NAME)
        if method.touches_pages:
            touch_pages(out)
        seconds = time.perf_counter() - t0
    elif phase == "restore":
        state = method.prepare_restore(workload, path)
        result["cache"] = _cold_cache(path, task["cache"])
        result["bytes"] = workload.nbytes
        peak_note = _reset_peak()
        before = _rss_bytes()
        t0 = time.perf_counter()
        out, calls = method.restore(state, workload, path)
        seconds = time.perf_counter() - t0
        result["initializer_calls"] = calls
    else:
        raise ValueError(f"unknown phase {phase!r}")

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
    if task.get("verify") and phase != "save" and phase != "save-nofsync":
        _verify(workload, out, only=READ_ONE_NAME if phase == "read-one" else None)
        result["verified"] = True
    return result


def run_worker(task: dict[str, Any]) -> None:
    """Runs the measurement described by `task` and writes its JSON to task["result"]."""
    method = METHODS[task["method"]]
    result = _measure(method, task)
    Path(task["result"]).write_text(json.dumps(result))

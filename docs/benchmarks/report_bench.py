"""`varstore report` at scale: time, peak RSS and page size for 5,000 variables / 80 MB, and one large variable.

Writes (in a scratch folder) a varstore HDF5 checkpoint A of `--variables`
float32 variables totalling `--megabytes` MB (log-normal sizes, a few with
NaN/Inf) and B (A with a third of the variables moved and some added and
removed), then runs, each in a fresh process (`python -m varstore_cli report`):
the report of A, the diff A -> B, and the report of a checkpoint holding one
`--big-megabytes` MB variable (peak RSS bounded by a chunk, not the variable).
Prints a Markdown table: wall time (s), the child's peak RSS (MiB, from
getrusage), the page size (MB). Not a test: numbers depend on the machine.

    python docs/benchmarks/report_bench.py [--variables 5000] [--megabytes 80] [--big-megabytes 512]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _sizes(count: int, total_bytes: int, rng: np.random.Generator) -> list[int]:
    weights = rng.lognormal(0.0, 1.5, count)
    elements = np.maximum(1, (weights / weights.sum() * total_bytes / 4).astype(np.int64))
    return [int(n) for n in elements]


def make_checkpoints(folder: Path, variables: int, megabytes: float, big_megabytes: float) -> tuple[Path, Path, Path]:
    import varstore

    rng = np.random.default_rng(0)
    arrays = {}
    for k, n in enumerate(_sizes(variables, int(megabytes * 1e6), rng)):
        name = f"model/block_{k // 50:03d}/layer_{k % 50:02d}/{'kernel' if k % 2 == 0 else 'bias'}"
        value = rng.standard_normal(n, dtype=np.float32)
        if k % 997 == 0:
            value[0] = np.nan
        arrays[name] = value
    a = folder / "a.h5"
    varstore.save(a, arrays, step=1000)
    moved = {name: (value + np.float32(0.01) if i % 3 == 0 else value) for i, (name, value) in enumerate(arrays.items())}
    for name in list(moved)[:25]:
        del moved[name]
    for k in range(25):
        moved[f"model/new_{k:02d}/kernel"] = np.ones(16, np.float32)
    b = folder / "b.h5"
    varstore.save(b, moved, step=2000)
    big = folder / "big.h5"
    rows = max(1, int(big_megabytes * 1e6 / 4 / 4096))
    varstore.save(big, {"big/kernel": np.ones((rows, 4096), np.float32)})
    return a, b, big


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")])}


def run(args: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of `python -m varstore_cli *args` in a fresh process.

    This process stays small (the checkpoints are made in another one): a child's ru_maxrss starts from
    its parent's at fork.
    """
    start = time.perf_counter()
    pid = subprocess.Popen([sys.executable, "-m", "varstore_cli", *args], env=_env()).pid
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"varstore {' '.join(args)} failed with status {status}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=5000)
    parser.add_argument("--megabytes", type=float, default=80.0)
    parser.add_argument("--big-megabytes", type=float, default=512.0)
    parser.add_argument("--make", metavar="FOLDER", help=argparse.SUPPRESS)  # the child that writes the checkpoints
    options = parser.parse_args()
    if options.make:
        make_checkpoints(Path(options.make), options.variables, options.megabytes, options.big_megabytes)
        return
    with tempfile.TemporaryDirectory(prefix="varstore-report-bench-") as scratch:
        folder = Path(scratch)
        subprocess.run([sys.executable, __file__, "--make", str(folder), "--variables", str(options.variables),
                        "--megabytes", str(options.megabytes), "--big-megabytes", str(options.big_megabytes)],
                       env=_env(), check=True)
        a, b, big = folder / "a.h5", folder / "b.h5", folder / "big.h5"
        rows = []
        for label, args, page in [
            (f"report, {options.variables:,} variables, {options.megabytes:g} MB", ["report", a, "-o", folder / "a.html"], "a.html"),
            (f"diff, {options.variables:,} variables, 2 x {options.megabytes:g} MB", ["report", a, b, "-o", folder / "d.html"], "d.html"),
            (f"report, 1 variable of {options.big_megabytes:g} MB", ["report", big, "-o", folder / "big.html"], "big.html"),
        ]:
            seconds, cpu, rss = run([str(x) for x in args])
            rows.append((label, seconds, cpu, rss, (folder / page).stat().st_size / 1e6))
        print("| run | wall (s) | CPU (s) | peak RSS (MiB) | page (MB) |\n| --- | --- | --- | --- | --- |")
        for label, seconds, cpu, rss, size in rows:
            print(f"| {label} | {seconds:.1f} | {cpu:.1f} | {rss:.0f} | {size:.2f} |")
        print(f"\n(getrusage of each child; this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB;"
              f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()

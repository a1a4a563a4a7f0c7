#!/usr/bin/env python
"""Side-by-side checkpoint benchmark: varstore against the raw-write limit and its peers.

One command: builds the workloads deterministically in a temporary folder,
runs every (method, workload, phase) in a fresh subprocess, repeated, prints one
table of medians and writes results.json, results.md and chart.png beside this
file (or under --out-dir). See README.md here for what is measured and how.

    python docs/benchmarks/run.py                     # full scale, ~1.2 GB W1
    python docs/benchmarks/run.py --scale 0.1 --repeat 3 --methods raw,h5py,varstore-h5

This script orchestrates only: workloads live in _workloads.py, methods in
_methods.py, the timed code in _worker.py, the table and chart in _report.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _methods import METHODS, remove
from _report import format_table, summarize, write_chart, write_json, write_markdown
from _targets import format_targets, targets
from _workloads import SLEEP_S, build_workloads

WORKLOADS = ("W1", "W2", "W3", "W4")
#: W3's whole-process phases: one fresh interpreter each, cheap, so they get --process-repeat runs.
PROCESS_PHASES = ("process", "import")
DEFAULT_METHODS = ("raw", "h5py", "zarr3", "zarr3-nocomp", "safetensors", "npz",
                   "varstore-h5", "varstore-zarr", "torch", "safetensors-torch", "varstore-torch",
                   "tensorstore")
RSS_NOTE = ("peak RSS is the worker's peak resident memory during the timed region (VmHWM, reset "
            "when the timer starts) minus its RSS after imports and before the model or any "
            "destination array was allocated: it counts the in-memory model for saves and the "
            "loaded arrays for loads, plus whatever the method needs on top (file pages it maps "
            "included); results.json also has extra_rss_mib, the peak above the RSS at the "
            "timer's start.")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0,
                   help="shrink the workloads: W1 bytes x scale (same 384 variables), "
                        "W2 variable count x scale (default 1.0 = 1.2 GB and 50,000)")
    p.add_argument("--w2-scale", type=float, default=None,
                   help="W2's variable count x this instead of --scale (issue 11's W2 targets are at full "
                        "scale: --scale 0.25 --w2-scale 1)")
    p.add_argument("--repeat", type=int, default=3, help="repeats per cell, each a fresh process (default 3)")
    p.add_argument("--process-repeat", type=int, default=9,
                   help="repeats of the W3 whole-process cells (`process`, `import`; default 9, at least "
                        "--repeat): a fresh interpreter takes 0.1-0.3 s, and a median of 3 of them moves by "
                        "a third with whatever else the machine does")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated; raw is always added (every ratio needs it)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of W1,W2,W3,W4")
    p.add_argument("--skip", default="",
                   help="comma-separated METHOD:WORKLOAD cells to leave out (e.g. zarr3-nocomp:W2, which "
                        "takes minutes at full scale); listed as skipped in the results")
    p.add_argument("--cache", choices=("drop", "fadvise", "none"), default="drop",
                   help="cold cache before each load: drop = sync + drop_caches (root), falling back to "
                        "fadvise = POSIX_FADV_DONTNEED on each checkpoint file; none = warm")
    p.add_argument("--budget-s", type=float, default=120.0,
                   help="stop repeating a cell once its timed seconds pass this (at least one run)")
    p.add_argument("--timeout-s", type=float, default=1800.0, help="kill a worker after this many seconds")
    p.add_argument("--workdir", type=Path, default=None,
                   help="parent of the temporary folder for workloads and checkpoints (default: /tmp)")
    p.add_argument("--out-dir", type=Path, default=HERE, help="where results.json/.md and chart.png go")
    p.add_argument("--no-verify", action="store_true",
                   help="skip checking loaded bytes against the source (done once per cell, untimed)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="instead of measuring: run each cell once under py-spy (attached for the timed "
                        "region only), write DIR/<method>-<workload>-<phase>.txt (raw stacks) and print "
                        "where the time goes; writes no results")
    p.add_argument("--interleave", action="store_true",
                   help="run each cell's repeats round-robin across methods (save: raw #0, torch #0, ..., raw #1, "
                        "...) instead of one method's repeats back to back, so a slow stretch of a shared "
                        "disk falls on every method alike; checkpoints of all methods are kept until the end")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--smoke", action="store_true",
                   help="check that the harness runs, measuring nothing: every cell of a method runs in one "
                        "long-lived worker process instead of a fresh one each (tests/test_benchmark_harness.py); "
                        "needs --out-dir, so a smoke table never replaces the documented results")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-loop", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("numpy", "h5py", "zarr", "safetensors", "varstore", "torch", "tensorstore"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, {platform.system()}"


def _run_worker(task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Runs one measurement in a fresh interpreter; returns its result dict (raises on failure)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        result_path = Path(f.name)
    task = dict(task, result=str(result_path))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(task)]
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {task['method']} {task['workload']} {task['phase']} failed "
                               f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(result_path.read_text())
    finally:
        result_path.unlink(missing_ok=True)


class _SmokeWorkers:
    """--smoke: one worker process per method (`run.py --worker-loop`) runs its cells in turn.

    Each task goes as one JSON line on the worker's stdin; the worker answers one line when the
    task's result file is written. Same tasks and result files as _run_worker, without an
    interpreter start and the method's imports per cell: a check of the harness, not a measurement.
    """

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen[str]] = {}

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        proc = self._procs.get(task["method"])
        if proc is None:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker-loop"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self._procs[task["method"]] = proc
        assert proc.stdin is not None and proc.stdout is not None
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            result_path = Path(f.name)
        try:
            proc.stdin.write(json.dumps(dict(task, result=str(result_path))) + "\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "done":
                raise RuntimeError(f"smoke worker {task['method']} {task['workload']} {task['phase']} failed "
                                   f"(exit {proc.wait(timeout=timeout_s)}; its traceback is above)")
            return json.loads(result_path.read_text())
        finally:
            result_path.unlink(missing_ok=True)

    def close(self) -> None:
        for proc in self._procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()


def _worker_loop() -> int:
    """The --smoke worker: runs each JSON task line from stdin, answers "done" once its result is written."""
    from _worker import run_worker

    for line in sys.stdin:
        run_worker(json.loads(line))
        print("done", flush=True)
    return 0


def _plan(method: Any, workloads: list[str]) -> list[tuple[str, str]]:
    """(workload, phase) cells for one method, in an order where each load follows its save."""
    cells = []
    wanted = set(workloads)
    extra = {w: [(w, p) for ew, p in method.extra_phases if ew == w] for w in WORKLOADS}
    if wanted & {"W1", "W3", "W4"}:
        if "W1" in wanted:
            cells += [("W1", "save"), ("W1", "save-nofsync"), ("W1", "load")] + extra["W1"]
        if "W3" in wanted:
            cells += [("W3", "read-one")] + extra["W3"]
        if "W4" in wanted and method.restores_in_place:
            cells.append(("W4", "restore"))
    if "W2" in wanted:
        cells += [("W2", "save"), ("W2", "save-nofsync"), ("W2", "load")] + extra["W2"]
    return cells


def _interleaved(methods: list[Any], workloads: list[str],
                 skip_cells: set[tuple[str, ...]]) -> list[list[tuple[Any, str, str]]]:
    """Cells grouped by (workload, phase) in plan order, each group holding every method that has it."""
    groups: dict[tuple[str, str], list[tuple[Any, str, str]]] = {}
    for method in methods:
        for workload, phase in _plan(method, workloads):
            if (method.name, workload) not in skip_cells:
                groups.setdefault((workload, phase), []).append((method, workload, phase))
    return list(groups.values())


def _repeats(args: argparse.Namespace, phase: str) -> int:
    """How many fresh-process runs a cell of `phase` gets: --process-repeat for the cheap whole-process ones."""
    if phase in PROCESS_PHASES:
        return max(args.repeat, args.process_repeat)
    return args.repeat


def _profile_cell(args: argparse.Namespace, method: Any, workload: str, phase: str, workdir: Path,
                  checkpoint: Path) -> None:
    """Runs one cell under py-spy and prints the summary of its timed region."""
    from _profile import summarize_profile

    args.profile.mkdir(parents=True, exist_ok=True)
    out = (args.profile / f"{method.name}-{workload}-{phase}.txt").resolve()
    task = dict(method=method.name, workload=workload, phase=phase, workdir=str(workdir),
                checkpoint=str(checkpoint), cache=args.cache, verify=False, profile=str(out))
    res = _run_worker(task, args.timeout_s)
    os.sync()
    print(f"{method.name} {workload} {phase}: {res['seconds']:.3f} s under py-spy")
    print(summarize_profile(out) if out.exists() else f"  (py-spy wrote nothing to {out})", flush=True)


def _update_readme(readme: Path, results_md: str) -> None:
    """Replaces the text between the results markers of README.md with the new results."""
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    text = readme.read_text() if readme.exists() else ""
    if start not in text or end not in text:
        return
    body = results_md.split("\n", 1)[1].strip()  # drop the "# ..." title
    head, rest = text.split(start, 1)
    readme.write_text(f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.worker is not None:
        from _worker import run_worker

        run_worker(json.loads(args.worker))
        return 0
    if args.worker_loop:
        return _worker_loop()
    if args.smoke and args.out_dir.resolve() == HERE:
        print("--smoke measures nothing: give --out-dir (the documented results stay as they are)", file=sys.stderr)
        return 2

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        print(f"unknown methods {unknown}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    if "raw" not in names:
        names.insert(0, "raw")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(workloads) - set(WORKLOADS):
        print(f"unknown workloads {set(workloads) - set(WORKLOADS)}", file=sys.stderr)
        return 2

    skipped: list[dict[str, str]] = []
    skip_cells = {tuple(c.strip().split(":", 1)) for c in args.skip.split(",") if ":" in c}
    for m, w in sorted(skip_cells):
        skipped.append({"method": f"{m} {w}", "reason": "left out with --skip"})
    methods = []
    for n in names:
        reason = METHODS[n].unavailable()
        if reason:
            skipped.append({"method": n, "reason": reason})
            print(f"skip {n}: {reason}", flush=True)
        else:
            methods.append(METHODS[n])

    parent = args.workdir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="varstore-bench-", dir=parent))
    samples: list[dict[str, Any]] = []
    started = time.time()
    smoke = _SmokeWorkers() if args.smoke else None
    run_cell = smoke.run if smoke is not None else _run_worker
    try:
        t0 = time.perf_counter()
        built = build_workloads(workdir, args.scale, args.w2_scale)
        print(f"workloads built in {workdir} in {time.perf_counter() - t0:.1f} s: "
              + "; ".join(f"{w.name} {len(w.variables)} variables, {w.nbytes / 1e9:.3f} GB"
                          for w in built.values()), flush=True)
        if args.interleave:
            order = _interleaved(methods, workloads, skip_cells)
        else:
            order = [[(method, workload, phase)] for method in methods
                     for workload, phase in _plan(method, workloads) if (method.name, workload) not in skip_cells]
        for group in order:
            for method, workload, phase in group:
                source = "W1" if workload in ("W3", "W4") else workload
                checkpoint = workdir / "checkpoints" / f"{method.name}-{source}{method.suffix}"
                checkpoint.parent.mkdir(parents=True, exist_ok=True)
                if phase not in ("save", "save-nofsync") and not checkpoint.exists():
                    # W3/W4 without W1 in the list: write the checkpoint once, untimed.
                    run_cell(dict(method=method.name, workload=source, phase="save", workdir=str(workdir),
                                  checkpoint=str(checkpoint), cache=args.cache), args.timeout_s)
                if args.profile:
                    _profile_cell(args, method, workload, phase, workdir, checkpoint)
            if args.profile:
                continue
            spent = {id(cell): 0.0 for cell in group}
            repeats = {id(cell): _repeats(args, cell[2]) for cell in group}
            for rep in range(max(repeats.values())):
                for cell in group:
                    method, workload, phase = cell
                    if rep >= repeats[id(cell)] or (rep and spent[id(cell)] > args.budget_s):
                        continue  # its repeats are done, or over budget: the repeats kept so far stand
                    source = "W1" if workload in ("W3", "W4") else workload
                    checkpoint = workdir / "checkpoints" / f"{method.name}-{source}{method.suffix}"
                    task = dict(method=method.name, workload=workload, phase=phase, workdir=str(workdir),
                                checkpoint=str(checkpoint), cache=args.cache,
                                verify=(rep == 0 and not args.no_verify))
                    res = run_cell(task, args.timeout_s)
                    os.sync()  # a non-durable save's dirty pages must not slow the next run
                    res.update(method=method.name, workload=workload, phase=phase, repeat=rep)
                    samples.append(res)
                    spent[id(cell)] += res["seconds"]
                    print(f"  {method.name:14s} {workload} {phase:13s} #{rep}: {res['seconds']:8.3f} s  "
                          f"peak RSS {res['peak_rss_bytes'] / 2**20:7.0f} MiB"
                          + (f"  init calls {res['initializer_calls']}" if res["initializer_calls"] is not None
                             else ""), flush=True)
            if not args.interleave:
                method = group[0][0]
                last = [c for c in _plan(method, workloads) if (method.name, c[0]) not in skip_cells]
                if last and group[0][1:] == last[-1]:
                    for w in ("W1", "W2"):
                        remove(workdir / "checkpoints" / f"{method.name}-{w}{method.suffix}")
    finally:
        if smoke is not None:
            smoke.close()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    if args.profile:
        return 0
    rows = summarize(samples)
    caches = sorted({c for r in rows for c in (r["cache"] or [])})
    meta = {
        "command": "python docs/benchmarks/run.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "date": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "machine": _machine(),
        "versions": _versions(),
        "scale": args.scale,
        "smoke": args.smoke,
        "w2_scale": args.w2_scale if args.w2_scale is not None else args.scale,
        "repeat": args.repeat,
        "process_repeat": max(args.repeat, args.process_repeat),
        "budget_s": args.budget_s,
        "cache": ", ".join(caches) if caches else args.cache,
        "workloads": {
            **{k: f"{w.description}: {len(w.variables)} variables, {w.nbytes / 1e9:.3f} GB" for k, w in built.items()},
            "W3": "open the W1 checkpoint, read 'layer_12/attn/q/kernel' (cold cache)",
            "W4": f"restore W1 into existing variables whose initializers sleep {SLEEP_S * 1000:.0f} ms "
                  "(cold cache; timed until every value is readable); W2 restore: the same into a new "
                  "model of W2's variables",
        },
        "rss_note": RSS_NOTE,
        "notes": [f"{m.name}: {m.label}" for m in methods],
    }
    goals = targets(rows)
    meta["targets"] = goals
    print()
    print(format_table(rows))
    print()
    print(format_targets(goals))
    for s in skipped:
        print(f"skipped {s['method']}: {s['reason']}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    chart = write_chart(args.out_dir / "chart.png", rows, meta["workloads"])
    write_json(args.out_dir / "results.json", meta, rows, skipped, samples)
    write_markdown(args.out_dir / "results.md", meta, rows, skipped, chart)
    if args.out_dir.resolve() == HERE:
        _update_readme(HERE / "README.md", (args.out_dir / "results.md").read_text())
    print(f"\nwrote {args.out_dir / 'results.json'}, results.md" + (", chart.png" if chart else
                                                                    " (no chart: matplotlib missing)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

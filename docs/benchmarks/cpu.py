"""CPU cost of every checkpoint path without the disk: varstore against h5py, zarr, safetensors and torch.

Issue 39's measurement. Every checkpoint lives on a tmpfs (`/dev/shm`, removed at the end, also on an
error or Ctrl-C), nothing is fsynced (varstore saves with `durable=False`), and each cell (one method,
one phase, one workload) runs in its own child process whose imports and inputs are set up before the
clock starts. A cell reports process CPU time (user + sys of every thread, `time.process_time`), wall
time and peak RSS (VmHWM, reset before the timed region). Methods run in rotated order, round after
round, so a busy moment of the shared host hits every method alike; the table gives medians (and the
CPU minimum: fresh arrays on huge pages make some cells bimodal). Every loaded value is compared
with the source after the clock stops.

    python docs/benchmarks/cpu.py                 # 5 rounds, W1 (75 float32 arrays, 318 MiB) and W2
    python docs/benchmarks/cpu.py --rounds 7 --json cpu.json
    python docs/benchmarks/cpu.py --scale 0.05 --rounds 1   # a quick look (W1 16 MiB, W2 600 arrays)
    python docs/benchmarks/cpu.py --smoke --scale 0.002 --rounds 1   # the plumbing only, in one process
    python docs/benchmarks/cpu.py --workloads W1 --phases save,restore --methods varstore-h5,h5py,safetensors

Workloads: W1 = 6 transformer layers (hidden 1024: q/k/v/o kernels, MLP up/down, biases, two layer
norms) plus an embedding and a final norm, 75 float32 arrays, 318 MiB; W2 = 12,000 arrays of 64
float32 (3 MiB). Phases: `save`; `load` (every value as a new array: vs.load, h5py `[()]`, zarr `[...]`,
safetensors `load_file`, torch.load); `loop` (open, then one read per name: open_checkpoint +
`ck[name]`, h5py, safetensors `safe_open`); `restore` (into existing arrays: varstore restore into
materialized variables, h5py `read_direct`); W2 `restore-lazy` (into a new store whose variables have no
memory yet; peers: safetensors and torch load, which build new arrays).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROUNDS = 5

# ----------------------------------------------------------------------------- workloads


def w1_layout(scale: float) -> list[tuple[str, tuple[int, ...]]]:
    """W1: 75 float32 arrays, 318 MiB at scale 1 (hidden 1024; `scale` shrinks bytes, not the count)."""
    h = max(8, int(round(1024 * scale ** 0.5)))
    vocab = max(8, int(round(7680 * scale ** 0.5)))
    layout: list[tuple[str, tuple[int, ...]]] = [("embedding/table", (vocab, h))]
    for i in range(6):
        p = f"layer_{i}"
        layout += [(f"{p}/attn/{q}/kernel", (h, h)) for q in "qkvo"]
        layout += [(f"{p}/mlp/up/kernel", (h, 4 * h)), (f"{p}/mlp/up/bias", (4 * h,)),
                   (f"{p}/mlp/down/kernel", (4 * h, h)), (f"{p}/mlp/down/bias", (h,))]
        layout += [(f"{p}/{ln}/{g}", (h,)) for ln in ("ln_1", "ln_2") for g in ("gamma", "beta")]
    layout += [("final_ln/gamma", (h,)), ("final_ln/beta", (h,))]
    return layout


def w2_layout(scale: float) -> list[tuple[str, tuple[int, ...]]]:
    """W2: 12,000 arrays of 64 float32 at scale 1 (at least 50)."""
    return [(f"small/v{i:05d}", (64,)) for i in range(max(50, int(12_000 * min(scale, 1.0))))]


def make_arrays(layout: list[tuple[str, tuple[int, ...]]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in layout}


def workload(name: str, scale: float) -> dict[str, np.ndarray]:
    return make_arrays(w1_layout(scale), 1) if name == "W1" else make_arrays(w2_layout(scale), 2)


# ----------------------------------------------------------------------------- methods
# Each method: save(arrays, path) and the phases it has. A phase is (prepare(path, arrays) -> state,
# run(state, path) -> dict name -> array); prepare is untimed.

def _resident_zeros(shape: Any, dtype: Any = np.float32, *args: Any, **kwargs: Any) -> np.ndarray:
    array = np.empty(shape, dtype)
    array.fill(0)  # np.zeros maps its pages on first write; these are resident now
    return array


def _vs_store(arrays: dict[str, np.ndarray], materialized: bool) -> Any:
    from varstore.store.scopes import VariableStore

    store = VariableStore()
    for name, value in arrays.items():
        if materialized:
            store.get_variable(name, shape=value.shape, dtype=value.dtype, initializer=_resident_zeros)
        else:
            store.get_variable(name, shape=value.shape, dtype=value.dtype)
    if materialized:
        store.initialize()  # existing variables with resident pages, as h5py's destinations
    return store


def _vs_save(arrays: dict[str, np.ndarray], path: Path) -> None:
    import varstore as vs

    vs.save(path, arrays, durable=False)


def _vs_load(state: Any, path: Path) -> dict[str, np.ndarray]:
    import varstore as vs

    return vs.load(path)


def _vs_loop(state: Any, path: Path) -> dict[str, np.ndarray]:
    import varstore as vs

    with vs.open_checkpoint(path) as ck:
        return {name: ck[name] for name in ck.keys()}


def _vs_restore(state: Any, path: Path) -> Any:
    import varstore as vs

    vs.restore(path, state)
    return state  # its values are gathered for the check after the clock (_values)


def _values(out: Any) -> dict[str, np.ndarray]:
    """What a cell returned, as {name: array} for the check: a restored VariableStore's host views, untimed
    (the restore's result is the store; 12,000 `host_view` calls cost ~10 ms, not the restore's work)."""
    if isinstance(out, dict):
        return out
    return {v.name: v.host_view() for v in out.variables()}


def _h5_save(arrays: dict[str, np.ndarray], path: Path) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value)


def _h5_load(state: Any, path: Path) -> dict[str, np.ndarray]:
    import h5py

    with h5py.File(path, "r") as f:
        return {name: f[name][()] for name in state}


def _h5_read_direct(state: Any, path: Path) -> dict[str, np.ndarray]:
    import h5py

    with h5py.File(path, "r") as f:
        for name, out in state.items():
            f[name].read_direct(out)
    return state


def _zarr_save(arrays: dict[str, np.ndarray], path: Path) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="w")
    for name, value in arrays.items():
        root.create_array(name, shape=value.shape, dtype=value.dtype, chunks=value.shape,
                          compressors=None)[...] = value


def _zarr_load(state: Any, path: Path) -> dict[str, np.ndarray]:
    import zarr

    root = zarr.open_group(str(path), mode="r")
    return {name: root[name][...] for name in state}


def _st_save(arrays: dict[str, np.ndarray], path: Path) -> None:
    from safetensors.numpy import save_file

    save_file(arrays, str(path))


def _st_load(state: Any, path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _st_loop(state: Any, path: Path) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def _torch_save(arrays: dict[str, np.ndarray], path: Path) -> None:
    import torch

    torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, path)


def _torch_load(state: Any, path: Path) -> dict[str, np.ndarray]:
    import torch

    return {k: v.numpy() for k, v in torch.load(path, weights_only=True).items()}


def _names(path: Path, arrays: dict[str, np.ndarray]) -> list[str]:
    return list(arrays)


def _zeros_like(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {name: np.empty(value.shape, value.dtype) for name, value in arrays.items()}
    for a in out.values():
        a.fill(0)
    return out


def _none(path: Path, arrays: dict[str, np.ndarray]) -> None:
    return None


Phase = tuple[Callable[[Path, dict[str, np.ndarray]], Any], Callable[[Any, Path], dict[str, np.ndarray]]]

#: name -> (suffix, imports, save, {phase: (prepare, run)}); varstore methods first.
METHODS: dict[str, tuple[str, tuple[str, ...], Callable[..., None], dict[str, Phase]]] = {
    "varstore-h5": (".h5", ("varstore", "h5py"), _vs_save, {
        "load": (_none, _vs_load), "loop": (_none, _vs_loop),
        "restore": (lambda p, a: _vs_store(a, True), _vs_restore),
        "restore-lazy": (lambda p, a: _vs_store(a, False), _vs_restore)}),
    "varstore-zarr": (".zarr", ("varstore", "zarr"), _vs_save, {
        "load": (_none, _vs_load), "loop": (_none, _vs_loop),
        "restore": (lambda p, a: _vs_store(a, True), _vs_restore),
        "restore-lazy": (lambda p, a: _vs_store(a, False), _vs_restore)}),
    "h5py": (".h5", ("h5py",), _h5_save, {
        "load": (_names, _h5_load), "loop": (_names, _h5_load), "restore": (_zeros_like, _h5_read_direct)}),
    "zarr": (".zarr", ("zarr",), _zarr_save, {"load": (_names, _zarr_load), "loop": (_names, _zarr_load)}),
    "safetensors": (".safetensors", ("safetensors.numpy",), _st_save, {
        "load": (_none, _st_load), "loop": (_none, _st_loop), "restore-lazy": (_none, _st_load)}),
    "torch": (".pt", ("torch",), _torch_save, {"load": (_none, _torch_load), "restore-lazy": (_none, _torch_load)}),
}
PHASES = ("save", "load", "loop", "restore", "restore-lazy")


def is_varstore(method: str) -> bool:
    return method.startswith("varstore")


# ----------------------------------------------------------------------------- the child: one cell


def _peak_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


def child(method: str, phase: str, work: str, scale: float, path: Path) -> dict[str, Any]:
    """Runs one cell in this process; returns cpu_s, wall_s, peak_mib and whether every value matched."""
    import importlib

    suffix, modules, save, phases = METHODS[method]
    for module in modules:
        importlib.import_module(module)
    if is_varstore(method):
        import varstore as vs  # the readers and writers the first call would import

        probe = path.parent / f"warm-{os.getpid()}{suffix}"
        vs.save(probe, {"w": np.zeros(2, np.float32)}, durable=False)
        vs.load(probe)
        with vs.open_checkpoint(probe) as ck:
            ck["w"]
        vs.restore(probe, _vs_store({"w": np.zeros(2, np.float32)}, False))  # restore's modules too
        shutil.rmtree(probe) if probe.is_dir() else probe.unlink()
    arrays = workload(work, scale)
    if phase == "save":
        state: Any = arrays
        run: Callable[[Any, Path], Any] = lambda s, p: save(s, p)  # noqa: E731
    else:
        prepare, run = phases[phase]
        state = prepare(path, arrays)
    _reset_peak()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = run(state, path)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = _peak_kib() / 1024
    if phase == "save":  # the saved file is read back by the method's own load below: checked
        out = phases["load"][1](phases["load"][0](path, arrays), path)
    out = _values(out)
    ok = set(out) == set(arrays) and all(np.array_equal(np.asarray(out[k]), v) for k, v in arrays.items())
    return {"cpu_s": cpu, "wall_s": wall, "peak_mib": peak, "ok": bool(ok)}


# ----------------------------------------------------------------------------- the driver


def _cells(workloads: list[str], methods: list[str], phases: tuple[str, ...] = PHASES) -> list[tuple[str, str, str]]:
    cells = []
    for work in workloads:
        for phase in PHASES:
            if (phase == "restore-lazy" and work != "W2") or phase not in phases:
                continue
            members = [m for m in methods if phase == "save" or phase in METHODS[m][3]]
            if any(is_varstore(m) for m in members) and any(not is_varstore(m) for m in members):
                cells += [(m, phase, work) for m in members]
    return cells


def _run_child(cell: tuple[str, str, str], scale: float, path: Path) -> dict[str, Any]:
    method, phase, work = cell
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", method, phase, work,
           "--scale", str(scale), "--path", str(path)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"cell {cell} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def _write_inputs(root: Path, works: list[str], cells: list[tuple[str, str, str]], scale: float) -> None:
    """The inputs of every read cell, one file per method and workload, written anew (untimed) for each round.

    Which physical pages a tmpfs file gets is a draw, and on this VM it moves
    the cost of reading the file by up to ~20% (W1 read back from one file:
    40-52 ms of CPU for the same bytes written by the same code, the draw
    moving with the CPU whose free-page list served the write, run to run).
    Files written once would keep one draw per method for every round; written
    anew, each round draws again and the medians average the draws out.
    """
    for work in works:
        arrays = workload(work, scale)
        for method in sorted({cell[0] for cell in cells if cell[2] == work and cell[1] != "save"}):
            suffix, _, save, _ = METHODS[method]
            path = root / f"{work}-{method}{suffix}"
            _remove(path)
            save(arrays, path)
        del arrays


@contextmanager
def tmpfs_scratch(prefix: str) -> Iterator[Path]:
    """A new folder on the tmpfs (`/dev/shm`; the system's temporary folder without one), removed at the end,
    also on an error, Ctrl-C or SIGTERM (the benchmark scripts' one scratch folder each)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--workloads", default="W1,W2")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--phases", default=",".join(PHASES), help="a subset of " + ",".join(PHASES))
    p.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    p.add_argument("--smoke", action="store_true",
                   help="run every cell in this process (measures nothing: checks the plumbing and the values)")
    p.add_argument("--child", nargs=3, metavar=("METHOD", "PHASE", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child[:3], args.scale, args.path)))
        return 0

    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    with tmpfs_scratch("varstore-cpu-") as root:
        methods = [m for m in args.methods.split(",") if m]
        works = [w for w in args.workloads.split(",") if w]
        cells = _cells(works, methods, tuple(x for x in args.phases.split(",") if x))
        for r in range(args.rounds):
            _write_inputs(root, works, cells, args.scale)
            shift = (r * 7) % len(cells)
            for cell in cells[shift:] + cells[:shift]:
                method, phase, work = cell
                suffix = METHODS[method][0]
                path = (root / f"save-{work}-{method}{suffix}" if phase == "save"
                        else root / f"{work}-{method}{suffix}")
                measured = (child(method, phase, work, args.scale, path) if args.smoke
                            else _run_child(cell, args.scale, path))
                results.setdefault(cell, []).append(measured)
                if phase == "save":
                    _remove(path)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps([{"method": m, "phase": ph, "workload": w, "runs": runs}
                                         for (m, ph, w), runs in results.items()], indent=1))
    return 0 if all(run["ok"] for runs in results.values() for run in runs) else 1


def report(results: dict[tuple[str, str, str], list[dict[str, Any]]], args: argparse.Namespace) -> str:
    med = {cell: {k: statistics.median(run[k] for run in runs) for k in ("cpu_s", "wall_s", "peak_mib")}
           for cell, runs in results.items()}
    lines = [f"CPU benchmark: tmpfs, no fsync, {args.rounds} rotated rounds, medians; scale {args.scale}; "
             f"{os.cpu_count()} CPUs",
             "", "| workload | phase | method | CPU ms | CPU min ms | wall ms | wall/CPU | peak MiB | "
             "CPU ratio to best peer | values |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for work in ("W1", "W2"):
        for phase in PHASES:
            cells = [c for c in med if c[1] == phase and c[2] == work]
            if not cells:
                continue
            peers = [c for c in cells if not is_varstore(c[0])]
            best = min(peers, key=lambda c: med[c]["cpu_s"])
            for cell in sorted(cells, key=lambda c: (not is_varstore(c[0]), c[0])):
                m = med[cell]
                ratio = m["cpu_s"] / med[best]["cpu_s"] if med[best]["cpu_s"] else float("nan")
                tag = f"{ratio:.2f}x {best[0]}" if is_varstore(cell[0]) else ("best peer" if cell == best else "")
                ok = "ok" if all(run["ok"] for run in results[cell]) else "MISMATCH"
                low = min(run["cpu_s"] for run in results[cell])  # a bimodal cell (huge-page stalls) shows here
                lines.append(f"| {work} | {phase} | {cell[0]} | {m['cpu_s'] * 1e3:.0f} | {low * 1e3:.0f} | {m['wall_s'] * 1e3:.0f} | "
                             f"{m['wall_s'] / m['cpu_s']:.2f} | {m['peak_mib']:.0f} | {tag} | {ok} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

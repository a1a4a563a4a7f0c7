"""Quick checkpoint measurements: W1 (~1.2 GB, 384 float32 variables) and W2 (50,000 x 64 float32).

Each (method, phase) runs in a fresh subprocess; saves are durable (fsync);
restores read into preallocated arrays, after dropping the page cache when
this process may (root), else warm (the table says which). Prints seconds,
GB/s and peak RSS in MiB. The full benchmark is docs/benchmarks/run.py.

    python docs/benchmarks/checkpoint_quick.py [--dir /tmp/vsbench] [--w2-plain-zarr 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def w1_model() -> dict[str, np.ndarray]:
    """24 transformer layers (hidden 1024, MLP 4096): 384 float32 variables, 1.21 GB."""
    model = {}
    rng = np.random.default_rng(0)
    for layer in range(24):
        prefix = f"layer_{layer:02d}"
        for part in ("q", "k", "v", "o"):
            model[f"{prefix}/attn/{part}/kernel"] = np.empty((1024, 1024), np.float32)
            model[f"{prefix}/attn/{part}/bias"] = np.empty((1024,), np.float32)
        model[f"{prefix}/mlp/up/kernel"] = np.empty((1024, 4096), np.float32)
        model[f"{prefix}/mlp/up/bias"] = np.empty((4096,), np.float32)
        model[f"{prefix}/mlp/down/kernel"] = np.empty((4096, 1024), np.float32)
        model[f"{prefix}/mlp/down/bias"] = np.empty((1024,), np.float32)
        for norm in ("ln1", "ln2"):
            model[f"{prefix}/{norm}/scale"] = np.empty((1024,), np.float32)
            model[f"{prefix}/{norm}/bias"] = np.empty((1024,), np.float32)
    for value in model.values():
        value[...] = rng.standard_normal(value.shape, dtype=np.float32)
    return model


def w2_model(count: int = 50_000) -> dict[str, np.ndarray]:
    return {f"block_{i // 1000:02d}/var_{i}": np.full(64, i, np.float32) for i in range(count)}


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def _fsync_tree(path: Path) -> None:
    paths = [path] if path.is_file() else [Path(r) / n for r, ds, fs in os.walk(path) for n in ds + fs] + [path]
    for item in paths:
        fd = os.open(item, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


# ------------------------------------------------------------------ methods
def save_raw(path: Path, model: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as handle:
        for value in model.values():
            value.tofile(handle)
        handle.flush()
        os.fsync(handle.fileno())


def load_raw(path: Path, model: dict[str, np.ndarray]) -> None:
    with open(path, "rb") as handle:
        for value in model.values():
            handle.readinto(memoryview(value.reshape(-1).view(np.uint8)))


def save_h5py(path: Path, model: dict[str, np.ndarray]) -> None:
    import h5py
    with h5py.File(path, "w", libver="latest") as handle:
        for name, value in model.items():
            handle.create_dataset(name, data=value)
    _fsync_tree(path)


def load_h5py(path: Path, model: dict[str, np.ndarray]) -> None:
    import h5py
    with h5py.File(path, "r") as handle:
        for name, value in model.items():
            handle[name].read_direct(value)


def save_zarr(path: Path, model: dict[str, np.ndarray]) -> None:
    import zarr
    group = zarr.open_group(str(path), mode="w")
    for name, value in model.items():
        group.create_array(name, data=value, chunks=value.shape, compressors=None)
    _fsync_tree(path)


def load_zarr(path: Path, model: dict[str, np.ndarray]) -> None:
    import zarr
    group = zarr.open_group(str(path), mode="r")
    for name, value in model.items():
        value[...] = group[name][...]


def save_varstore(path: Path, model: dict[str, np.ndarray]) -> None:
    from varstore import save
    save(path, model)


def load_varstore(path: Path, model: dict[str, np.ndarray]) -> None:
    from varstore import restore
    restore(path, model)


METHODS = {
    "raw": (".bin", save_raw, load_raw),
    "h5py": (".h5", save_h5py, load_h5py),
    "zarr": (".zarr", save_zarr, load_zarr),
    "varstore-h5": (".h5", save_varstore, load_varstore),
    "varstore-zarr": (".zarr", save_varstore, load_varstore),
}


def worker(method: str, workload: str, phase: str, directory: Path, count: int) -> dict[str, float]:
    suffix, saver, loader = METHODS[method]
    model = w1_model() if workload == "W1" else w2_model(count)
    path = directory / f"{workload}-{method}{suffix}"
    nbytes = sum(v.nbytes for v in model.values())
    cold = False
    if phase == "save":
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        start = time.perf_counter()
        saver(path, model)
    else:
        for value in model.values():
            value[...] = 0
        cold = _drop_caches()
        start = time.perf_counter()
        loader(path, model)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if phase == "restore":
        expected = w1_model() if workload == "W1" else w2_model(count)
        assert all(np.array_equal(model[k], expected[k]) for k in list(model)[:50]), "wrong values"
    return {"seconds": seconds, "gb_per_s": nbytes / seconds / 1e9, "nbytes": nbytes, "cold": cold,
            "peak_rss_mib": peak, "count": len(model)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default="/tmp/varstore-quick")
    parser.add_argument("--w2-plain", type=int, default=2000,
                        help="variables for plain h5py/zarr in W2 (their per-variable cost is scaled to 50,000)")
    parser.add_argument("--worker", nargs=4, metavar=("METHOD", "WORKLOAD", "PHASE", "COUNT"))
    args = parser.parse_args()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    if args.worker:
        method, workload, phase, count = args.worker
        print(json.dumps(worker(method, workload, phase, directory, int(count))))
        return
    rows = []
    plan = [("W1", m, 0) for m in METHODS] + [("W2", m, 50_000) for m in ("varstore-h5", "varstore-zarr")] + \
           [("W2", m, args.w2_plain) for m in ("h5py", "zarr")]
    for workload, method, count in plan:
        for phase in ("save", "restore"):
            out = subprocess.run([sys.executable, __file__, "--dir", str(directory), "--worker", method,
                                  workload, phase, str(count)], capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            scaled = result["seconds"] * (50_000 / count) if workload == "W2" else result["seconds"]
            rows.append((workload, method, phase, result, scaled))
            print(f"{workload} {method:14s} {phase:8s} {result['seconds']:8.3f} s"
                  f"{'' if workload == 'W1' or count == 50_000 else f' ({count} vars; x{50_000 // count} = {scaled:.2f} s)'}"
                  f"  {result['gb_per_s']:6.2f} GB/s  peak RSS {result['peak_rss_mib']:7.0f} MiB"
                  f"  {'cold' if result['cold'] else 'warm'}  model {result['nbytes'] / 2**20:.0f} MiB", flush=True)
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()

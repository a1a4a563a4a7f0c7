"""Issue 11, target 8: restores into CuPy variables against the pinned host-to-device bandwidth, and async saves from them.

Measured in one process, on one GPU, with the W1 layout (a transformer's variables, float32):

- the copy engines alone: one host-to-device copy of the model's bytes from pinned memory (the
  bandwidth target 8 measures against), from pageable memory, and the device-to-host copies back;
- `restore` of a varstore checkpoint (HDF5 and Zarr) into CuPy variables that hold memory (in
  place) and into variables that hold none yet (read straight to the device), beside the same
  restore into NumPy variables (the file-read floor) and the plain way: h5py reads into NumPy,
  then `cupy.asarray` per variable;
- `save(..., blocking=False)` from CuPy variables: how long the call blocks, against the
  device-to-host copy of the same bytes (pinned, and one `.get()` per variable).

Restores run with the page cache warm (the files were just read) and cold (`drop_caches` as root,
else POSIX_FADV_DONTNEED); every time includes a device synchronize. Each cell is the median of
`--repeat` runs; peak RSS is the process's. Without CuPy and a device it says so and exits 0.

    python docs/benchmarks/gpu.py [--scale 1.0] [--repeat 5] [--workdir /tmp] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _memory import peak_bytes  # noqa: E402  (sibling modules of this script)
from _worker import _cold_cache as cold_cache  # noqa: E402
from _workloads import w1_layout  # noqa: E402


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        return None
    try:
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # a CUDA driver error: no device
        return None


def _median_s(run: Callable[[], Any], repeat: int, before: Callable[[], Any] | None = None) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def _model(scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.random(shape, dtype=np.float32) for name, shape in w1_layout(scale)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="W1 scale (1.0: 1.2 GB)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the cells as JSON here")
    args = parser.parse_args(argv)
    cp = _cupy()
    if cp is None:
        print("no CuPy or no CUDA device here: target 8 not measured")
        return 0
    import h5py

    import varstore  # noqa: F401  (imports cupy through varstore.store.devices on first GPU use)
    from varstore import restore, save
    from varstore.store.scopes import VariableStore

    workdir = Path(tempfile.mkdtemp(prefix="vs-gpu-", dir=args.workdir))
    cells: dict[str, Any] = {"scale": args.scale, "repeat": args.repeat,
                             "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    try:
        model = _model(args.scale)
        nbytes = sum(v.nbytes for v in model.values())
        cells["model_bytes"], cells["variables"] = nbytes, len(model)
        paths = {"h5": workdir / "model.h5", "zarr": workdir / "model.zarr"}
        for path in paths.values():
            save(path, model)
        plain = workdir / "plain.h5"
        with h5py.File(plain, "w") as f:
            for name, value in model.items():
                f.create_dataset(name, data=value)
        sync = cp.cuda.Device(0).synchronize

        # ---- the copy engines alone
        import cupyx

        pinned = cupyx.empty_pinned((nbytes,), np.uint8)
        pinned[...] = 1
        pageable = np.ones(nbytes, np.uint8)
        on_device = cp.empty(nbytes, np.uint8)
        cells["h2d_pinned_s"] = _median_s(lambda: (on_device.set(pinned), sync()), args.repeat)
        cells["h2d_pageable_s"] = _median_s(lambda: (on_device.set(pageable), sync()), args.repeat)
        cells["d2h_pinned_s"] = _median_s(lambda: on_device.get(out=pinned), args.repeat)
        device_model = {name: cp.asarray(value) for name, value in model.items()}
        cells["d2h_per_variable_s"] = _median_s(lambda: [v.get() for v in device_model.values()], args.repeat)
        from varstore.store import device_transfers

        cells["d2h_staged_per_variable_s"] = _median_s(
            lambda: [device_transfers.to_host(v) for v in device_model.values()], args.repeat)
        del on_device, pageable, pinned

        # ---- restores
        def gpu_store(allocated: bool) -> VariableStore:
            store = VariableStore()
            for name, value in model.items():
                v = store.get_variable(name, value.shape, device="gpu:0",
                                       initializer=lambda s, d: np.zeros(s, d))
                if allocated:
                    v.initialize()
            return store

        def host_store() -> VariableStore:
            store = VariableStore()
            for name, value in model.items():
                store.get_variable(name, value.shape, device="cpu:0",
                                   initializer=lambda s, d: np.zeros(s, d)).initialize()
            return store

        def naive() -> None:
            with h5py.File(plain, "r") as f:
                for name in model:
                    cp.asarray(f[name][...])
            sync()

        for cache in ("warm", "cold"):
            how = []

            def prepare(path: Path) -> Callable[[], None]:
                def evict() -> None:
                    how.append(cold_cache(path, "drop"))

                def warm() -> None:
                    for file in ([path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())):
                        file.read_bytes()

                return evict if cache == "cold" else warm

            for fmt, path in paths.items():
                in_place = gpu_store(allocated=True)
                cells[f"{cache}_{fmt}_gpu_in_place_s"] = _median_s(
                    lambda: (restore(path, in_place), sync()), args.repeat, prepare(path))
                del in_place
                holder: list[VariableStore] = []
                cells[f"{cache}_{fmt}_gpu_fresh_s"] = _median_s(
                    lambda: (restore(path, holder[-1]), sync()), args.repeat,
                    lambda: (holder.clear(), holder.append(gpu_store(allocated=False)), prepare(path)()))
                holder.clear()
                host = host_store()
                cells[f"{cache}_{fmt}_host_in_place_s"] = _median_s(
                    lambda: restore(path, host), args.repeat, prepare(path))
                del host
            cells[f"{cache}_h5py_then_asarray_s"] = _median_s(naive, args.repeat, prepare(plain))
            cells[f"{cache}_eviction"] = sorted(set(how)) or ["none"]
        store = gpu_store(allocated=True)
        restore(paths["h5"], store)
        check = store.get_variable_by_name(next(iter(model)))
        assert np.array_equal(check.numpy(), model[check.name]), "restored values differ"

        # ---- async and blocking saves from CuPy variables
        target = workdir / "async.h5"
        handles: list[Any] = []

        def async_call() -> None:  # what the caller waits for: the call itself
            handles.append(save(target, store, blocking=False, overwrite=True))

        def async_call_synced() -> None:  # an upper bound: also the device work queued meanwhile
            handles.append(save(target, store, blocking=False, overwrite=True))
            sync()

        def finish() -> None:
            while handles:
                handles.pop().wait()

        cells["async_save_call_s"] = _median_s(async_call, args.repeat, finish)
        finish()
        cells["async_save_call_synced_s"] = _median_s(async_call_synced, args.repeat, finish)
        finish()
        cells["async_save_total_s"] = _median_s(lambda: save(target, store, blocking=False, overwrite=True).wait(),
                                                args.repeat)
        cells["blocking_save_gpu_s"] = _median_s(lambda: save(target, store, overwrite=True), args.repeat)
        host = host_store()
        restore(paths["h5"], host)
        cells["blocking_save_host_s"] = _median_s(lambda: save(target, host, overwrite=True), args.repeat)
        cells["peak_rss_mb"] = peak_bytes() / 2**20  # VmHWM since exec (ru_maxrss carries the parent's peak)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _report(cells)
    if args.out is not None:
        args.out.write_text(json.dumps(cells, indent=1) + "\n")
    return 0


def _report(cells: dict[str, Any]) -> None:
    gb = cells["model_bytes"] / 1e9
    pinned_s = cells["h2d_pinned_s"][0]
    print(f"# GPU: {cells['device']}; W1 at scale {cells['scale']}: {cells['variables']} float32 variables, "
          f"{gb:.3f} GB; medians of {cells['repeat']}; peak RSS {cells['peak_rss_mb']:.0f} MB\n")
    print("| copy | median s | min s | GB/s |")
    print("| --- | --- | --- | --- |")
    for key, what in (("h2d_pinned_s", "host-to-device, pinned"), ("h2d_pageable_s", "host-to-device, pageable"),
                      ("d2h_pinned_s", "device-to-host, pinned"),
                      ("d2h_per_variable_s", "device-to-host, `.get()` per variable"),
                      ("d2h_staged_per_variable_s", "device-to-host, varstore's staged `to_host` per variable")):
        median, low = cells[key]
        print(f"| {what} | {median:.4f} | {low:.4f} | {gb / median:.1f} |")
    print("\n| restore (target 8: GB/s at least 0.8x pinned host-to-device) | cache | median s | GB/s | x pinned H2D |")
    print("| --- | --- | --- | --- | --- |")
    for cache in ("warm", "cold"):
        rows = [(f"{fmt}: into CuPy variables, in place", f"{cache}_{fmt}_gpu_in_place_s") for fmt in ("h5", "zarr")]
        rows += [(f"{fmt}: into CuPy variables without memory", f"{cache}_{fmt}_gpu_fresh_s") for fmt in ("h5", "zarr")]
        rows += [(f"{fmt}: into NumPy variables (file-read floor)", f"{cache}_{fmt}_host_in_place_s")
                 for fmt in ("h5", "zarr")]
        rows += [("h5py into NumPy, then cupy.asarray", f"{cache}_h5py_then_asarray_s")]
        for what, key in rows:
            median = cells[key][0]
            print(f"| {what} | {cache} ({', '.join(cells[f'{cache}_eviction'])}) | {median:.4f} | "
                  f"{gb / median:.2f} | {pinned_s / median:.2f} |")
    d2h = cells["d2h_pinned_s"][0]
    print("\n| save from CuPy variables (target 8: the async call blocks at most the D2H copy) | median s | "
          "x pinned D2H | x `.get()` per variable |")
    print("| --- | --- | --- | --- |")
    for key, what in (("async_save_call_s", "`save(blocking=False)`: the call"),
                      ("async_save_call_synced_s", "`save(blocking=False)`: the call, then a device synchronize"),
                      ("async_save_total_s", "`save(blocking=False)` then `wait()`"),
                      ("blocking_save_gpu_s", "`save()` from CuPy variables"),
                      ("blocking_save_host_s", "`save()` from NumPy variables")):
        median = cells[key][0]
        print(f"| {what} | {median:.4f} | {median / d2h:.2f} | {median / cells['d2h_per_variable_s'][0]:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())

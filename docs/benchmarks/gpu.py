"""Issue 11, target 8: restores into CuPy variables against the pinned host-to-device bandwidth, and async saves from them.

Measured in one process, on one GPU, with the W1 layout (a transformer's variables, float32):

- the copy engines alone: one host-to-device copy of the model's bytes from pinned memory (the
  bandwidth target 8 measures against), from pageable memory, and the device-to-host copies back;
- `restore` of a varstore checkpoint (HDF5 and Zarr) into CuPy variables that hold memory (in
  place) and into variables that hold none yet (read straight to the device), beside the same
  restore into NumPy variables (the file-read floor) and the plain way: h5py reads into NumPy,
  then `cupy.asarray` per variable;
- `save(..., blocking=False)` from CuPy variables: how long the call blocks, against the
  device-to-host copy of the same bytes (pinned, and one `.get()` per variable);
- the peers of issue 39, in the same run on the same variables: `safetensors.torch.load_file(device="cuda")`,
  `torch.load(map_location="cuda")` and a raw read of the same bytes (`readinto` a pinned buffer, then one
  host-to-device copy). Skipped, and said so, where torch cannot reach the device.

Restores run with the page cache warm (the files were just read) and cold (`drop_caches` as root,
else POSIX_FADV_DONTNEED); every time includes a device synchronize. Each cell is the median of
`--repeat` runs; peak RSS is the process's. Without CuPy and a device it says so and exits 0.

    python docs/benchmarks/gpu.py [--scale 1.0] [--repeat 5] [--workdir /tmp] [--out results.json]
                                  [--read-threads N] [--skip-saves]
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


def _peers(cp: Any, model: dict[str, np.ndarray], workdir: Path,
           nbytes: int) -> dict[str, tuple[Callable[[], Any], Path]]:
    """The loaders issue 39 compares GPU restores with, each with the file it reads (written here, untimed)."""
    import cupyx

    sync = cp.cuda.Device(0).synchronize
    raw = workdir / "model.raw"
    with open(raw, "wb") as f:
        for value in model.values():
            f.write(memoryview(value).cast("B"))
    pinned = cupyx.empty_pinned((nbytes,), np.uint8)
    on_device = cp.empty(nbytes, np.uint8)

    def raw_read() -> None:
        with open(raw, "rb", buffering=0) as f:
            f.readinto(memoryview(pinned))
        on_device.set(pinned)
        sync()

    peers: dict[str, tuple[Callable[[], Any], Path]] = {"raw_pinned": (raw_read, raw)}
    try:
        import torch
        from safetensors.numpy import save_file
        from safetensors.torch import load_file
    except ImportError:
        print("no torch or safetensors here: their cells are not measured")
        return peers
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: its cells are not measured")
        return peers
    st = workdir / "model.safetensors"
    save_file(model, str(st))
    pt = workdir / "model.pt"
    torch.save({name: torch.from_numpy(value) for name, value in model.items()}, pt)
    peers["safetensors_cuda"] = (lambda: (load_file(str(st), device="cuda"), torch.cuda.synchronize()), st)
    peers["torch_load_cuda"] = (lambda: (torch.load(pt, map_location="cuda", weights_only=True),
                                         torch.cuda.synchronize()), pt)
    return peers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="W1 scale (1.0: 1.2 GB)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the cells as JSON here")
    parser.add_argument("--read-threads", type=int, default=None,
                        help="device_transfers.READ_THREADS for this run (an A/B of the reader threads)")
    parser.add_argument("--skip-saves", action="store_true", help="measure the restores and copies only")
    args = parser.parse_args(argv)
    cp = _cupy()
    if cp is None:
        print("no CuPy or no CUDA device here: target 8 not measured")
        return 0
    import h5py

    import varstore  # noqa: F401  (imports cupy through varstore.store.devices on first GPU use)
    from varstore import restore, save
    from varstore.store import device_transfers
    from varstore.store.scopes import VariableStore

    if args.read_threads is not None:
        device_transfers.READ_THREADS = args.read_threads

    workdir = Path(tempfile.mkdtemp(prefix="vs-gpu-", dir=args.workdir))
    cells: dict[str, Any] = _Cells(scale=args.scale, repeat=args.repeat, read_threads=device_transfers.READ_THREADS,
                                   device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
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
        cells["d2h_staged_per_variable_s"] = _median_s(
            lambda: [device_transfers.to_host(v) for v in device_model.values()], args.repeat)
        del on_device, pageable, pinned

        peers = _peers(cp, model, workdir, nbytes)
        cells["peers"] = list(peers)

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
            for key, (run, path) in peers.items():
                cells[f"{cache}_{key}_s"] = _median_s(run, args.repeat, prepare(path))
            cells[f"{cache}_eviction"] = sorted(set(how)) or ["none"]
        store = gpu_store(allocated=True)
        restore(paths["h5"], store)
        check = store.get_variable_by_name(next(iter(model)))
        assert np.array_equal(check.numpy(), model[check.name]), "restored values differ"

        if args.skip_saves:
            cells["peak_rss_mb"] = peak_bytes() / 2**20
            return _finish(cells, args.out)

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
    return _finish(cells, args.out)


class _Cells(dict[str, Any]):
    """The run's cells; each measured cell is printed as it comes (a run cut short still shows what it measured)."""

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        if isinstance(value, tuple):
            print(f"  {key}: median {value[0]:.4f} s, min {value[1]:.4f} s", flush=True)


def _finish(cells: dict[str, Any], out: Path | None) -> int:
    _report(cells)
    if out is not None:
        out.write_text(json.dumps(cells, indent=1) + "\n")
    return 0


_PEERS = {"raw_pinned": "raw `readinto` a pinned buffer, then one host-to-device copy",
          "safetensors_cuda": '`safetensors.torch.load_file(device="cuda")`',
          "torch_load_cuda": '`torch.load(map_location="cuda")`'}


def _report(cells: dict[str, Any]) -> None:
    gb = cells["model_bytes"] / 1e9
    pinned_s = cells["h2d_pinned_s"][0]
    print(f"# GPU: {cells['device']}; W1 at scale {cells['scale']}: {cells['variables']} float32 variables, "
          f"{gb:.3f} GB; medians of {cells['repeat']}; {cells['read_threads']} reader threads; "
          f"peak RSS {cells['peak_rss_mb']:.0f} MB\n")
    print("| copy | median s | min s | GB/s |")
    print("| --- | --- | --- | --- |")
    for key, what in (("h2d_pinned_s", "host-to-device, pinned"), ("h2d_pageable_s", "host-to-device, pageable"),
                      ("d2h_pinned_s", "device-to-host, pinned"),
                      ("d2h_per_variable_s", "device-to-host, `.get()` per variable"),
                      ("d2h_staged_per_variable_s", "device-to-host, varstore's staged `to_host` per variable")):
        median, low = cells[key]
        print(f"| {what} | {median:.4f} | {low:.4f} | {gb / median:.1f} |")
    print("\n| restore (target 8: GB/s at least 0.8x pinned host-to-device) | cache | median s | GB/s | x pinned H2D "
          "| x safetensors |")
    print("| --- | --- | --- | --- | --- | --- |")
    for cache in ("warm", "cold"):
        rows = [(f"{fmt}: into CuPy variables, in place", f"{cache}_{fmt}_gpu_in_place_s") for fmt in ("h5", "zarr")]
        rows += [(f"{fmt}: into CuPy variables without memory", f"{cache}_{fmt}_gpu_fresh_s") for fmt in ("h5", "zarr")]
        rows += [(f"{fmt}: into NumPy variables (file-read floor)", f"{cache}_{fmt}_host_in_place_s")
                 for fmt in ("h5", "zarr")]
        rows += [("h5py into NumPy, then cupy.asarray", f"{cache}_h5py_then_asarray_s")]
        rows += [(_PEERS[key], f"{cache}_{key}_s") for key in cells["peers"]]
        safetensors_s = cells.get(f"{cache}_safetensors_cuda_s", (float("nan"),))[0]
        for what, key in rows:
            median = cells[key][0]
            print(f"| {what} | {cache} ({', '.join(cells[f'{cache}_eviction'])}) | {median:.4f} | "
                  f"{gb / median:.2f} | {pinned_s / median:.2f} | {median / safetensors_s:.2f} |")
    if "async_save_call_s" not in cells:
        return
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

"""What a read costs the kernel as its destination lines up with the file, and what page-aligned arrays save.

Issue 39, seventh pass (store/host_arrays.py). Everything on a tmpfs (`/dev/shm`, removed at the end),
process CPU time (user + sys of every thread), medians over rotated rounds; every file is written anew
each round (which physical pages a tmpfs file gets is a draw that moves the cost of reading it).

Part 1, raw: W1's 75 arrays (318 MiB) written to one file with each value at a file offset of 0, 16, 64
or 512 past a page, then read with one `preadv` per value into destinations 0, 16 or 64 bytes past a page
(16 is where glibc puts every NumPy array it maps).

Part 2, the engine: W1 `vs.load` and a restore into a new store (variables without memory) of HDF5 and
Zarr checkpoints, in fresh processes, with host_arrays' alignment on and off, alternating; the table gives
CPU, wall and peak RSS (VmHWM) medians, and every value is checked.

    python docs/benchmarks/copy_alignment.py                # 10 raw rounds, 8 engine rounds
    python docs/benchmarks/copy_alignment.py --rounds 4 --engine-rounds 4 --scale 0.25
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import _peak_kib, _reset_peak, _vs_store, tmpfs_scratch, workload  # noqa: E402  (the same W1 and RSS probe)

FILE_OFFSETS = (0, 16, 64, 512)
DESTINATION_OFFSETS = (0, 16, 64)
PAGE = 4096


def _placed(nbytes: int, past_page: int) -> np.ndarray:
    raw = np.empty(nbytes + 2 * PAGE, np.uint8)
    start = -raw.ctypes.data % PAGE + past_page
    out = raw[start:start + nbytes]
    out.fill(1)  # resident: the copies below fault nothing
    return out


def raw_part(root: Path, rounds: int, scale: float) -> list[str]:
    values = [v.reshape(-1).view(np.uint8) for v in workload("W1", scale).values()]
    destinations = {d: [_placed(v.nbytes, d) for v in values] for d in DESTINATION_OFFSETS}
    cells = [(f, d) for f in FILE_OFFSETS for d in DESTINATION_OFFSETS]
    cpu: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    for r in range(rounds):
        offsets: dict[int, list[int]] = {}
        for f in FILE_OFFSETS:
            fd = os.open(root / f"raw{f}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            at, offsets[f] = f, []
            for value in values:
                os.pwrite(fd, value, at)
                offsets[f].append(at)
                at += -(at + value.nbytes) % PAGE + value.nbytes + f  # the next value f past a page again
            os.close(fd)
        for f, d in cells[r % len(cells):] + cells[:r % len(cells)]:
            fd = os.open(root / f"raw{f}", os.O_RDONLY)
            start = time.process_time()
            for out, at in zip(destinations[d], offsets[f]):
                os.preadv(fd, [out], at)
            cpu[(f, d)].append(time.process_time() - start)
            os.close(fd)
            assert all(np.array_equal(out, v) for out, v in zip(destinations[d], values))
    lines = ["| file offset past a page | destination past a page | CPU ms (median) | CPU min ms |",
             "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {f} | {d} | {statistics.median(cpu[(f, d)]) * 1e3:.1f} | {min(cpu[(f, d)]) * 1e3:.1f} |"
              for f, d in cells]
    return lines


def child(path: str, op: str, aligned: bool, scale: float) -> dict[str, Any]:
    import varstore as vs
    from varstore.store import host_arrays

    if not aligned:
        host_arrays.CACHE_LINE_BYTES = 1 << 50  # host_empty is np.empty for every size
    probe = Path(path).parent / f"warm-{os.getpid()}{Path(path).suffix}"  # the readers' imports, untimed
    vs.save(probe, {"w": np.zeros(2, np.float32)}, durable=False)
    vs.load(probe)
    vs.restore(probe, _vs_store({"w": np.zeros(2, np.float32)}, False))
    shutil.rmtree(probe) if probe.is_dir() else probe.unlink()
    arrays = workload("W1", scale)
    store = _vs_store(arrays, False)
    _reset_peak()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if op == "load":
        out = vs.load(path)
    else:
        vs.restore(path, store)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    peak = _peak_kib() / 1024
    got = out if op == "load" else {v.name: v.numpy() for v in store.global_variables()}
    ok = set(got) == set(arrays) and all(np.array_equal(got[k], v) for k, v in arrays.items())
    return {"cpu_s": cpu, "wall_s": wall, "peak_mib": peak, "ok": bool(ok)}


def engine_part(root: Path, rounds: int, scale: float) -> list[str]:
    import varstore as vs

    cells = [(fmt, op, on) for fmt in ("h5", "zarr") for op in ("load", "restore-lazy") for on in (True, False)]
    runs: dict[tuple[str, str, bool], list[dict[str, Any]]] = {cell: [] for cell in cells}
    for r in range(rounds):
        arrays = workload("W1", scale)
        for fmt in ("h5", "zarr"):
            path = root / f"w1.{fmt}"
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
            vs.save(path, arrays, durable=False)
        del arrays
        for fmt, op, on in cells[r % len(cells):] + cells[:r % len(cells)]:
            cmd = [sys.executable, __file__, "--child", str(root / f"w1.{fmt}"), op, "1" if on else "0",
                   "--scale", str(scale)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
            runs[(fmt, op, on)].append(json.loads(done.stdout.strip().splitlines()[-1]))
    lines = ["| format | phase | host_arrays | CPU ms | CPU min ms | wall ms | peak MiB | CPU vs unaligned | values |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    med = {c: {k: statistics.median(run[k] for run in runs[c]) for k in ("cpu_s", "wall_s", "peak_mib")} for c in cells}
    for fmt, op, on in cells:
        m = med[(fmt, op, on)]
        ratio = m["cpu_s"] / med[(fmt, op, False)]["cpu_s"]
        ok = "ok" if all(run["ok"] for run in runs[(fmt, op, on)]) else "MISMATCH"
        low = min(run["cpu_s"] for run in runs[(fmt, op, on)])
        lines.append(f"| {fmt} | {op} | {'aligned' if on else 'np.empty'} | {m['cpu_s'] * 1e3:.0f} | {low * 1e3:.0f} | "
                     f"{m['wall_s'] * 1e3:.0f} | {m['peak_mib']:.0f} | {ratio:.2f}x | {ok} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10, help="raw rounds")
    p.add_argument("--engine-rounds", type=int, default=8)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--child", nargs=3, metavar=("PATH", "OP", "ALIGNED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.child[2] == "1", args.scale)))
        return 0
    with tmpfs_scratch("varstore-align-") as root:
        print(f"Copy alignment: tmpfs, W1 at scale {args.scale}, process CPU medians; {os.cpu_count()} CPUs\n")
        print("\n".join(raw_part(root, args.rounds, args.scale)))
        print()
        print("\n".join(engine_part(root, args.engine_rounds, args.scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

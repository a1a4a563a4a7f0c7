"""Benchmark (not a test): collective save and restore on N = 1, 2, 4 MPI ranks.

Workloads (float32, values from the store's initializers, set untimed):
  replicated  W1's 384 transformer variables scaled to ~100 MB, no task: every rank holds a
              copy; the collective save spreads the writes over the ranks.
  embedding   one ~250 MB embedding [244140, 256] (a constant initializer) partitioned into N
              parts on N ps tasks, plus the replicated W1 above (so the file is ~350 MB).
For each N: save (durable: every rank fsyncs, rank 0 commits) and restore into the same
partitioning after the checkpoint's pages were dropped from the page cache
(posix_fadvise DONTNEED, so restores read the disk where the kernel honours it).
Then the embedding checkpoint saved by 4 ranks is restored on 2 and on 3 ranks.
Reports wall time (slowest rank, between barriers), aggregate GB/s (checkpoint bytes /
time), peak RSS per rank (VmHWM over the save and the restore, reset through
/proc/self/clear_refs before the save; in brackets the RSS before it: the store's own memory) and
bytes written per rank (the manifest's record).

Sharded framework state (FSDP2 against DCP, JAX against Orbax): distributed_frameworks.py.

    python docs/benchmarks/distributed.py            # prints the markdown table
    python docs/benchmarks/distributed.py --scale 0.1  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _drop_cache(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    import varstore as vs

    sys.path.insert(0, str(HERE))
    from _memory import peak_bytes, reset_peak, rss_bytes
    from _workloads import w1_layout

    comm = MPI.COMM_WORLD
    store = vs.VariableStore()
    with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
        if args.workload == "embedding":
            rows = int(244140 * args.scale)
            # a constant: its parts are filled without building the global value, so the RSS shows save/restore
            store.get_variable("embedding", [rows, 256], initializer=vs.initializers.Constant(0.02),
                               partitioner=vs.fixed_size_partitioner(comm.size))
    for name, shape in w1_layout(100 / 1209 * args.scale):
        store.get_variable(name, list(shape), initializer=vs.initializers.RandomNormal(stddev=0.02))
    store.initialize(comm=comm)
    before = comm.gather(rss_bytes(), root=0)
    reset_peak()  # VmHWM from here (ru_maxrss would carry mpiexec's and the imports' peaks)
    path = Path(args.path)
    row: dict = {"workload": args.workload, "ranks": comm.size}
    if args.mode == "save":
        comm.Barrier()
        start = time.perf_counter()
        vs.save(path, store, comm=comm, overwrite=True)
        comm.Barrier()
        row["save_s"] = time.perf_counter() - start
    comm.Barrier()
    if comm.rank == 0:
        _drop_cache(path)
    comm.Barrier()
    start = time.perf_counter()
    vs.restore(path, store, comm=comm)
    comm.Barrier()
    row["restore_s"] = time.perf_counter() - start
    rss = comm.gather(peak_bytes(), root=0)
    if comm.rank == 0:
        reader = vs.checkpoint.open_varstore(path)
        section = reader.distributed or {}
        row["nbytes"] = sum(reader.record(n).nbytes for n in reader.keys())
        row["saved_by"] = section.get("world_size")
        row["bytes_per_rank"] = section.get("bytes_per_rank")
        row["peak_rss"] = rss
        row["rss_before"] = before
        print(json.dumps(row), flush=True)


def _run(ranks: int, *extra: str) -> dict:
    command = ["mpiexec", "-n", str(ranks), sys.executable, __file__, "--worker", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="replicated")
    parser.add_argument("--mode", default="save")
    parser.add_argument("--path", default="")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workdir", default=None, help="where checkpoints go (default: a new folder under /tmp)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    workdir = Path(tempfile.mkdtemp(prefix="varstore-dist-bench-", dir=args.workdir))
    rows = []
    try:
        for workload in ("replicated", "embedding"):
            for ranks in (1, 2, 4):
                path = workdir / f"{workload}-{ranks}.h5"
                rows.append(_run(ranks, "--workload", workload, "--mode", "save", "--path", str(path),
                                 "--scale", str(args.scale)))
        for ranks in (2, 3):
            row = _run(ranks, "--workload", "embedding", "--mode", "restore",
                       "--path", str(workdir / "embedding-4.h5"), "--scale", str(args.scale))
            rows.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("| workload | ranks | checkpoint MB | save s | save GB/s | restore s | restore GB/s | "
          "MB written per rank | peak RSS MB per rank (before save/restore) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        save = row.get("save_s")
        label = row["workload"] if save is not None else f"{row['workload']} (saved by {row['saved_by']})"
        written = " / ".join(_mb(b) for b in row["bytes_per_rank"]) if save is not None else "-"
        save_s = "-" if save is None else f"{save:.2f}"
        save_rate = "-" if save is None else f"{row['nbytes'] / save / 1e9:.2f}"
        print(f"| {label} | {row['ranks']} | {_mb(row['nbytes'])} | {save_s} | {save_rate} | "
              f"{row['restore_s']:.2f} | {row['nbytes'] / row['restore_s'] / 1e9:.2f} | {written} | "
              f"{' / '.join(f'{_mb(r)} ({_mb(b)})' for r, b in zip(row['peak_rss'], row['rss_before']))} |")


if __name__ == "__main__":
    main()

"""Benchmark (not a test): sharded framework state, varstore against DCP (FSDP2, 4 ranks) and Orbax (JAX, 8 devices).

  fsdp  4 gloo ranks on 127.0.0.1, an FSDP2 model (Linear layers, float32) whose
        parameters + Adam's two moments total --size MB; one job per method:
        varstore.torch.save / restore into an HDF5 file (varstore) and a Zarr
        directory (varstore-zarr) vs torch.distributed.checkpoint save / load.
  jax   one process, 8 forced CPU devices, a pytree of float32 arrays totalling
        --size MB sharded P("x") over the 8 devices; varstore.jax.save / restore
        (into P(None, "x"): another sharding) vs Orbax's StandardCheckpointer.
Reports wall time (slowest rank, between barriers), bytes on disk, peak RSS per rank
(VmHWM from /proc/self/status, reset through /proc/self/clear_refs before each phase).
Restores read from the page cache (the files were just written).

    python docs/benchmarks/distributed_frameworks.py --size 1024       # the issue's 1 GB
    python docs/benchmarks/distributed_frameworks.py --size 256 --only fsdp

Measured: docs/benchmarks/README.md, "Sharded framework state against DCP and Orbax" (1 GB and
256 MB on the 2-core host; the issue's targets beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import peak_bytes, reset_peak  # noqa: E402  (a sibling module: VmHWM, not ru_maxrss)


def _hwm_mb() -> float:
    return peak_bytes() / 2**20


def _disk(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def fsdp_worker(args: argparse.Namespace) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import init_device_mesh

    import varstore.torch as vst

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, size = dist.get_rank(), dist.get_world_size()
    width = 2048
    layers = max(1, round(args.size * 2**20 / 3 / 4 / (width * width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    mesh = init_device_mesh("cpu", (size,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    msd, osd = get_state_dict(model, optimizer)
    state = {"model": msd, "optim": osd}
    out: dict = {"rank": rank}

    def timed(name: str, call) -> None:
        dist.barrier()
        reset_peak()
        start = time.perf_counter()
        call()
        dist.barrier()
        out.setdefault(name, []).append(time.perf_counter() - start)
        out[name + "_rss_mb"] = max(out.get(name + "_rss_mb", 0.0), _hwm_mb())

    for rep in range(args.repeat):  # each save to a new path (as a training run does), then its restore
        base = Path(args.path)
        path = base.with_name(f"{base.stem}-{rep}{base.suffix}")
        if args.method in ("varstore", "varstore-zarr"):  # the container is the path's suffix (.h5 / .zarr)
            timed("save", lambda: vst.save(path, state))
            timed("restore", lambda: vst.restore(path, state))
        elif args.method == "dcp":
            timed("save", lambda: dcp.save(state, checkpoint_id=str(path)))
            timed("restore", lambda: dcp.load(state, checkpoint_id=str(path)))
        out["bytes"] = _disk(path) if rank == 0 else 0
        dist.barrier()
        if rank == 0:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _ranks(n: int, *extra: str) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    jobs = [subprocess.Popen([sys.executable, __file__, "--worker", *extra], env=dict(env, RANK=str(r)),
                             stdout=subprocess.PIPE, text=True) for r in range(n)]
    return [json.loads(job.communicate()[0].strip().splitlines()[-1]) for job in jobs]


def jax_run(args: argparse.Namespace, workdir: Path) -> dict:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import varstore.jax as vsj

    mesh = Mesh(np.array(jax.devices()), ("x",))
    rows = 1024
    count = max(1, round(args.size * 2**20 / 4 / (rows * 1024)))
    sharding = NamedSharding(mesh, P("x"))
    tree = {f"layer_{i}": jax.device_put(jax.random.normal(jax.random.key(i), (rows, 1024), jnp.float32), sharding)
            for i in range(count)}  # random: Orbax compresses (zstd), constants would shrink to nothing
    other = NamedSharding(mesh, P(None, "x"))
    like = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=other) for k, v in tree.items()}
    out: dict = {}

    def timed(name: str, call) -> object:
        reset_peak()
        start = time.perf_counter()
        value = call()
        jax.block_until_ready(value) if value is not None and not isinstance(value, Path) else None
        out.setdefault(name, []).append(time.perf_counter() - start)
        out[name + "_rss_mb"] = max(out.get(name + "_rss_mb", 0.0), _hwm_mb())
        return value

    checkpointer = ocp.StandardCheckpointer()
    for rep in range(args.repeat):  # alternating, each save to a new path
        varstore_path, orbax_path = workdir / f"jax.{rep}.h5", workdir / f"orbax.{rep}"
        timed("varstore_save", lambda: vsj.save(varstore_path, tree))
        timed("varstore_restore", lambda: vsj.restore(varstore_path, like))
        out["varstore_bytes"] = _disk(varstore_path)
        timed("orbax_save", lambda: (checkpointer.save(orbax_path, tree), checkpointer.wait_until_finished()))
        timed("orbax_restore", lambda: checkpointer.restore(orbax_path, like))
        out["orbax_bytes"] = _disk(orbax_path)
        varstore_path.unlink()
        shutil.rmtree(orbax_path)
    out["arrays"] = count
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="varstore")
    parser.add_argument("--path", default="")
    parser.add_argument("--size", type=float, default=1024.0, help="total state in MB (default 1024)")
    parser.add_argument("--only", choices=["fsdp", "jax"], default=None)
    parser.add_argument("--repeat", type=int, default=3, help="save + restore rounds; the median is reported")
    args = parser.parse_args()
    if args.worker:
        fsdp_worker(args)
        return
    workdir = Path(tempfile.mkdtemp(prefix="varstore-bench-"))
    try:
        if args.only in (None, "fsdp"):
            for method, name in (("varstore", "fsdp.h5"), ("varstore-zarr", "fsdp.zarr"), ("dcp", "fsdp.dcp")):
                rows = _ranks(4, "--method", method, "--path", str(workdir / name), "--size", str(args.size),
                              "--repeat", str(args.repeat))
                save = _median([max(r["save"][i] for r in rows) for i in range(args.repeat)])  # slowest rank
                restore = _median([max(r["restore"][i] for r in rows) for i in range(args.repeat)])
                print(f"| FSDP2 4 ranks {args.size:.0f} MB | {method} | save {save:.2f} s | "
                      f"restore {restore:.2f} s | {rows[0]['bytes'] / 1e6:.0f} MB on disk | "
                      f"peak RSS/rank save {max(r['save_rss_mb'] for r in rows):.0f} MB, restore "
                      f"{max(r['restore_rss_mb'] for r in rows):.0f} MB |", flush=True)
        if args.only in (None, "jax"):
            out = jax_run(args, workdir)
            for method in ("varstore", "orbax"):
                print(f"| JAX 8 devices {args.size:.0f} MB ({out['arrays']} arrays) | {method} | save "
                      f"{_median(out[method + '_save']):.2f} s | restore into P(None, 'x') "
                      f"{_median(out[method + '_restore']):.2f} s | "
                      f"{out[method + '_bytes'] / 1e6:.0f} MB on disk | peak RSS save "
                      f"{out[method + '_save_rss_mb']:.0f} MB, restore {out[method + '_restore_rss_mb']:.0f} MB |",
                      flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

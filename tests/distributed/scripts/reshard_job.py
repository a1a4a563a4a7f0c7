"""Run by tests/distributed/test_checkpoint_mpi.py under `mpiexec -n 4`: collective save on N ranks, restore on M.

For every N in 1..4 the first N ranks (a sub-communicator) build a job with an
N-part embedding on N ps tasks, set known values and save it collectively
(HDF5 and Zarr); then for every M in 1..4 the first M ranks restore each file
into an M-part job. Every rank prints one JSON line with what it found.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import varstore as vs

world = MPI.COMM_WORLD
out = Path(sys.argv[1])
ROWS, COLS = 10, 3
EXPECTED = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
KERNEL = np.full((4, 4), 0.5, dtype=np.float32)
result: dict = {"rank": world.rank, "checks": {}, "errors": {}}


def build(comm, parts: int) -> vs.VariableStore:
    store = vs.VariableStore()
    with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
        with store.variable_scope("model"):
            store.get_variable("embedding", [ROWS, COLS], partitioner=vs.fixed_size_partitioner(parts))
            store.get_variable("dense/kernel", [4, 4])
    store.get_variable("global_step", [], dtype=np.int64, trainable=False)
    store.initialize(comm=comm)
    return store


def sub(size: int):
    return world.Split(0 if world.rank < size else MPI.UNDEFINED, world.rank)


for n in range(1, 5):
    comm = sub(n)
    if comm != MPI.COMM_NULL:
        store = build(comm, n)
        for v in store.variables():
            if not v.is_owned:
                continue
            info = v.save_slice_info
            if info is not None:
                v.assign(EXPECTED[info.var_offset[0]:info.var_offset[0] + v.shape[0]])
            elif v.name == "model/dense/kernel":
                v.assign(KERNEL)
            else:
                v.assign(n)
        for suffix in ("h5", "zarr"):
            path = vs.save(out / f"saved-by-{n}.{suffix}", store, comm=comm, step=n)
        if n == 2:  # the replicas of global_step diverge: every rank raises, nothing is written
            step = {v.name: v for v in store.variables()}["global_step"]
            step.assign(100 + comm.rank)
            try:
                vs.save(out / "diverged.h5", store, comm=comm, check_replicas=True)
            except vs.ReplicaDivergenceError as err:
                result["replica_error"] = str(err)
            result["diverged_written"] = (out / "diverged.h5").exists()
        comm.Free()
    world.Barrier()

for m in range(1, 5):
    comm = sub(m)
    if comm != MPI.COMM_NULL:
        for n in range(1, 5):
            for suffix in ("h5", "zarr"):
                store = build(comm, m)
                lazy = (n + m) % 2 == 1
                res = vs.restore(out / f"saved-by-{n}.{suffix}", store, comm=comm, strict=True, lazy=lazy)
                ok = True
                for v in store.variables():
                    if not v.is_owned:
                        continue
                    info = v.save_slice_info
                    want = (EXPECTED[info.var_offset[0]:info.var_offset[0] + v.shape[0]] if info is not None
                            else KERNEL if v.name == "model/dense/kernel" else np.int64(n))
                    ok = ok and np.array_equal(v.numpy(), want)
                result["checks"][f"{n}->{m}.{suffix}"] = ok
        # a wrong shape: every rank raises the same error
        store = vs.VariableStore()
        with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
            with store.variable_scope("model"):
                store.get_variable("embedding", [ROWS + 1, COLS], partitioner=vs.fixed_size_partitioner(m))
        store.initialize(comm=comm)
        try:
            vs.restore(out / "saved-by-2.h5", store, comm=comm)
        except vs.VarstoreError as err:
            result["errors"][str(m)] = f"{type(err).__name__}: {err}"
        comm.Free()
    world.Barrier()

# a rank that cannot produce its value mid-save: every rank raises its error, nothing is committed
comm = sub(2)
if comm != MPI.COMM_NULL:
    source = out / "lazy-source.h5"
    if comm.rank == 0:
        shutil.copyfile(out / "saved-by-2.h5", source)
    comm.Barrier()
    store = build(comm, 2)
    vs.restore(source, store, comm=comm, lazy=True)  # values stay on disk until used
    if comm.rank == 0:
        reader = vs.checkpoint.open_varstore(source)
        cut = reader.record("model/embedding").file_offset + 5 * COLS * 4  # rank 1's part starts here
        reader.close()
        os.truncate(source, cut)
    comm.Barrier()
    try:
        vs.save(out / "failed.h5", store, comm=comm)
    except vs.VarstoreError as err:
        result["save_error"] = f"{type(err).__name__}: {err}"
    result["failed_left"] = sorted(p.name for p in out.iterdir() if p.name.startswith("failed"))
    comm.Free()
world.Barrier()

print(json.dumps(result))

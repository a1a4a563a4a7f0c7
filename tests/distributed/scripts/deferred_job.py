"""Run by tests/distributed/test_checkpoint_mpi.py under mpiexec -n 2: deferred restore into parts spread over ranks.

A 2-part embedding is saved collectively; a new store restores it BEFORE the
embedding exists, then creates it with 3 parts on tasks 0, 1, 0. Each rank
prints one JSON line: its parts' values, which parts it allocated, and how
often the initializer ran. argv[1] = working directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import varstore as vs

comm = MPI.COMM_WORLD
workdir = Path(sys.argv[1])
FULL = np.arange(40, dtype=np.float32).reshape(10, 4)
calls = []


def counting(shape, dtype=None):
    calls.append(shape)
    return np.full(shape, -7.0, dtype=dtype)


def build(store: vs.VariableStore, parts: int) -> vs.PartitionedVariable:
    with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
        with store.variable_scope("model"):
            return store.get_variable("embedding", [10, 4], initializer=counting,
                                      partitioner=vs.fixed_size_partitioner(parts))


store = vs.VariableStore()
emb = build(store, 2)
store.initialize(comm=comm)
for part in emb:
    if part.is_owned:
        part.assign(FULL[part.save_slice_info.index])
calls.clear()
result: dict = {"rank": comm.rank}
for suffix, bind_first in (("h5", False), ("zarr", True)):
    path = vs.save(workdir / f"model.{suffix}", store, comm=comm)
    again = vs.VariableStore()
    if bind_first:  # bound before the restore: non-owned parts drop their source as they are created
        again.initialize(comm=comm)
    deferred = vs.restore(path, again, comm=comm).deferred
    parts = build(again, 3)
    again.initialize(comm=comm)
    result[suffix] = {
        "deferred": deferred,
        "values": {p.name: p.numpy().tolist() for p in parts if p.is_owned},
        "expected": {p.name: FULL[p.save_slice_info.index].tolist() for p in parts if p.is_owned},
        "allocated": sorted(p.name for p in parts if p.is_allocated),
    }
result["initializer_calls"] = len(calls)
print(json.dumps(result))

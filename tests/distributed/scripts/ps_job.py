"""Run by tests/distributed/test_mpi.py under mpiexec: the issue's parameter-server job, checked on every rank.

Prints one JSON line per rank with what it observed. argv[1] = number of embedding parts.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

import varstore as vs
from varstore import distributed

comm = MPI.COMM_WORLD
parts = int(sys.argv[1])
result: dict = {"rank": comm.rank, "size": comm.size}
vs.set_random_seed(42)


def build(store: vs.VariableStore, parts: int, rows: int = 12) -> vs.PartitionedVariable:
    with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
        with store.variable_scope("model"):
            emb = store.get_variable("embedding", [rows, 4], partitioner=vs.fixed_size_partitioner(parts))
            store.get_variable("dense/kernel", [4, 4])
    store.get_variable("global_step", [], dtype=np.int64, trainable=False)
    return emb


store = vs.VariableStore()
emb = build(store, parts)
store.initialize(comm=comm)
result["owned"] = sorted(v.name for v in store.variables() if v.is_owned)
result["initialized"] = sorted(v.name for v in store.variables() if v.is_initialized)
result["uninitialized"] = store.report_uninitialized()
result["owners"] = {v.name: v.owner_rank for v in store.variables()}
not_owned = [v for v in store.variables() if not v.is_owned]
if not_owned:
    try:
        not_owned[0].numpy()
    except vs.NotOwnedError as err:
        result["not_owned_error"] = str(err)

# every rank sends its parts' values; rank 0 rebuilds the whole embedding
mine = {p.save_slice_info.var_offset[0]: p.numpy().tolist() for p in emb if p.is_owned}
gathered = distributed.as_communicator(comm).allgather({str(k): v for k, v in mine.items()})
pieces = {int(k): np.array(v, dtype=np.float32) for g in gathered for k, v in g.items()}
whole = np.concatenate([pieces[k] for k in sorted(pieces)])
reference = vs.VariableStore()
with reference.variable_scope("model"):
    single = reference.get_variable("embedding", [12, 4]).numpy()
result["embedding_matches_one_process"] = bool(np.array_equal(whole, single))
result["embedding_sum"] = float(whole.astype(np.float64).sum())

distributed.check_structure(store, comm)  # same structure: passes on every rank
result["replicas_ok"] = True
distributed.check_replicas(store, comm)

# a rank-dependent structure: every rank raises the same error
other = vs.VariableStore()
build(other, parts, rows=12 + (comm.rank == comm.size - 1))
try:
    distributed.check_structure(other, comm)
except vs.DistributedMismatchError as err:
    result["structure_error"] = str(err)

# replicas that diverged
store.get_variable_by_name("global_step").assign(comm.rank)
result["step_checksums"] = distributed.replica_checksums(store, comm)["global_step"]
try:
    distributed.check_replicas(store, comm)
except vs.ReplicaDivergenceError as err:
    result["replica_error"] = str(err)

# a task no rank owns
bad = vs.VariableStore()
with vs.device(f"/job:ps/task:{comm.size}"):
    bad.get_variable("orphan", [2])
try:
    bad.initialize(comm=comm)
except vs.DeviceError as err:
    result["task_error"] = str(err)

# collectives through the Communicator, and a sub-communicator
c = distributed.as_communicator(comm)
result["allreduce"] = [c.allreduce(comm.rank + 1), c.allreduce(comm.rank, "max"), c.allreduce(float(comm.rank), "min")]
result["allreduce_array"] = c.allreduce(np.array([comm.rank, 1], dtype=np.int64)).tolist()
result["bcast"] = c.bcast({"from": comm.rank}, root=comm.size - 1)
result["gather"] = c.gather(comm.rank * 10, root=0)
sub = c.split(comm.rank % 2)
result["sub"] = [sub.rank, sub.size, sub.allgather(comm.rank)]
sub_store = vs.VariableStore()
with vs.device(vs.replica_device_setter(ps_tasks=sub.size)):
    sub_store.get_variable("w", [3 + comm.rank % 2])
distributed.check_structure(sub_store, comm.Split(comm.rank % 2))  # any mpi4py communicator
sub_store.initialize(comm=sub)
result["sub_owned"] = [v.name for v in sub_store.variables() if v.is_owned]
c.barrier()
print(json.dumps(result), flush=True)

"""Run by tests/distributed/test_checkpoint_mpi.py under `mpiexec -n 2`: a CheckpointManager job.

argv: directory, phase. Phase "save": save step 1, then rank 1 SIGKILLs itself
mid-way through saving step 2 (VARSTORE_FAULT=after_data, after its data
went out). Phase "resume": a new job restores the latest checkpoint, then
saves step 3 (which sweeps the dead job's temporaries). One JSON line per rank.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import varstore as vs

comm = MPI.COMM_WORLD
directory, phase = Path(sys.argv[1]), sys.argv[2]
store = vs.VariableStore()
with vs.device(vs.replica_device_setter(ps_tasks=comm.size)):
    emb = store.get_variable("embedding", [8, 2], partitioner=vs.fixed_size_partitioner(comm.size))
step = store.get_variable("global_step", [], dtype=np.int64, trainable=False)
store.initialize(comm=comm)
manager = vs.CheckpointManager(directory, max_to_keep=2, comm=comm)
result: dict = {"rank": comm.rank}


def set_values(value: int) -> None:
    for part in emb.variables:
        if part.is_owned:
            part.assign(np.full(part.shape, value, dtype=np.float32))
    step.assign(value)


if phase == "save":
    set_values(1)
    result["saved"] = str(manager.save(store, 1))
    print(json.dumps(result), flush=True)
    set_values(2)
    if comm.rank == 1:
        os.environ["VARSTORE_FAULT"] = "after_data"
    manager.save(store, 2)
    print(json.dumps({"rank": comm.rank, "unreachable": True}), flush=True)
else:
    restored = manager.restore_latest(store)
    result["restored"] = sorted(restored.restored) if restored else None
    result["values"] = sorted({float(p.numpy()[0, 0]) for p in emb.variables if p.is_owned}) + [int(step.numpy())]
    result["temporaries_before"] = sorted(n for n in os.listdir(directory) if ".tmp-" in n)
    comm.Barrier()
    set_values(3)
    result["saved"] = str(manager.save(store, 3))
    result["temporaries_after"] = sorted(n for n in os.listdir(directory) if ".tmp-" in n)
    result["checkpoints"] = [p.name for p in manager.checkpoints]
    print(json.dumps(result), flush=True)

"""Run by tests/frameworks/test_torch_sharded.py as 4 torch.distributed ranks (gloo on 127.0.0.1): sharded state.

argv: directory. Every value is a deterministic function of its name
(`full`), so each rank checks its own shards bit-exactly. One job (each job
costs seconds of interpreter and torch start-up per rank): restore the
one-process plain.h5 into DTensors (1 -> 4; Shard(0), Shard(1), Replicate(),
uneven and empty shards); save four.h5 from them with a plain tensor and
non-tensor leaves; restore four.h5 on a 2x2 mesh and with Shard(1); an FSDP2 model + Adam state saved to fsdp.h5
(rank 0 writes the gathered values to fsdp_expected.npz), restored into an
HSDP (2x2) model with other values; exercise TorchCommunicator (messages
longer than its first frame too); last, a CheckpointManager job whose rank 3
SIGKILLs itself in the middle of saving step 2. One JSON line per rank.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

import varstore as vs
import varstore.torch as vst
from _sharded_values import SHAPES, full  # this folder: first on sys.path

directory = Path(sys.argv[1])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
result: dict = {"rank": rank}



def nest(leaves: dict) -> dict:
    out: dict = {}
    for name, value in leaves.items():
        node = out
        *scopes, last = name.split("/")
        for scope in scopes:
            node = node.setdefault(int(scope) if scope.isdigit() else scope, {})
        node[last] = value
    return out


def sharded(placements: dict, mesh, fill=None) -> dict:
    return {name: distribute_tensor(full(name) if fill is None else torch.full(SHAPES[name][0], fill).to(SHAPES[name][1]),
                                    mesh, placements[name]) for name in placements}


def exact(leaves: dict) -> bool:
    """Every local shard equals the same box of the deterministic full value."""
    return all(torch.equal(t.to_local(), distribute_tensor(full(n), t.device_mesh, t.placements).to_local())
               for n, t in leaves.items())


mesh4 = init_device_mesh("cpu", (4,))
placements = {"model/w": [Shard(0)], "model/v": [Shard(1)], "model/b": [Replicate()], "model/odd": [Shard(0)],
              "model/tiny": [Shard(0)], "optim/state/0/exp_avg": [Shard(1)]}
# 1 -> 4: the one-process checkpoint into zeroed DTensors, in place (odd: 2, 2, 1, 0 rows; tiny: rank 0's row only)
leaves = sharded(placements, mesh4, fill=0)
pointers = {n: t.to_local().data_ptr() for n, t in leaves.items()}
target = nest(leaves)
target["optim"]["state"][0]["step"] = torch.tensor(0.0)
restored = vst.restore(directory / "plain.h5", target)
result["from_plain"] = {"restored": sorted(restored.restored), "exact": exact(leaves),
                        "in_place": all(t.to_local().data_ptr() == pointers[n] for n, t in leaves.items()),
                        "step": float(target["optim"]["state"][0]["step"])}
# 4 ranks save: each writes its own shards, the replicated ones once
state = nest(sharded(placements, mesh4))
state["optim"]["state"][0]["step"] = torch.tensor(5.0)
state["optim"]["param_groups"] = [{"lr": 0.1, "params": [0]}]
result["saved"] = str(vst.save(directory / "four.h5", state, step=2, metadata={"run": "four"}))
# 4 -> other layouts: a 2x2 mesh (2-way shards, replicated pairs), Shard(1)
mesh2 = init_device_mesh("cpu", (2, 2))
other = {"model/w": [Shard(0), Shard(1)], "model/v": [Replicate(), Shard(0)], "model/b": [Shard(0), Replicate()],
         "model/odd": [Shard(0), Shard(0)], "model/tiny": [Replicate(), Replicate()],
         "optim/state/0/exp_avg": [Shard(1), Replicate()]}
leaves = sharded(other, mesh2, fill=0)
target = nest(leaves)
target["optim"]["state"][0]["step"] = torch.tensor(0.0)
restored = vst.restore(directory / "four.h5", target)
result["from_four_2x2"] = {"restored": len(restored.restored), "exact": exact(leaves),
                           "step": float(target["optim"]["state"][0]["step"])}
columns = {"model/w": distribute_tensor(torch.zeros(6, 4), mesh4, [Shard(1)])}
vst.restore(directory / "four.h5", nest(columns), strict=False)
result["from_four_shard1"] = {"exact": exact(columns), "local": list(columns["model/w"].to_local().shape)}
# FSDP2: parameters and Adam state, 4 ranks -> one checkpoint -> an HSDP model
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402


def trained(seed: int, mesh) -> tuple:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    return model, optimizer


model, optimizer = trained(0, mesh4)
msd, osd = get_state_dict(model, optimizer)
vst.save(directory / "fsdp.h5", {"model": msd, "optim": osd})
flat = {f"model/{k}": v for k, v in msd.items()}
flat.update({f"optim/state/{k}/{s}": v for k, d in osd["state"].items() for s, v in d.items()})
gathered = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in flat.items()}
if rank == 0:
    np.savez(directory / "fsdp_expected.npz", **{k.replace("/", "|"): v.numpy() for k, v in gathered.items()})
hsdp = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
model2, optimizer2 = trained(1, hsdp)
msd2, osd2 = get_state_dict(model2, optimizer2)
before = sum(torch.equal(v.full_tensor(), gathered[f"model/{k}"]) for k, v in msd2.items())
fsdp_result = vst.restore(directory / "fsdp.h5", {"model": msd2, "optim": osd2})
set_state_dict(model2, optimizer2, model_state_dict=msd2, optim_state_dict=osd2)
after = {f"model/{n}": p for n, p in model2.named_parameters()}
after.update({f"optim/state/{n}/{s}": v for n, p in model2.named_parameters() for s, v in optimizer2.state[p].items()})
result["fsdp"] = {"equal_before": int(before), "restored": len(fsdp_result.restored),
                  "placements": str(next(iter(msd2.values())).placements),
                  "exact": sorted(k for k, v in after.items() if torch.equal(
                      (v.full_tensor() if hasattr(v, "full_tensor") else v).detach(), gathered[k])),
                  "names": sorted(gathered)}
# the communicator itself; "x" * 3000 is longer than its first frame (2 KiB): a second collective carries the rest
comm = vst.TorchCommunicator()
half = comm.split(color=rank % 2, key=-rank)
long = "x" * 3000 + str(rank)
result["comm"] = {"allgather": comm.allgather({"r": rank}), "gather": comm.gather(rank * 10, root=1),
                  "bcast": comm.bcast(f"from {rank}", root=1),
                  "long": [comm.allgather(long) == ["x" * 3000 + str(r) for r in range(size)],
                           comm.bcast(long, root=2) == "x" * 3000 + "2",
                           comm.gather(long, root=0) == (["x" * 3000 + str(r) for r in range(size)] if rank == 0 else None)],
                  "sum": comm.allreduce(np.array([rank, 1.5])).tolist(), "max": comm.allreduce(rank, "max"),
                  "split": [half.rank, half.size], "as": type(vs.distributed.as_communicator(dist.group.WORLD)).__name__}
# kill one rank mid-save: the previous checkpoint stays the latest, the survivors get a typed error
manager = vs.CheckpointManager(directory / "managed", max_to_keep=3, comm=dist.group.WORLD)
shards = vst.sharded_state(state)
result["managed"] = str(manager.save(shards, 1))
print(json.dumps(result), flush=True)
if rank == 3:
    os.environ["VARSTORE_FAULT"] = "after_data"
started = time.monotonic()
try:
    manager.save(shards, 2)
    result["failure"] = None
except vs.VarstoreError as err:
    result["failure"] = {"type": type(err).__name__, "message": str(err)[:300],
                         "seconds": round(time.monotonic() - started, 2)}
print(json.dumps(result), flush=True)
os._exit(0)  # the process group lost a peer: skip its teardown

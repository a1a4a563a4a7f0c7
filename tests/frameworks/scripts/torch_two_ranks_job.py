"""Run by tests/frameworks/test_torch_sharded.py as 2 torch.distributed ranks (gloo on 127.0.0.1) after the 4-rank job.

argv: directory. Restores the checkpoint 4 ranks wrote (four.h5) and the one-process plain.h5 onto a
world of 2 ranks (4 -> 2 and 1 -> 2) with Shard(0), Shard(1) and Replicate() placements, in place;
every local shard is compared bit-exactly with the same box of the deterministic full value
(torch_sharded_job.full). One JSON line per rank.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

import varstore.torch as vst
from _sharded_values import SHAPES, full  # this folder: first on sys.path

directory = Path(sys.argv[1])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()


mesh = init_device_mesh("cpu", (2,))
placements = {"model/w": [Shard(1)], "model/v": [Shard(0)], "model/b": [Shard(0)], "model/odd": [Shard(0)],
              "model/tiny": [Replicate()], "optim/state/0/exp_avg": [Shard(0)]}
result: dict = {"rank": rank}
for source in ("four.h5", "plain.h5"):
    leaves = {n: distribute_tensor(torch.zeros(SHAPES[n][0]).to(SHAPES[n][1]), mesh, p) for n, p in placements.items()}
    pointers = {n: t.to_local().data_ptr() for n, t in leaves.items()}
    target = {"model": {n.split("/")[1]: leaves[n] for n in leaves if n.startswith("model/")},
              "optim": {"state": {0: {"exp_avg": leaves["optim/state/0/exp_avg"], "step": torch.tensor(0.0)}}}}
    restored = vst.restore(directory / source, target, strict=False)
    result[source] = {
        "restored": len(restored.restored),
        "exact": all(torch.equal(t.to_local(), distribute_tensor(full(n), mesh, t.placements).to_local())
                     for n, t in leaves.items()),
        "in_place": all(t.to_local().data_ptr() == pointers[n] for n, t in leaves.items()),
        "local_w": list(leaves["model/w"].to_local().shape),
        "step": float(target["optim"]["state"][0]["step"]),
    }
print(json.dumps(result), flush=True)
dist.barrier()  # no rank tears gloo down while the other still talks to it
dist.destroy_process_group()
# gloo's threads can still be joinable when the interpreter's static teardown runs, which aborts the process
# ("terminate called without an active exception", exit -6) after the work is done and printed: skip it
os._exit(0)

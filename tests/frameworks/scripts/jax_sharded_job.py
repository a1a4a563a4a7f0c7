"""Run by tests/frameworks/test_jax_sharded.py: sharded jax.Arrays on forced host devices, one checkpoint.

argv: directory, mode. Mode "one": one process with 8 CPU devices saves a
(4, 2) mesh's NamedSharding arrays (sharded, replicated along an axis, fully
replicated) to one.h5 and restores them into other shardings of a (2, 4)
mesh. Mode "multi" (2 processes x 4 devices under jax.distributed on
127.0.0.1, gloo CPU collectives; argv also: process id, port): both
processes save one array sharded over all 8 devices to multi.h5 and restore
it transposed onto the mesh. One JSON line per process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

directory, mode = Path(sys.argv[1]), sys.argv[2]
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=" + ("8" if mode == "one" else "4")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import varstore.jax as vsj  # noqa: E402

result: dict = {}


def equal(a, b) -> bool:
    return bool(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)))


if mode == "one":
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    w = jnp.arange(16 * 6, dtype=jnp.float32).reshape(16, 6) / 3
    tree = {"params": {"w": jax.device_put(w, NamedSharding(mesh, P("data", "model"))),
                       "b": jax.device_put(jnp.arange(6, dtype=jnp.bfloat16) / 7, NamedSharding(mesh, P(None))),
                       "e": jax.device_put(jnp.arange(40, dtype=jnp.int32).reshape(8, 5), NamedSharding(mesh, P("data")))},
            "step": 3}
    result["saved"] = str(vsj.save(directory / "one.h5", tree))
    mesh2 = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))
    like = {"params": {"w": jax.ShapeDtypeStruct((16, 6), jnp.float32, sharding=NamedSharding(mesh2, P("b", "a"))),
                       "b": jax.ShapeDtypeStruct((6,), jnp.bfloat16, sharding=NamedSharding(mesh2, P("a"))),
                       "e": jax.ShapeDtypeStruct((8, 5), jnp.int32, sharding=NamedSharding(mesh2, P(("a", "b"))))},
            "step": 0}
    out = vsj.restore(directory / "one.h5", like)
    result["restored"] = {name: equal(out["params"][name], tree["params"][name]) for name in ("w", "b", "e")}
    result["shardings"] = [str(out["params"]["w"].sharding.spec), str(out["params"]["e"].sharding.spec)]
    result["step"] = out["step"]
    result["shard_shapes"] = sorted({tuple(s.data.shape) for s in out["params"]["w"].addressable_shards})
    np.save(directory / "one_w.npy", np.asarray(tree["params"]["w"]))
else:
    process, port = int(sys.argv[3]), sys.argv[4]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process)
    comm = vsj.JaxCommunicator()
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("x",))
    full = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) * 1.5
    sharding = NamedSharding(mesh, P("x"))
    array = jax.make_array_from_callback(full.shape, sharding, lambda index: full[index])
    result["saved"] = str(vsj.save(directory / "multi.h5", {"w": array, "n": np.int64(7)}, comm=comm))
    mesh2 = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))
    like = {"w": jax.ShapeDtypeStruct(full.shape, jnp.float32, sharding=NamedSharding(mesh2, P("b", "a"))),
            "n": np.int64(0)}
    out = vsj.restore(directory / "multi.h5", like, comm=comm)
    result["process"] = [comm.rank, comm.size, jax.process_count(), len(jax.local_devices())]
    result["local_exact"] = all(equal(s.data, full[s.index]) for s in out["w"].addressable_shards)
    result["n"] = int(out["n"])
    comm.barrier()
print(json.dumps(result), flush=True)

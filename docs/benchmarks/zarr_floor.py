"""How close a cold read of a per-variable Zarr checkpoint is to reading its files at all.

Issue 11's targets 1 and 2 ask a cold W1 read of a Zarr checkpoint for at most 1.1x the time of
h5py's `read_direct` of one contiguous HDF5 file. A per-variable Zarr v3 checkpoint is one folder
per array with a `zarr.json` and a chunk file each, plus a `zarr.json` per group: W1 is about
1,000 files where HDF5 is one. This script measures the floor that layout sets on this disk:
the same files read with plain `open().read()` (one thread, then a pool of threads), with no
parsing and no copy into destination arrays, beside h5py's `read_direct` of the same arrays in
one plain HDF5 file and varstore's own cold reads of both formats.

Every case runs once per round, in the same order, each after the page cache is emptied
(`drop_caches` as root, else POSIX_FADV_DONTNEED on every file read); rounds repeat and the
table gives medians and minima, and each median's ratio to h5py's.

    python docs/benchmarks/zarr_floor.py [--scale 0.25] [--rounds 5] [--workdir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _methods import files_under  # noqa: E402  (sibling modules of this script)
from _worker import _cold_cache as cold_cache  # noqa: E402
from _workloads import w1_arrays  # noqa: E402


def _read_file(path: Path) -> int:
    with open(path, "rb", buffering=0) as f:
        return len(f.read())


def _read_files(files: list[Path], threads: int) -> int:
    if threads == 1:
        return sum(map(_read_file, files))
    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(_read_file, files))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.25, help="W1 bytes x scale (384 variables at any scale)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every case (default 5)")
    p.add_argument("--workdir", type=Path, default=None, help="parent of the temporary folder (default /tmp)")
    args = p.parse_args(argv)

    import h5py

    import varstore as vs

    arrays = w1_arrays(args.scale)
    nbytes = sum(a.nbytes for a in arrays.values())
    work = Path(tempfile.mkdtemp(prefix="varstore-zarr-floor-", dir=args.workdir))
    try:
        zarr_path, h5_path, plain_path = work / "model.zarr", work / "model.h5", work / "plain.h5"
        vs.save(zarr_path, arrays)
        vs.save(h5_path, arrays)
        with h5py.File(plain_path, "w") as f:
            for name, value in arrays.items():
                f[name] = value
        zarr_files = sorted(files_under(zarr_path))
        dests = {name: np.ones_like(value) for name, value in arrays.items()}  # resident, as run.py's h5py cell

        def h5py_read_direct() -> None:
            with h5py.File(plain_path, "r") as f:
                for name, dest in dests.items():
                    f[name].read_direct(dest)

        def read_all() -> dict[str, Any]:
            with vs.open_checkpoint(zarr_path) as ck:
                return {name: ck[name] for name in ck.keys()}

        cases: list[tuple[str, Path, Callable[[], object]]] = [
            ("h5py read_direct, plain HDF5 (the target's baseline)", plain_path, h5py_read_direct),
            ("varstore restore, HDF5", h5_path, lambda: vs.restore(h5_path, dests)),
            (f"Zarr files, open+read, 1 thread ({len(zarr_files)} files)", zarr_path,
             lambda: _read_files(zarr_files, 1)),
            ("Zarr files, open+read, 8 threads", zarr_path, lambda: _read_files(zarr_files, 8)),
            ("Zarr files, open+read, 32 threads", zarr_path, lambda: _read_files(zarr_files, 32)),
            ("varstore restore, Zarr", zarr_path, lambda: vs.restore(zarr_path, dests)),
            ("varstore open_checkpoint + ck[name] for all, Zarr", zarr_path, read_all),
        ]
        seconds: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        how = set()
        for _ in range(args.rounds):
            for name, where, run in cases:
                how.add(cold_cache(where, "drop"))  # drop_caches as root, else fadvise on its files
                start = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(seconds[cases[0][0]])
    print(f"W1 at scale {args.scale}: {len(arrays)} float32 variables, {nbytes / 1e6:.0f} MB; "
          f"{args.rounds} rounds, page cache emptied before every case ({', '.join(sorted(how))})")
    print()
    print("| case | median s | min s | x h5py read_direct |")
    print("| --- | ---: | ---: | ---: |")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {min(values):.3f} | {median / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

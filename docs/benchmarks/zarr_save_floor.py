"""How close a durable Zarr save of W1 is to writing its files at all, and what deleting the last one costs.

Issue 11's target 4 asks a durable Zarr save of W1 for at most 1.3x the time of varstore's durable
HDF5 save. A per-variable Zarr v3 checkpoint is one folder per array and per group, each with a
`zarr.json`, and a chunk file per array: W1 is about 650 folders and 1,040 files where HDF5 is one
file. This script measures the floor that layout sets: the same folders and files (same sizes),
written by plain Python (folders first, then the files from 4 threads) and made durable with one
syncfs, beside varstore's durable saves of both formats.

Every case runs in two conditions, once each per round:
  - "after deleting its last output": the case's previous output is deleted just before, then
    `sync`, as `run.py` does before every timed save;
  - "after deleting one file": the previous output is moved aside (deleted at the end) and a single
    file of the model's size is written, synced and deleted just before, so the same amount of page
    cache is freed but no inodes are.
The two differ for many-file layouts on a file system that avoids reusing inodes deleted moments
ago: ext4 without a journal skips every inode deleted in the last 60 s when it allocates one
(`recently_deleted` in fs/ext4/ialloc.c), so each new file walks past the ~1,700 just freed.

    python docs/benchmarks/zarr_save_floor.py [--scale 0.25] [--rounds 5] [--workdir /tmp]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _workloads import w1_arrays  # noqa: E402  (a sibling module of this script)

CONDITIONS = ("after deleting its last output", "after deleting one file")


def _syncfs(path: Path) -> None:
    """syncfs(2) of the file system holding `path`; os.sync() where the C library has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if function(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed", str(path))
    finally:
        os.close(fd)


def _tree(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """The folders (parents first) and (file, size) pairs under `root`, relative to it."""
    folders, files = [], []
    for here, _, names in os.walk(root):
        relative = os.path.relpath(here, root)
        if relative != ".":
            folders.append(relative)
        files += [(os.path.join(relative, name), os.path.getsize(os.path.join(here, name))) for name in names]
    folders.sort(key=lambda folder: folder.count(os.sep))
    return folders, files


def _plain_writer(folders: list[str], files: list[tuple[str, int]]) -> Callable[[Path], None]:
    payload = np.random.default_rng(1).bytes(max((size for _, size in files), default=0))

    def write(root: Path) -> None:
        root.mkdir()
        for folder in folders:
            (root / folder).mkdir()

        def one(item: tuple[str, int]) -> None:
            with open(root / item[0], "wb") as handle:
                handle.write(payload[:item[1]])

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, files))
        _syncfs(root)

    return write


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=0.25, help="W1 bytes x scale (384 variables at any scale)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of every case and condition (default 5)")
    p.add_argument("--workdir", type=Path, default=None, help="parent of the temporary folder (default /tmp)")
    args = p.parse_args(argv)

    import varstore as vs

    arrays = w1_arrays(args.scale)
    nbytes = sum(a.nbytes for a in arrays.values())
    work = Path(tempfile.mkdtemp(prefix="varstore-zarr-save-floor-", dir=args.workdir))
    try:
        sample = work / "sample.zarr"
        vs.save(sample, arrays)
        folders, files = _tree(sample)
        _remove(sample)
        ballast = np.random.default_rng(2).bytes(nbytes)
        aside = work / "aside"
        aside.mkdir()
        cases: list[tuple[str, str, Callable[[Path], object]]] = [
            ("varstore save, HDF5 (the target's baseline)", ".h5", lambda path: vs.save(path, arrays)),
            ("varstore save, Zarr", ".zarr", lambda path: vs.save(path, arrays)),
            (f"plain files of the Zarr layout ({len(folders) + 1} folders, {len(files)} files), one syncfs",
             "", _plain_writer(folders, files)),
        ]
        seconds: dict[tuple[str, str], list[float]] = {(c, n): [] for c in CONDITIONS for n, _, _ in cases}
        cpu: dict[tuple[str, str], list[float]] = {key: [] for key in seconds}
        moved = 0
        for _ in range(args.rounds):
            for condition in CONDITIONS:
                for index, (name, suffix, write) in enumerate(cases):
                    out = work / f"case{index}{suffix}"
                    if condition == CONDITIONS[0]:
                        _remove(out)
                    else:
                        if out.exists():
                            moved += 1
                            out.rename(aside / str(moved))
                        spare = work / "one-file"
                        with open(spare, "wb") as handle:
                            handle.write(ballast)
                        os.sync()
                        spare.unlink()
                    os.sync()
                    start, times = time.perf_counter(), os.times()
                    write(out)
                    seconds[(condition, name)].append(time.perf_counter() - start)
                    after = os.times()
                    cpu[(condition, name)].append(after.user - times.user + after.system - times.system)
                # the set-aside outputs stay until the end: deleting them now would free inodes again
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"W1 at scale {args.scale}: {len(arrays)} float32 variables, {nbytes / 1e6:.0f} MB; durable saves; "
          f"{args.rounds} rounds")
    print()
    print("| condition | case | median s | min s | x varstore HDF5 | CPU s (all threads, median) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for condition in CONDITIONS:
        base = statistics.median(seconds[(condition, cases[0][0])])
        for name, _, _ in cases:
            values = seconds[(condition, name)]
            median = statistics.median(values)
            print(f"| {condition} | {name} | {median:.3f} | {min(values):.3f} | {median / base:.2f}x "
                  f"| {statistics.median(cpu[(condition, name)]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

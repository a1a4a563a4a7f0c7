"""The floors of the two W1 cells that miss issue 39's targets: the same bytes through the same system calls,
without varstore, beside varstore and the peer, in one run.

Everything on a tmpfs (`/dev/shm`, removed at the end, also on failure), one process (imports untimed),
process CPU time (user + sys of every thread) and wall time, medians over rotated rounds after one
unrecorded warm-up round; every file is
written anew each round (which physical pages a tmpfs file gets is a draw that moves the cost of reading it).

Part 1, W1 save (target: <= 1.10x safetensors): safetensors' `save_file`; the values alone (one `pwrite`
each into one file); the values with their crc32c (1 MiB pieces, each checksummed just before its
`pwrite`, as `LocalWriter.write_at_digest`); HDF5's and Zarr's metadata alone (varstore's backend writers
making W1's 75 arrays with varstore's attributes, no values); varstore's saves with and without checksums.
"floor" rows add the parts a checksummed checkpoint of each format cannot do without.

Part 2, W1 restore into the caller's arrays (target for Zarr: <= 1.25x h5py `read_direct`): h5py
`read_direct` from an h5py file (the peer); varstore's HDF5 and Zarr restores into materialized variables
(NumPy arrays 16 bytes past a page, as cpu.py's restore cell); and the Zarr checkpoint's own chunk files
read with `preadv` and checksummed in 1 MiB pieces into the same kind of arrays, then into page-aligned
ones. Every file is read once, untimed, before a round's cells (a first read of fresh pages costs more).
Every value is checked.

    python docs/benchmarks/floors.py                   # 10 rounds, W1 (318 MiB)
    python docs/benchmarks/floors.py --rounds 3 --scale 0.25
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu import _resident_zeros, _vs_store, tmpfs_scratch, workload  # noqa: E402  (the same W1 and destinations)

PIECE = 1 << 20  # as DIGEST_PIECE_BYTES
ATTRS = {"trainable": True, "collections": ["trainable_variables", "variables"], "dtype": "float32"}


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _pieces_with_crc(fd: int, value: np.ndarray, at: int, write: bool) -> int:
    from varstore.checkpoint.format.checksum import crc32c_raw

    view, crc = memoryview(value.reshape(-1).view(np.uint8)), 0
    for start in range(0, len(view), PIECE):
        piece = view[start:start + PIECE]
        if write:
            crc = crc32c_raw(piece, crc)
            os.pwrite(fd, piece, at + start)
        else:
            os.preadv(fd, [piece], at + start)
            crc = crc32c_raw(piece, crc)
    return crc


def _read_once(root: Path) -> None:
    """Reads every file under `root` once, untimed: the first read of freshly written pages costs more (W1
    restored three times in a row: HDF5 90 / 68 / 65 ms, Zarr 99 / 86 / 82), and would fall on whichever cell
    reads first in a round."""
    buffer = bytearray(PIECE)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(file, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


def save_cells(arrays: dict[str, np.ndarray]) -> dict[str, Callable[[Path], Any]]:
    import varstore as vs
    from safetensors.numpy import save_file

    from varstore.backends.hdf5.store import Hdf5Writer
    from varstore.backends.zarr3.store import Zarr3Writer

    def raw(path: Path, crc: bool = False) -> None:
        fd, at = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 0
        for value in arrays.values():
            if crc:
                _pieces_with_crc(fd, value, at, write=True)
            else:
                os.pwrite(fd, value, at)
            at += value.nbytes
        os.close(fd)

    def metadata(writer: Any) -> None:
        for name, value in arrays.items():
            writer.create_array(name, value.dtype, value.shape, ATTRS, hold_attrs=True)
        for name in arrays:
            writer.add_attrs(name, {"checksum": "crc32c:00000000"})
        writer.close()

    return {
        "safetensors save_file": lambda p: save_file(arrays, str(p)),
        "values alone (pwrite)": raw,
        "values + crc32c (1 MiB pieces)": lambda p: raw(p, crc=True),
        "HDF5 metadata alone": lambda p: metadata(Hdf5Writer(p)),
        "Zarr metadata alone": lambda p: metadata(Zarr3Writer(p)),
        "varstore h5": lambda p: vs.save(p.with_suffix(".h5"), arrays, durable=False),
        "varstore h5, checksum=False": lambda p: vs.save(p.with_suffix(".h5"), arrays, durable=False, checksum=False),
        "varstore zarr": lambda p: vs.save(p.with_suffix(".zarr"), arrays, durable=False),
        "varstore zarr, checksum=False": lambda p: vs.save(p.with_suffix(".zarr"), arrays, durable=False,
                                                           checksum=False),
    }


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu0, time.perf_counter() - wall0


def _table(cells: list[str], cpu: dict[str, list[float]], wall: dict[str, list[float]], best: str,
           floors: dict[str, list[str]]) -> list[str]:
    med = {c: statistics.median(cpu[c]) for c in cells}
    lines = ["| cell | CPU ms | CPU min ms | wall ms | CPU vs " + best + " |", "| --- | ---: | ---: | ---: | ---: |"]
    for c in cells:
        lines.append(f"| {c} | {med[c] * 1e3:.1f} | {min(cpu[c]) * 1e3:.1f} | {statistics.median(wall[c]) * 1e3:.1f} "
                     f"| {med[c] / med[best]:.2f}x |")
    for name, parts in floors.items():
        total = sum(med[p] for p in parts)
        lines.append(f"| floor: {name} | {total * 1e3:.1f} |  |  | {total / med[best]:.2f}x |")
    return lines


def save_part(root: Path, rounds: int, scale: float) -> list[str]:
    arrays = workload("W1", scale)
    cells = save_cells(arrays)
    names = list(cells)
    cpu: dict[str, list[float]] = {c: [] for c in names}
    wall: dict[str, list[float]] = {c: [] for c in names}
    for r in range(rounds + 1):  # round 0 is a warm-up (imports, first calls), not recorded
        for c in names[r % len(names):] + names[:r % len(names)]:
            path = root / "save.bin"
            c_s, w_s = _timed(lambda: cells[c](path))
            if r:
                cpu[c].append(c_s)
                wall[c].append(w_s)
            for each in (path, path.with_suffix(".h5"), path.with_suffix(".zarr")):
                _remove(each)  # untimed
    return _table(names, cpu, wall, "safetensors save_file", {
        "values + crc32c + HDF5 metadata": ["values + crc32c (1 MiB pieces)", "HDF5 metadata alone"],
        "values + crc32c + Zarr metadata": ["values + crc32c (1 MiB pieces)", "Zarr metadata alone"]})


def restore_part(root: Path, rounds: int, scale: float) -> list[str]:
    import h5py

    import varstore as vs
    from varstore.store.host_arrays import host_empty
    from varstore.store.variable_batches import host_views

    arrays = workload("W1", scale)
    stores = {fmt: _vs_store(arrays, True) for fmt in ("h5", "zarr")}
    peer = {name: _resident_zeros(v.shape, v.dtype) for name, v in arrays.items()}
    misaligned = {name: _resident_zeros(v.shape, v.dtype) for name, v in arrays.items()}
    aligned = {name: host_empty(v.shape, v.dtype) for name, v in arrays.items()}
    for value in aligned.values():
        value.fill(0)
    chunk_files = {name: Path(name, ".".join("0" * v.ndim) or "0") for name, v in arrays.items()}

    def chunks_into(destinations: dict[str, np.ndarray]) -> None:
        for name, out in destinations.items():
            fd = os.open(root / "w1.zarr" / chunk_files[name], os.O_RDONLY)
            _pieces_with_crc(fd, out, 0, write=False)
            os.close(fd)

    def h5py_read_direct() -> None:
        with h5py.File(root / "peer.h5", "r") as f:
            for name, out in peer.items():
                f[name].read_direct(out)

    cells: dict[str, Callable[[], Any]] = {
        "h5py read_direct": h5py_read_direct,
        "varstore h5 restore": lambda: vs.restore(root / "w1.h5", stores["h5"]),
        "varstore zarr restore": lambda: vs.restore(root / "w1.zarr", stores["zarr"]),
        "zarr chunk files + crc32c, same kind of arrays": lambda: chunks_into(misaligned),
        "zarr chunk files + crc32c, page-aligned arrays": lambda: chunks_into(aligned),
    }
    names = list(cells)
    cpu: dict[str, list[float]] = {c: [] for c in names}
    wall: dict[str, list[float]] = {c: [] for c in names}
    for r in range(rounds + 1):  # round 0 is a warm-up, not recorded
        for each in ("peer.h5", "w1.h5", "w1.zarr"):
            _remove(root / each)
        with h5py.File(root / "peer.h5", "w") as f:
            for name, value in arrays.items():
                f.create_dataset(name, data=value)
        vs.save(root / "w1.h5", arrays, durable=False)
        vs.save(root / "w1.zarr", arrays, durable=False)
        _read_once(root)
        for c in names[r % len(names):] + names[:r % len(names)]:
            c_s, w_s = _timed(cells[c])
            if r:
                cpu[c].append(c_s)
                wall[c].append(w_s)
    got = [peer, misaligned, aligned] + [{v.name: out for v, out in zip(s.global_variables(), host_views(
        list(s.global_variables())))} for s in stores.values()]
    if not all(np.array_equal(each[name], value) for each in got for name, value in arrays.items()):
        raise AssertionError("a restored value differs from the saved one")
    return _table(names, cpu, wall, "h5py read_direct", {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--parts", default="save,restore", help="a subset of save,restore")
    args = p.parse_args(argv)
    with tmpfs_scratch("varstore-floors-") as root:
        print(f"Floors: tmpfs, W1 at scale {args.scale}, {args.rounds} rotated rounds, process CPU medians; "
              f"{os.cpu_count()} CPUs\n")
        if "save" in args.parts:
            print("\n".join(save_part(root, args.rounds, args.scale)) + "\n")
        if "restore" in args.parts:
            print("\n".join(restore_part(root, args.rounds, args.scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

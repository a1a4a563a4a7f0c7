"""Smoke test of docs/benchmarks/run.py: a tiny run in a subprocess yields the expected table and files.

No timing assertions: only that every method/workload/phase is there, numbers are
positive, loaded bytes were checked against the source, and W4 ran no initializer.
The every-cell run uses --smoke (one worker process per method); the interleaved
run goes through the real path, a fresh worker process per cell.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "docs" / "benchmarks"
sys.path.insert(0, str(BENCH))

from _workloads import w1_layout, w2_layout


def _varstore_checkpoint_ready() -> bool:
    try:
        from varstore import restore, save  # noqa: F401
    except ImportError:
        return False
    return True


def test_w1_layout_is_a_1_2_gb_transformer_at_full_scale():
    layout = w1_layout(1.0)
    names = [n for n, _ in layout]
    nbytes = sum(math.prod(s) for _, s in layout) * 4
    assert len(layout) == 384 and len(set(names)) == 384
    assert nbytes == 24 * (12 * 1024 * 1024 + 13 * 1024) * 4 == 1_209_237_504
    assert dict(layout)["layer_03/attn/q/kernel"] == (1024, 1024)
    assert dict(layout)["layer_23/mlp/up/kernel"] == (1024, 4096)
    assert dict(layout)["layer_00/ln_2/beta"] == (1024,)


def test_scale_shrinks_bytes_but_keeps_w1_names():
    small = w1_layout(0.01)
    assert [n for n, _ in small] == [n for n, _ in w1_layout(1.0)]
    assert dict(small)["layer_03/attn/q/kernel"] == (102, 102)
    assert len(w2_layout(1.0)) == 50_000 and w2_layout(1.0)[7] == ("small/v000007", (64,))
    assert len(w2_layout(0.001)) == 50


def test_tiny_run_writes_every_cell(tmp_path):
    methods = ["raw", "h5py", "npz", "safetensors", "varstore-h5"]
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--smoke", "--scale", "0.001", "--repeat", "1",
         "--process-repeat", "2",
         "--methods", ",".join(methods), "--cache", "fadvise",
         "--workdir", str(tmp_path / "work"), "--out-dir", str(out)],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "median s" in proc.stdout and "peak RSS MiB" in proc.stdout

    data = json.loads((out / "results.json").read_text())
    skipped = {s["method"] for s in data["skipped"]}
    ran = [m for m in methods if m not in skipped]
    if _varstore_checkpoint_ready():
        assert "varstore-h5" in ran
    assert {"raw", "h5py", "npz"} <= set(ran)

    cells = {(r["method"], r["workload"], r["phase"]): r for r in data["results"]}
    for m in ran:
        expected = [("W1", "save"), ("W1", "save-nofsync"), ("W1", "load"), ("W3", "read-one"),
                    ("W2", "save"), ("W2", "save-nofsync"), ("W2", "load")]
        if m.startswith("varstore"):
            expected += [("W4", "restore"), ("W2", "restore")]
        for workload, phase in expected:
            row = cells[(m, workload, phase)]
            assert row["repeats"] == 1
            assert row["median_s"] > 0 and row["gb_per_s"] > 0 and row["bytes"] > 0
            assert row["peak_rss_mib"] >= 0
            assert row["ratio_to_raw"] > 0
            if phase in ("load", "read-one", "restore"):
                assert row["verified"] is True
                assert row["cache"] == ["fadvise"]
            if phase == "restore":
                assert row["initializer_calls"] == 0
    assert cells[("raw", "W1", "save")]["ratio_to_raw"] == 1.0
    # the cheap whole-process cells get --process-repeat runs, every other cell --repeat
    assert cells[("raw", "W3", "import")]["repeats"] == 2
    if "varstore-h5" in ran:
        assert cells[("varstore-h5", "W3", "process")]["repeats"] == 2
        assert cells[("varstore-h5", "W3", "import")]["repeats"] == 2
    assert cells[("raw", "W1", "save")]["bytes"] == 24 * (12 * 32 * 32 + 13 * 32) * 4  # hidden 32
    assert cells[("raw", "W3", "read-one")]["bytes"] == 32 * 32 * 4
    assert cells[("raw", "W2", "load")]["bytes"] == 50 * 64 * 4
    assert data["meta"]["scale"] == 0.001 and data["meta"]["repeat"] == 1 and data["meta"]["process_repeat"] == 2
    assert data["meta"]["smoke"] is True

    md = (out / "results.md").read_text()
    assert "| raw | W1 | save |" in md
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not any((tmp_path / "work").iterdir()), "the run must clean up its temporary folder"


def test_unknown_method_is_rejected(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--methods", "nope",
                           "--out-dir", str(tmp_path)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown methods ['nope']" in proc.stderr


def test_smoke_run_never_writes_the_documented_results():
    before = (BENCH / "results.json").read_bytes()
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--smoke", "--methods", "raw"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--smoke measures nothing: give --out-dir" in proc.stderr
    assert (BENCH / "results.json").read_bytes() == before


def test_interleave_runs_repeats_round_robin(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--scale", "0.001", "--repeat", "2", "--interleave",
         "--methods", "raw,npz", "--workloads", "W1", "--cache", "fadvise",
         "--workdir", str(tmp_path / "work"), "--out-dir", str(out)],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = [line.split(":")[0].split() for line in proc.stdout.splitlines() if " #" in line and " s  peak" in line]
    assert [(r[0], r[2], r[3]) for r in runs] == [
        (m, phase, f"#{rep}") for phase in ("save", "save-nofsync", "load") for rep in (0, 1)
        for m in ("raw", "npz")]
    data = json.loads((out / "results.json").read_text())
    cells = {(r["method"], r["workload"], r["phase"]): r for r in data["results"]}
    for m in ("raw", "npz"):
        for phase in ("save", "save-nofsync", "load"):
            assert cells[(m, "W1", phase)]["repeats"] == 2
    assert cells[("npz", "W1", "load")]["verified"] is True
    assert data["meta"]["smoke"] is False  # the real path: a fresh worker process per cell
    assert not any((tmp_path / "work").iterdir()), "the run must clean up its temporary folder"


def test_zarr_floor_prints_every_case(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "zarr_floor.py"), "--scale", "0.001", "--rounds", "1",
                           "--workdir", str(tmp_path)], check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0] for row in rows][1:] == [
        "| h5py read_direct, plain HDF5 (the target's baseline)", "| varstore restore, HDF5",
        "| Zarr files, open+read, 1 thread (1036 files)", "| Zarr files, open+read, 8 threads",
        "| Zarr files, open+read, 32 threads", "| varstore restore, Zarr",
        "| varstore open_checkpoint + ck[name] for all, Zarr"]
    assert rows[1][-1] == "1.00x |"
    assert "384 float32 variables" in proc.stdout
    assert not any(tmp_path.iterdir()), "the script must remove its temporary folder"


def test_gpu_benchmark_runs_or_says_why_not(tmp_path):
    """Without CuPy and a device: one line saying target 8 was not measured; with them: every table, a JSON file."""
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(BENCH / "gpu.py"), "--scale", "0.002", "--repeat", "1",
                           "--workdir", str(tmp_path), "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if proc.stdout.startswith("no CuPy or no CUDA device here"):
        assert proc.stdout.strip() == "no CuPy or no CUDA device here: target 8 not measured" and not out.exists()
        return
    cells = json.loads(out.read_text())
    assert cells["variables"] == 384 and cells["h2d_pinned_s"][0] > 0
    assert "| h5: into CuPy variables, in place | warm" in proc.stdout
    assert not [p for p in tmp_path.iterdir() if p != out], "the run must clean up its temporary folder"


def test_zarr_save_floor_prints_every_case_in_both_conditions(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / "zarr_save_floor.py"), "--scale", "0.001", "--rounds", "1",
                           "--workdir", str(tmp_path)], check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [(row[0], row[1]) for row in rows][1:] == [
        (f"| {condition}", case) for condition in ("after deleting its last output", "after deleting one file")
        for case in ("varstore save, HDF5 (the target's baseline)", "varstore save, Zarr",
                     "plain files of the Zarr layout (651 folders, 1036 files), one syncfs")]
    assert rows[1][4] == "1.00x" and rows[4][4] == "1.00x"
    assert "384 float32 variables" in proc.stdout
    assert not any(tmp_path.iterdir()), "the script must remove its temporary folder"


def test_cpu_benchmark_checks_every_value_and_leaves_its_tmpfs_folder_empty(tmp_path):
    """docs/benchmarks/cpu.py (issue 39) in --smoke form: every cell of every method runs, every loaded value
    matches its source, the table names the best peer of each varstore cell, and /dev/shm keeps nothing."""
    shm = Path("/dev/shm")
    before = set(shm.iterdir()) if shm.is_dir() else set()
    out = tmp_path / "cpu.json"
    proc = subprocess.run([sys.executable, str(BENCH / "cpu.py"), "--smoke", "--scale", "0.002", "--rounds", "1",
                           "--methods", "varstore-h5,varstore-zarr,h5py,safetensors", "--json", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {(c["method"], c["phase"], c["workload"]) for c in json.loads(out.read_text())}
    for work in ("W1", "W2"):
        for method in ("varstore-h5", "varstore-zarr", "h5py", "safetensors"):
            assert (method, "save", work) in cells and (method, "load", work) in cells
        assert ("varstore-h5", "restore", work) in cells and ("h5py", "restore", work) in cells
    assert ("varstore-zarr", "restore-lazy", "W2") in cells and ("safetensors", "restore-lazy", "W2") in cells
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| W")]
    assert rows and all(line.rstrip().endswith("| ok |") for line in rows)
    assert any("x safetensors |" in line for line in rows if "| varstore-h5 |" in line)
    if shm.is_dir():
        assert not {p for p in shm.iterdir() if p.name.startswith("varstore-cpu-")} - before


def _cpu_benchmark():
    spec = importlib.util.spec_from_file_location("cpu_benchmark", BENCH / "cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_benchmark_phases_select_cells_with_a_peer():
    cpu = _cpu_benchmark()
    cells = cpu._cells(["W1", "W2"], ["varstore-h5", "h5py", "safetensors"], ("restore", "restore-lazy"))
    assert cells == [("varstore-h5", "restore", "W1"), ("h5py", "restore", "W1"),
                     ("varstore-h5", "restore", "W2"), ("h5py", "restore", "W2"),
                     ("varstore-h5", "restore-lazy", "W2"), ("safetensors", "restore-lazy", "W2")]
    assert all(cell[1] != "save" for cell in cells)


def test_cpu_benchmark_tiny_run_checks_every_value(tmp_path):
    if not _varstore_checkpoint_ready():
        return
    proc = subprocess.run(
        [sys.executable, str(BENCH / "cpu.py"), "--scale", "0.001", "--rounds", "1", "--workloads", "W2",
         "--methods", "varstore-h5,safetensors", "--phases", "save,restore-lazy", "--json", str(tmp_path / "c.json")],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads((tmp_path / "c.json").read_text())
    assert sorted((r["method"], r["phase"]) for r in runs) == [
        ("safetensors", "restore-lazy"), ("safetensors", "save"), ("varstore-h5", "restore-lazy"), ("varstore-h5", "save")]
    assert all(run["ok"] and run["cpu_s"] > 0 and run["wall_s"] > 0 for r in runs for run in r["runs"])
    assert "| W2 | restore-lazy | varstore-h5 |" in proc.stdout


def test_copy_alignment_prints_the_matrix_and_the_checked_a_b_and_leaves_its_tmpfs_folder_empty():
    """docs/benchmarks/copy_alignment.py (issue 39, seventh pass) at a tiny scale: every (file offset, destination)
    pair of part 1 and every (format, phase, alignment) cell of part 2, each value checked, its tmpfs folder removed."""
    shm = Path("/dev/shm")
    proc = subprocess.run([sys.executable, str(BENCH / "copy_alignment.py"), "--rounds", "1", "--engine-rounds", "1",
                           "--scale", "0.002"], check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    matrix = [(row[0], row[1]) for row in rows if len(row) == 4][1:]
    assert matrix == [(f"| {f}", str(d)) for f in (0, 16, 64, 512) for d in (0, 16, 64)]
    engine = [row for row in rows if len(row) == 9][1:]
    assert [(row[0], row[1], row[2]) for row in engine] == [
        (f"| {fmt}", phase, kind) for fmt in ("h5", "zarr") for phase in ("load", "restore-lazy")
        for kind in ("aligned", "np.empty")]
    assert all(row[8] == "ok |" for row in engine) and all(row[7] == "1.00x" for row in engine[1::2])
    assert not (shm.is_dir() and list(shm.glob("varstore-align-*")))


def test_floors_prints_every_cell_with_its_floor_checks_the_values_and_leaves_its_tmpfs_folder_empty():
    """docs/benchmarks/floors.py (issue 39, eighth pass) at a tiny scale: the save cells with the two floor rows
    (the parts a checksummed checkpoint of each format cannot do without), the restore cells, the values checked."""
    shm = Path("/dev/shm")
    proc = subprocess.run([sys.executable, str(BENCH / "floors.py"), "--rounds", "1", "--scale", "0.002"],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    cells = [row[0][2:] for row in rows if row[0] != "| cell"]
    assert cells == [
        "safetensors save_file", "values alone (pwrite)", "values + crc32c (1 MiB pieces)", "HDF5 metadata alone",
        "Zarr metadata alone", "varstore h5", "varstore h5, checksum=False", "varstore zarr",
        "varstore zarr, checksum=False", "floor: values + crc32c + HDF5 metadata",
        "floor: values + crc32c + Zarr metadata", "h5py read_direct", "varstore h5 restore", "varstore zarr restore",
        "zarr chunk files + crc32c, same kind of arrays", "zarr chunk files + crc32c, page-aligned arrays"]
    medians = {row[0][2:]: float(row[1]) for row in rows if row[0] != "| cell"}
    assert medians["floor: values + crc32c + HDF5 metadata"] == pytest.approx(
        medians["values + crc32c (1 MiB pieces)"] + medians["HDF5 metadata alone"], abs=0.11)
    assert [row[-1] for row in rows if row[0][2:] in ("safetensors save_file", "h5py read_direct")] == ["1.00x |"] * 2
    assert not (shm.is_dir() and list(shm.glob("varstore-floors-*")))

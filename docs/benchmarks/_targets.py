"""Issue 11's targets: each ratio computed from one run's summary rows, beside its goal.

Every target divides two medians of the same run (see README.md, "Targets").
A target whose cells did not run (method skipped or left out) says so.
Runs no benchmark; knows only the rows `_report.summarize` makes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["targets", "format_targets", "markdown_targets"]


def _median(rows: dict[tuple[str, str, str], dict[str, Any]], key: tuple[str, str, str]) -> float | None:
    row = rows.get(key)
    return None if row is None else float(row["median_s"])


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{target, what, ratio, goal, op, met}] for every ratio issue 11 asks for that this run measured.

    `op` is "<=" (time ratio at most the goal) or ">=" (throughput ratio at least the goal).
    """
    cells = {(r["method"], r["workload"], r["phase"]): r for r in rows}
    out: list[dict[str, Any]] = []

    def add(target: str, what: str, num: tuple[str, str, str], den: tuple[str, str, str] | list[tuple[str, str, str]],
            goal: float, op: str = "<=", invert: bool = False) -> None:
        a = _median(cells, num)
        dens = den if isinstance(den, list) else [den]
        values = [v for v in (_median(cells, d) for d in dens) if v is not None]
        if a is None or len(values) != len(dens) or not a or not min(values):
            out.append({"target": target, "what": what, "ratio": None, "goal": goal, "op": op, "met": None})
            return
        b = min(values)  # against several peers: the fastest
        ratio = b / a if invert else a / b
        met = ratio <= goal if op == "<=" else ratio >= goal
        out.append({"target": target, "what": what, "ratio": ratio, "goal": goal, "op": op, "met": met})

    h5py_load = ("h5py", "W1", "load")
    for fmt in ("h5", "zarr"):
        m = f"varstore-{fmt}"
        add("1", f"W1 open_checkpoint + ck[name] for all ({fmt}) / h5py read_direct", (m, "W1", "read-all"),
            h5py_load, 1.1)
    add("2", "W1 restore, cold (h5) / h5py read_direct", ("varstore-h5", "W1", "load"), h5py_load, 0.9)
    add("2", "W1 vs.load, cold (h5) / h5py read_direct", ("varstore-h5", "W1", "vs-load"), h5py_load, 0.9)
    add("2", "W1 restore, cold (zarr) / h5py read_direct", ("varstore-zarr", "W1", "load"), h5py_load, 1.1)
    add("2", "W1 vs.load, cold (zarr) / h5py read_direct", ("varstore-zarr", "W1", "vs-load"), h5py_load, 1.1)
    for fmt in ("h5", "zarr"):
        row = cells.get((f"varstore-{fmt}", "W1", "load"))
        if row is not None and row.get("peak_rss_vs_bytes") is not None:
            ratio = float(row["peak_rss_vs_bytes"])
            out.append({"target": "2", "what": f"W1 restore peak RSS / model bytes ({fmt})", "ratio": ratio,
                        "goal": 1.1, "op": "<=", "met": ratio <= 1.1})
    st_load, st_save = ("safetensors", "W2", "load"), ("safetensors", "W2", "save")
    for fmt in ("h5", "zarr"):
        m = f"varstore-{fmt}"
        add("3", f"W2 vs.load ({fmt}) / safetensors load_file", (m, "W2", "vs-load"), st_load, 1.2)
        add("3", f"W2 restore ({fmt}) / safetensors load_file", (m, "W2", "load"), st_load, 1.2)
        add("3", f"W2 restore into a new model ({fmt}) / safetensors load_file", (m, "W2", "restore"), st_load, 1.2)
        add("3", f"W2 open_checkpoint loop ({fmt}) / safetensors load_file", (m, "W2", "read-all"), st_load, 1.2)
        add("3", f"W2 durable save ({fmt}) / safetensors save_file + fsync", (m, "W2", "save"), st_save, 1.2)
        add("3", f"W2 keys()+info() ({fmt}) / safetensors header parse", (m, "W2", "keys-info"),
            ("safetensors", "W2", "keys-info"), 2.0)
    add("4", "W1 durable save: zarr / h5", ("varstore-zarr", "W1", "save"), ("varstore-h5", "W1", "save"), 1.3)
    for fmt in ("h5", "zarr"):
        add("5", f"W1 save(durable=False) ({fmt}): raw tofile time / varstore time",
            (f"varstore-{fmt}", "W1", "save-nofsync"), ("raw", "W1", "save-nofsync"), 0.9, ">=", invert=True)
    for fmt in ("h5", "zarr"):
        add("6", f"fresh process to first array ({fmt}) / fastest of h5py, safetensors",
            (f"varstore-{fmt}", "W3", "process"), [("h5py", "W3", "process"), ("safetensors", "W3", "process")], 1.0)
    add("6", "import varstore / import numpy (fresh processes, whole)", ("varstore-h5", "W3", "import"),
        ("raw", "W3", "import"), 1.3)
    ts = [r for r in rows if r["method"] == "tensorstore"]
    out.append({"target": "7", "what": "tensorstore (zarr3 driver) in the table as a peer", "ratio": None,
                "goal": None, "op": "", "met": bool(ts), "note": f"{len(ts)} cells" if ts else "not run"})
    out.append({"target": "8", "what": "GPU restore / non-blocking save from CuPy", "ratio": None, "goal": None,
                "op": "", "met": None, "note": "measured by gpu.py, on a machine with a GPU (README: GPU section)"})
    return out


def _cells(t: dict[str, Any]) -> list[str]:
    ratio = f"{t['ratio']:.2f}x" if t["ratio"] is not None else "-"
    goal = f"{t['op']} {t['goal']:.2f}x" if t.get("goal") is not None else "-"
    met = {True: "met", False: "MISSED", None: t.get("note") or "not measured"}[t["met"]]
    if t["met"] is not None and t.get("note"):
        met += f" ({t['note']})"
    return [t["target"], t["what"], ratio, goal, met]


HEADER = ["target", "what", "ratio", "goal", "result"]


def format_targets(goals: list[dict[str, Any]]) -> str:
    """Plain-text table of every target's ratio beside its goal."""
    cells = [HEADER] + [_cells(t) for t in goals]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["Targets (issue 11): ratios of medians from this run"]
    for n, c in enumerate(cells):
        lines.append("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_targets(goals: list[dict[str, Any]]) -> str:
    """The same as Markdown."""
    out = ["| " + " | ".join(HEADER) + " |", "|---|---|---:|---|---|"]
    out += ["| " + " | ".join(_cells(t)) + " |" for t in goals]
    return "\n".join(out)

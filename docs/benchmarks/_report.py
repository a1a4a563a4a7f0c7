"""Benchmark report: summarizes raw measurements into rows, prints the table, writes JSON/Markdown/PNG.

Takes the per-repeat results that run.py collected; computes medians, min-max,
throughput and the ratio to the raw limit measured in the same run. Runs no
benchmark and touches no checkpoint.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from _targets import markdown_targets

__all__ = ["format_table", "summarize", "write_chart", "write_json", "write_markdown"]

MIB = 1024 * 1024
GB = 1e9

PHASE_ORDER = {"save": 0, "save-nofsync": 1, "load": 2, "vs-load": 3, "read-all": 4, "keys-info": 5,
               "read-one": 6, "process": 7, "import": 8, "restore": 9}
# Which raw figure a row is compared with: W4 (restore of W1) against raw's W1 load; every read of a
# workload against raw's load of it.
_RAW_REFERENCE = {("W4", "restore"): ("W1", "load"), ("W1", "read-all"): ("W1", "load"),
                  ("W1", "vs-load"): ("W1", "load"), ("W2", "read-all"): ("W2", "load"),
                  ("W2", "vs-load"): ("W2", "load"), ("W2", "restore"): ("W2", "load")}


def summarize(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Groups repeat results by (method, workload, phase) into one row each, with ratios to raw."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault((s["method"], s["workload"], s["phase"]), []).append(s)
    rows = []
    for (method, workload, phase), runs in groups.items():
        times = [r["seconds"] for r in runs]
        median = statistics.median(times)
        nbytes = runs[0]["bytes"]
        calls = [r["initializer_calls"] for r in runs if r.get("initializer_calls") is not None]
        rows.append({
            "method": method,
            "workload": workload,
            "phase": phase,
            "repeats": len(runs),
            "times_s": times,
            "median_s": median,
            "min_s": min(times),
            "max_s": max(times),
            "bytes": nbytes,
            "gb_per_s": nbytes / median / GB if median > 0 else None,
            "peak_rss_mib": max(r["peak_rss_bytes"] for r in runs) / MIB,
            "extra_rss_mib": max(r["extra_rss_bytes"] for r in runs) / MIB,
            "peak_rss_vs_bytes": max(r["peak_rss_bytes"] for r in runs) / nbytes if nbytes else None,
            "initializer_calls": max(calls) if calls else None,
            "cache": sorted({r["cache"] for r in runs if r.get("cache")}) or None,
            "verified": any(r.get("verified") for r in runs),
            "ratio_to_raw": None,
        })
    raw = {(r["workload"], r["phase"]): r for r in rows if r["method"] == "raw"}
    for row in rows:
        key = _RAW_REFERENCE.get((row["workload"], row["phase"]), (row["workload"], row["phase"]))
        ref = raw.get(key)
        if ref and ref["gb_per_s"] and row["gb_per_s"]:
            row["ratio_to_raw"] = row["gb_per_s"] / ref["gb_per_s"]
    rows.sort(key=lambda r: (r["workload"], PHASE_ORDER.get(r["phase"], 9), r["median_s"]))
    return rows


def _fmt_s(x: float) -> str:
    return f"{x:.3f}" if x >= 0.0995 else f"{x * 1000:.1f}ms"


def _cells(row: dict[str, Any]) -> list[str]:
    note = []
    if row["initializer_calls"] is not None:
        note.append(f"init calls {row['initializer_calls']}")
    if row["peak_rss_vs_bytes"] is not None and row["phase"] in ("load", "restore"):
        note.append(f"RSS {row['peak_rss_vs_bytes']:.2f}x model")
    return [
        row["method"], row["workload"], row["phase"],
        _fmt_s(row["median_s"]),
        f"{_fmt_s(row['min_s'])}-{_fmt_s(row['max_s'])}",
        f"{row['gb_per_s']:.3f}" if row["gb_per_s"] is not None else "-",
        f"{row['peak_rss_mib']:.0f}",
        f"{row['ratio_to_raw']:.2f}x" if row["ratio_to_raw"] is not None else "-",
        ", ".join(note),
    ]


HEADER = ["method", "workload", "phase", "median s", "min-max s", "GB/s", "peak RSS MiB", "vs raw", "notes"]


def format_table(rows: list[dict[str, Any]]) -> str:
    """The plain-text table printed at the end of a run."""
    cells = [HEADER] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(x.ljust(w) if i < 3 or i == 8 else x.rjust(w)
                               for i, (x, w) in enumerate(zip(c, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The same table as Markdown."""
    out = ["| " + " | ".join(HEADER) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 5 + ["---"]) + "|"]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(out)


def write_json(path: Path, meta: dict[str, Any], rows: list[dict[str, Any]],
               skipped: list[dict[str, str]], samples: list[dict[str, Any]]) -> None:
    """results.json: run metadata, summary rows, skipped methods, every repeat's raw result."""
    path.write_text(json.dumps({"meta": meta, "results": rows, "skipped": skipped, "samples": samples},
                               indent=1) + "\n")


def write_markdown(path: Path, meta: dict[str, Any], rows: list[dict[str, Any]],
                   skipped: list[dict[str, str]], chart: str | None) -> None:
    """results.md: how the run was made, the table, what was skipped."""
    lines = [
        "# varstore benchmark results",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; machine: {meta['machine']}  ",
        f"Versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}  ",
        f"Page cache before each load: {meta['cache']}; repeats: {meta['repeat']} "
        f"(fewer where a cell passed the {meta['budget_s']:.0f} s budget).",
        "",
        "Workloads: " + "; ".join(f"{k}: {v}" for k, v in meta["workloads"].items()),
        "",
        markdown_table(rows),
        "",
        "Targets (issue 11): every ratio is of two medians of this run; time ratios are at most the "
        "goal, `save(durable=False)` is raw's time over varstore's (at least the goal).",
        "",
        markdown_targets(meta.get("targets") or []),
        "",
        "- `save` is durable (every file and folder fsynced inside the timed region); "
        "`save-nofsync` is the same write without fsync (varstore: `save(..., durable=False)`; the system is "
        "synced before the next run).",
        "- GB/s is 10^9 bytes of float32 values over the median; `vs raw` divides by the raw "
        "method's GB/s for the same workload and phase (W4 against raw's W1 load).",
        "- " + meta["rss_note"],
    ]
    if meta.get("notes"):
        lines += [f"- {n}" for n in meta["notes"]]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{s['method']} ({s['reason']})" for s in skipped)]
    if chart:
        lines += ["", f"![save and load throughput]({chart})"]
    path.write_text("\n".join(lines) + "\n")


def write_chart(path: Path, rows: list[dict[str, Any]], titles: dict[str, str]) -> str | None:
    """A PNG bar chart of W1 and W2 save/load throughput per method; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    phases = ["save", "save-nofsync", "load"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, workload in zip(axes, ["W1", "W2"]):
        sel = [r for r in rows if r["workload"] == workload and r["phase"] in phases]
        methods = sorted({r["method"] for r in sel}, key=lambda m: (m != "raw", m))
        if not methods:
            ax.set_visible(False)
            continue
        width = 0.8 / len(phases)
        for i, phase in enumerate(phases):
            values = []
            for m in methods:
                hit = [r for r in sel if r["method"] == m and r["phase"] == phase]
                values.append(hit[0]["gb_per_s"] if hit and hit[0]["gb_per_s"] else 0.0)
            xs = [j + (i - 1) * width for j in range(len(methods))]
            ax.bar(xs, values, width, label=phase)
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=30, ha="right")
        if workload == "W2":
            ax.set_yscale("log")  # per-variable overhead spans orders of magnitude
        ax.set_ylabel("GB/s (higher is better)" + (", log scale" if workload == "W2" else ""))
        ax.set_title(f"{workload}: {titles.get(workload, '')}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Durable save, non-durable save and cold load throughput (medians)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name

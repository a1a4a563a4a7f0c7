"""Prints every reliability figure: crash kills, truncations, bit flips, fuzzing, hostile input, memory, concurrency.

    python -m tests.reliability.figures            # the CI-sized run (about a minute)
    python -m tests.reliability.figures --full     # the documented full run (docs/reliability.md)

Run from the repository root. Prints a human-readable report and, with
--json PATH, writes every figure as JSON. The pytest suite in this folder
asserts the same campaigns at CI size; this runner only measures.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from . import _hostile as hostile
from ._concurrency import concurrency_campaign
from ._crash import crash_campaign
from ._damage import flip_campaign, truncation_campaign
from ._fuzz import TARGETS, campaign
from ._sources import describe, make_sources


def _hostile_figures(work: Path) -> dict[str, Any]:
    from .test_hostile import _no_sentinel, _values_of

    found: dict[str, Any] = {}
    for label, builder in hostile.OUTSIDE.items():
        folder = work / f"out{len(found)}"
        folder.mkdir()
        try:
            raw, errors, skipped = _values_of(builder(folder))
            found[label] = {"outside values returned": not _no_sentinel(raw), "typed errors": errors,
                            "skipped": skipped}
        except Exception as err:  # noqa: BLE001
            found[label] = {"untyped": f"{type(err).__name__}: {err}"}
    for label, builder in hostile.PICKLES.items():
        folder = work / f"pickle{len(found)}"
        folder.mkdir()
        marker = folder / "MARKER"
        path = builder(folder, marker)
        targets = [path, folder / "raw.pt"] if path.suffix == ".pt" else [path]
        outcomes = [_values_of(t)[1:] for t in targets]
        found[label] = {"executed": marker.exists(), "errors / skipped": outcomes}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full run (200 kills per format, every offset)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--only", nargs="*", help="sections: crash truncation flips fuzz hostile memory concurrency")
    args = parser.parse_args()
    full = args.full
    sections = set(args.only or ["crash", "truncation", "flips", "fuzz", "hostile", "memory", "concurrency"])
    figures: dict[str, Any] = {"form": "full" if full else "ci", "python": platform.python_version(),
                               "machine": platform.machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="varstore-reliability-") as tmp:
        work = Path(tmp)
        sources = make_sources(work / "sources")
        figures["sources"] = [json.loads(line) for line in describe(sources).splitlines()]

        def section(name: str, func: Any) -> None:
            if name not in sections:
                return
            started = time.monotonic()
            figures[name] = func()
            figures[f"{name}_seconds"] = round(time.monotonic() - started, 1)
            print(f"== {name} ({figures[f'{name}_seconds']} s)")
            print(json.dumps(figures[name], indent=1, default=str)[:6000], flush=True)

        section("crash", lambda: [crash_campaign(work / f"crash_{fmt}", fmt, 200 if full else 12, seed=11)
                                  for fmt in ("h5", "zarr")])
        section("truncation", lambda: truncation_campaign(sources, work / "trunc", None if full else 40, seed=12))
        section("flips", lambda: flip_campaign(sources, work / "flips", 200 if full else 12, seed=13))
        section("fuzz", lambda: [campaign(name, 2000 if full else 40) for name in TARGETS])
        section("hostile", lambda: _hostile_figures(work / "hostile_work") if (work / "hostile_work").mkdir() is None
                else None)

        def memory() -> dict[str, Any]:
            from .test_memory import huge_claim_results, rss_probe

            result: dict[str, Any] = {"huge_claims": {}}
            for label, found in huge_claim_results(work / "huge").items():
                result["huge_claims"][label] = {
                    "outcome": "crash" if found.get("crash") else found.get("read", {}).get("outcome"),
                    "error": found.get("read", {}).get("error"), "maxrss_mb": round(found.get("maxrss_kb", 0) / 1024, 1)}
            for fmt in ("h5", "zarr"):
                path = work / f"rss.{fmt}"
                result[f"rss_{fmt}"] = [rss_probe("save", fmt, path, 200), rss_probe("restore", fmt, path, 200)]
            return result

        section("memory", memory)
        section("concurrency", lambda: [concurrency_campaign(work / f"conc_{fmt}", fmt, 25 if full else 6)
                                        for fmt in ("h5", "zarr")])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()

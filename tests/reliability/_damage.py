"""Truncation and bit-flip campaigns over every source format, with their figures.

`truncation_campaign` cuts each file of each source at byte offsets (all of
them, or a sample) and `flip_campaign` flips single bits, in data regions
(the bytes of a variable's value) and anywhere else (metadata, padding).
Both run the damaged copies through _batch.run_cases and return counts
per source. Goals: every truncation gives a typed VarstoreError (or, for a
file varstore does not need, the exact original values); every data flip
in a checksummed format is a ChecksumError naming the variable, from
reading, from restore and from `varstore verify` (exit 2); every other flip
gives a typed error or exactly the original values. Never "wrong"
(partial or silently changed values), "untyped", a crash or a hang.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ._batch import run_cases, tally
from ._sources import CHECKSUMMED, Source, data_regions


def _offsets(size: int, cap: int | None, rng: random.Random) -> list[int]:
    """Every offset 0..size-1 when size <= cap (cap None: 64 KB), else a sample: the ends and random ones."""
    limit = 65536 if cap is None else cap
    if size <= limit:
        return list(range(size))
    count = 4096 if cap is None else cap
    ends = list(range(min(count // 4, size))) + list(range(max(0, size - count // 4), size))
    chosen = set(ends)
    while len(chosen) < min(count, size):
        chosen.add(rng.randrange(size))
    return sorted(chosen)


def truncation_cases(sources: list[Source], per_source: int | None, seed: int = 0) -> list[dict[str, Any]]:
    """Cases cutting every file of every source; `per_source` caps offsets per source (None: full form)."""
    rng = random.Random(seed)
    cases = []
    for source in sources:
        cap = None if per_source is None else max(3, per_source // len(source.files))
        for rel in source.files:
            size = (source.src / rel).stat().st_size
            for offset in _offsets(size, cap, rng):
                cases.append({"src": str(source.src), "open": source.open, "file": rel, "op": "truncate",
                              "offset": offset, "modes": ["read"], "label": source.label})
    return cases


def truncation_campaign(sources: list[Source], workdir: Path, per_source: int | None, *, seed: int = 0,
                        jobs: int = 2) -> dict[str, dict[str, Any]]:
    """{label: tally} of truncated copies (see _batch.tally)."""
    cases = truncation_cases(sources, per_source, seed)
    results = run_cases(cases, workdir, jobs=jobs)
    by_label: dict[str, list[dict[str, Any]]] = {}
    for case, result in zip(cases, results):
        by_label.setdefault(case["label"], []).append(result)
    return {label: tally(found) for label, found in by_label.items()}


def flip_cases(sources: list[Source], flips: int, seed: int = 0) -> list[dict[str, Any]]:
    """`flips` data-region flips (checksummed formats) and `flips` anywhere-else flips per source."""
    rng = random.Random(seed)
    cases = []
    for source in sources:
        regions = data_regions(source)
        inside: dict[str, set[int]] = {}
        for rel, spans in regions.items():
            inside[rel] = {b for start, stop, _ in spans for b in range(start, stop)}
        modes = ["read", "restore", "cli"] if source.own else ["read"]
        spans = [(rel, start, stop, name) for rel, items in regions.items() for start, stop, name in items]
        for _ in range(flips if spans else 0):
            rel, start, stop, name = rng.choice(spans)
            cases.append({"src": str(source.src), "open": source.open, "file": rel, "op": "flip",
                          "offset": rng.randrange(start, stop), "bit": rng.randrange(8), "modes": modes,
                          "label": source.label, "region": "data", "variable": name})
        sizes = {rel: (source.src / rel).stat().st_size for rel in source.files}
        sizes = {rel: size for rel, size in sizes.items() if size > len(inside.get(rel, ()))}
        weights = [size - len(inside.get(rel, ())) for rel, size in sizes.items()]
        for _ in range(flips if sizes else 0):
            rel = rng.choices(list(sizes), weights)[0]
            while True:
                offset = rng.randrange(sizes[rel])
                if offset not in inside.get(rel, ()):
                    break
            cases.append({"src": str(source.src), "open": source.open, "file": rel, "op": "flip",
                          "offset": offset, "bit": rng.randrange(8), "modes": ["read"],
                          "label": source.label, "region": "other"})
    return cases


def flip_campaign(sources: list[Source], workdir: Path, flips: int, *, seed: int = 0,
                  jobs: int = 2) -> dict[str, dict[str, Any]]:
    """{label: {"data": counts, "other": tally}}.

    "data" counts detected (read, restore and `varstore verify` all raised or
    exited 2 with a ChecksumError naming the variable) out of flips; "other"
    tallies flips outside value bytes (typed / exact / wrong / untyped / crashes / hangs).
    """
    cases = flip_cases(sources, flips, seed)
    results = run_cases(cases, workdir, jobs=jobs)
    figures: dict[str, dict[str, Any]] = {}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for case, result in zip(cases, results):
        label = case["label"]
        entry = figures.setdefault(label, {"data": {"flips": 0, "detected": 0, "misses": []}})
        if case["region"] == "other":
            grouped.setdefault(label, []).append(result)
            continue
        entry["data"]["flips"] += 1
        if case["label"] not in CHECKSUMMED:  # no checksum in the format: count what reading gave
            outcome = "crash" if result.get("crash") else "hang" if result.get("hang") else result["read"]["outcome"]
            entry["data"][outcome] = entry["data"].get(outcome, 0) + 1
            continue
        if _detected(case, result):
            entry["data"]["detected"] += 1
        else:
            entry["data"]["misses"].append({"case": {k: case[k] for k in ("file", "offset", "bit", "variable")},
                                            "result": result})
    for label, found in grouped.items():
        figures.setdefault(label, {"data": {"flips": 0, "detected": 0, "misses": []}})["other"] = tally(found)
    for entry in figures.values():
        entry["data"]["misses"] = entry["data"]["misses"][:5]
    return figures


def _detected(case: dict[str, Any], result: dict[str, Any]) -> bool:
    if result.get("crash") or result.get("hang"):
        return False
    name = case["variable"]
    for mode in ("read", "restore"):
        if mode in result:
            outcome = result[mode]
            if outcome["outcome"] != "typed" or outcome["error"] != "ChecksumError" or name not in outcome["message"]:
                return False
    if "cli" in result:
        cli = result["cli"]
        if cli["exit"] != 2 or name not in cli["output"] or cli.get("untyped"):
            return False
    return True

"""Subprocess worker: applies one damage to a copy of a checkpoint, parses it, reports the outcome.

Run as a script by tests/reliability/_batch.py (never imported by pytest):

    python _worker.py CASES.json START SCRATCH_DIR

CASES.json holds a list of cases; the worker handles cases[START:] in order,
printing one JSON line `{"start": i}` before case i and one result line
`{"done": i, ...}` after it, so the parent can tell which case crashed the
process (a C library abort, a segfault) or hung. A case:

    {"src": dir, "open": relative path to open in the copy ("" = the copy),
     "file": relative file to damage ("" = src itself is the file),
     "op": "truncate" | "flip" | "none", "offset": byte, "bit": 0-7,
     "modes": ["read"] and optionally "restore", "cli"}

"read" opens with varstore.open_checkpoint and reads every variable
(varstore checkpoints check crc32c on each read); "restore" restores a
varstore checkpoint into zero arrays; "cli" runs `varstore verify`. Each
mode's outcome is "typed" (a VarstoreError: its class and message), "exact"
(every name, dtype, shape and byte equal to the undamaged original),
"wrong" (values or names differ: partial or silently changed data) or
"untyped" (any other exception). Imports only varstore and the standard
library, so it runs from any working directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from varstore.errors import VarstoreError

_BASELINES: dict[str, dict[str, Any]] = {}


def _digest(value: np.ndarray) -> list[Any]:
    value = np.asarray(value, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    return [str(value.dtype), list(value.shape), hashlib.sha256(value.reshape(-1).view(np.uint8)).hexdigest()]


def read_all(path: Path) -> dict[str, list[Any]]:
    """Opens any checkpoint varstore reads and returns {name: [dtype, shape, sha256]} of every variable."""
    from varstore import open_checkpoint

    reader = open_checkpoint(path)
    try:
        return {name: _digest(reader.read(name)) for name in reader.keys()}
    finally:
        reader.close()


def _restore_all(path: Path, baseline: dict[str, list[Any]]) -> dict[str, list[Any]]:
    from varstore import restore

    target = {name: np.zeros(tuple(shape), dtype=_dtype(dtype)) for name, (dtype, shape, _) in baseline.items()}
    restore(path, target)
    return {name: _digest(value) for name, value in target.items()}


def _dtype(name: str) -> np.dtype:
    from varstore import dtypes

    return dtypes.as_dtype(name)


def _cli_verify(path: Path) -> dict[str, Any]:
    from click.testing import CliRunner
    from varstore_cli.main import cli

    result = CliRunner().invoke(cli, ["verify", str(path)])
    text = (result.output or "") + (getattr(result, "stderr", "") or "")
    return {"exit": result.exit_code, "output": text.strip()[-400:],
            "untyped": None if result.exception is None or isinstance(result.exception, SystemExit)
            else repr(result.exception)}


def _classify(func: Any, baseline: dict[str, list[Any]]) -> dict[str, Any]:
    try:
        found = func()
    except VarstoreError as err:
        return {"outcome": "typed", "error": type(err).__name__, "message": str(err)[:300]}
    except BaseException as err:  # noqa: BLE001 - counting is the point
        return {"outcome": "untyped", "error": type(err).__name__, "message": str(err)[:300],
                "traceback": traceback.format_exc()[-1500:]}
    if found == baseline:
        return {"outcome": "exact"}
    differing = sorted(set(found) ^ set(baseline) | {k for k in found if k in baseline and found[k] != baseline[k]})
    return {"outcome": "wrong", "differing": differing[:10]}


def _damage(case: dict[str, Any], scratch: Path) -> Path:
    src = Path(case["src"])
    copy = scratch / "case"
    if copy.exists() or copy.is_symlink():
        if copy.is_dir() and not copy.is_symlink():
            shutil.rmtree(copy)
        else:
            copy.unlink()
    if src.is_dir():
        shutil.copytree(src, copy, symlinks=True)
    else:
        shutil.copyfile(src, copy)
    target = copy / case["file"] if case.get("file") else copy
    op = case.get("op", "none")
    if op == "truncate":
        os.truncate(target, int(case["offset"]))
    elif op == "flip":
        with open(target, "r+b") as handle:
            handle.seek(int(case["offset"]))
            byte = handle.read(1)[0]
            handle.seek(int(case["offset"]))
            handle.write(bytes([byte ^ (1 << int(case.get("bit", 0)))]))
    return copy / case["open"] if case.get("open") else copy


def baseline_of(case: dict[str, Any]) -> dict[str, list[Any]]:
    """The undamaged checkpoint's digests (computed once per source)."""
    src = case["src"]
    if src not in _BASELINES:
        path = Path(src) / case["open"] if case.get("open") else Path(src)
        try:
            _BASELINES[src] = read_all(path)
        except BaseException as err:  # noqa: BLE001 - hostile sources: no undamaged values to compare
            _BASELINES[src] = {"<source unreadable>": [type(err).__name__, [], str(err)[:200]]}
    return _BASELINES[src]


def run_case(case: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Damages a copy as `case` says and classifies every requested mode."""
    baseline = baseline_of(case)
    path = _damage(case, scratch)
    result: dict[str, Any] = {}
    for mode in case.get("modes", ["read"]):
        if mode == "read":
            result["read"] = _classify(lambda: read_all(path), baseline)
        elif mode == "restore":
            result["restore"] = _classify(lambda: _restore_all(path, baseline), baseline)
        elif mode == "cli":
            result["cli"] = _cli_verify(path)
    return result


def main(argv: list[str]) -> int:
    limit = os.environ.get("VARSTORE_TEST_RLIMIT_AS")
    if limit:  # memory-bound cases: an attempt to allocate a claimed 10**15 bytes fails instead of swapping
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    cases = json.loads(Path(argv[1]).read_text())
    start = int(argv[2])
    scratch = Path(argv[3])
    scratch.mkdir(parents=True, exist_ok=True)
    out = sys.stdout
    for index in range(start, len(cases)):
        out.write(json.dumps({"start": index}) + "\n")
        out.flush()
        result = run_case(cases[index], scratch)
        result["maxrss_kb"] = _peak_rss_kb()
        out.write(json.dumps({"done": index, **result}) + "\n")
        out.flush()
    return 0


def _peak_rss_kb() -> int:
    """This process's peak RSS since exec (VmHWM). Not ru_maxrss: Linux carries the parent's RSS
    high-water mark over fork and exec, so a worker started by a large pytest process would report
    the parent's size."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    sys.exit(main(sys.argv))

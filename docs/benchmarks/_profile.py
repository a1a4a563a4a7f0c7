"""Profile summaries: where a worker's timed region spends its samples, from py-spy's raw output.

run.py --profile DIR runs each worker once under `py-spy record --format raw
--threads` and calls `summarize_profile` on the result. Only samples inside the
timed region count: main-thread stacks passing through the method's timed call,
and every sample of other threads (the library's I/O threads exist only then).
Runs nothing itself.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

__all__ = ["TIMED_FRAMES", "summarize_profile"]

# The method calls the worker times (see _worker.py); a main-thread stack must contain one.
TIMED_FRAMES = (".save (_methods.py", ".load (_methods.py", ".read_one (_methods.py", ".restore (_methods.py",
                "touch_pages (_methods.py")
_IDLE = ("_worker (concurrent/futures/thread.py", "wait (threading.py", "_wait_for_tstate_lock")
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def _frames(stack: str) -> list[str]:
    """Frames of one stack as "function (file)", line numbers dropped, thread label removed."""
    parts = stack.split(";")
    out = []
    for part in parts[1:]:
        m = _FRAME.match(part.strip())
        out.append(f"{m['func']} ({m['file']})" if m else part.strip())
    return out


def summarize_profile(path: Path, top: int = 12) -> str:
    """A short text report: samples in the timed region, top frames by inclusive and by self samples."""
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = idle = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        main = "MainThread" in stack.split(";", 1)[0]
        if main and not any(marker in stack for marker in TIMED_FRAMES):
            continue
        frames = _frames(stack)
        if not main and (not frames or any(frames[-1].startswith(i) for i in _IDLE)):
            idle += count
            continue
        total += count
        thread = "main" if main else "thread"
        for frame in dict.fromkeys(frames):
            inclusive[f"{frame}"] += count
        leaf[f"[{thread}] {frames[-1] if frames else '?'}"] += count
    if total == 0:
        return f"{path.name}: no samples in the timed region"
    lines = [f"{path.name}: {total} samples in the timed region ({idle} idle pool-thread samples left out)",
             "  inclusive (varstore / h5py / zarr / numpy frames):"]
    interesting = [(f, c) for f, c in inclusive.most_common()
                   if any(k in f for k in ("varstore/", "h5py/", "zarr/", "numpy/", "safetensors", "crc32c"))]
    lines += [f"    {100 * c / total:5.1f}%  {f}" for f, c in interesting[:top]]
    lines.append("  self (leaf frames):")
    lines += [f"    {100 * c / total:5.1f}%  {f}" for f, c in leaf.most_common(top)]
    return "\n".join(lines)

"""Peak-RSS probe (a script, run in a fresh process): save or restore a model of N MB, print RSS figures.

    python _rss_probe.py save|restore FORMAT PATH MODEL_MB

Prints one JSON line: model_mb, baseline_mb (peak RSS once the model's
arrays exist) and peak_mb (peak RSS after the operation), in MiB. restore
fills existing arrays in place, so its overhead should be a bounded buffer.
"""

from __future__ import annotations

import json
import resource
import sys

import numpy as np


def _peak_mb() -> float:
    """Peak RSS of this process (VmHWM): ru_maxrss would carry the parent's peak across fork and exec, so a
    pytest larger than the model would hide any overhead."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(op: str, fmt: str, path: str, model_mb: int) -> None:
    from varstore import restore, save

    count = 20
    per = model_mb * (1 << 20) // count // 4
    model = {f"layer_{i}/kernel": np.full(per, i, dtype=np.float32) if op == "save" else np.zeros(per, np.float32)
             for i in range(count)}
    for value in model.values():
        value[::1024] += 1  # touch every page
    baseline = _peak_mb()
    if op == "save":
        save(path, model, format=fmt)
    else:
        restore(path, model)
        assert all(float(v[1]) == i for i, v in enumerate(model.values()))
    print(json.dumps({"op": op, "format": fmt, "model_mb": model_mb, "baseline_mb": round(baseline, 1),
                      "peak_mb": round(_peak_mb(), 1), "overhead_mb": round(_peak_mb() - baseline, 1)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

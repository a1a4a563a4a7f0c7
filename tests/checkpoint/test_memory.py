"""Memory (both formats): saving and restoring a 200 MB model stay near one copy of it (peak RSS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, resource, sys
import numpy as np
from varstore import restore, save
path = sys.argv[1]
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
model = {f"layer_{i:02d}/kernel": np.full((1024, 1024), i, np.float32) for i in range(50)}  # 200 MiB
model["tiny/bias"] = np.ones(16, np.float32)
start = peak()
save(path, model)
after_save = peak()
for value in model.values():
    value[...] = -1
restore(path, model)
after_restore = peak()
ok = all(float(v.reshape(-1)[0]) == (i if i < 50 else 1.0) for i, v in enumerate(model.values()))
print(json.dumps({"model": 50 * 4 * 2**20, "start": start, "save": after_save, "restore": after_restore, "ok": ok}))
"""


def test_save_and_restore_peak_rss_stays_near_one_model(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / ("model.h5" if fmt == "h5" else "model.zarr")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] is True
    assert result["start"] >= result["model"]  # the model itself is resident
    margin = 48 * 2**20  # staging window + interpreter noise; a second copy would be 200 MiB
    assert result["save"] - result["start"] <= margin
    assert result["restore"] - result["start"] <= margin

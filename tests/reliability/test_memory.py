"""Memory bounds: headers claiming 10**15 bytes fail before allocating; 200 MB saves/restores stay bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import _hostile as hostile
from ._batch import run_cases

#: Address-space limit for the huge-claim workers (bytes): any attempt to allocate 10**15 bytes fails.
RLIMIT_AS = 3 << 30
MODEL_MB = int(os.environ.get("VARSTORE_RELIABILITY_MODEL_MB", "200"))
#: Allowed peak-RSS growth over the model's own arrays (MiB).
FIXED_BOUND_MB = 64


def huge_claim_results(folder: Path) -> dict[str, dict]:
    cases, labels = [], []
    for label, builder in hostile.HUGE_CLAIMS.items():
        directory = folder / label.replace(" ", "_").replace("(", "").replace(")", "")
        directory.mkdir(parents=True)
        path = builder(directory)
        if path.exists():
            cases.append({"src": str(path), "op": "none", "modes": ["read"]})
        else:  # a TF prefix: copy its directory, open the prefix in it
            cases.append({"src": str(path.parent), "open": path.name, "op": "none", "modes": ["read"]})
        labels.append(label)
    results = run_cases(cases, folder / "runs", jobs=1, env={"VARSTORE_TEST_RLIMIT_AS": str(RLIMIT_AS)})
    return dict(zip(labels, results))


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return huge_claim_results(tmp_path_factory.mktemp("huge"))


@pytest.mark.parametrize("label", sorted(hostile.HUGE_CLAIMS))
def test_huge_claims_fail_typed_before_allocating(huge: dict, label: str) -> None:
    """Regression ("own manifest (Zarr)"): the reader allocated the claimed shape before checking the file size."""
    result = huge[label]
    assert not result.get("crash") and not result.get("hang"), result
    assert result["read"]["outcome"] == "typed", result["read"]
    assert result["maxrss_kb"] < 512 * 1024


def rss_probe(op: str, fmt: str, path: Path, model_mb: int) -> dict:
    env = dict(os.environ)
    env.pop("VARSTORE_FAULT", None)
    out = subprocess.run([sys.executable, str(Path(__file__).parent / "_rss_probe.py"), op, fmt, str(path),
                          str(model_mb)], capture_output=True, text=True, env=env, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_save_and_restore_stay_within_model_plus_fixed_bound(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"model.{fmt}"
    saved = rss_probe("save", fmt, path, MODEL_MB)
    restored = rss_probe("restore", fmt, path, MODEL_MB)
    for figures in (saved, restored):
        assert figures["baseline_mb"] >= MODEL_MB  # the model's arrays are resident
        assert figures["overhead_mb"] < FIXED_BOUND_MB, figures

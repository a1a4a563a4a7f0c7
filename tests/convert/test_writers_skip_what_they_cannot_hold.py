"""A dtype a destination cannot hold skips that variable with its reason, never refuses the whole file
(issue 36, item 1): every writer with a dtype table declares `holds`, and convert asks it first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs

SOURCE = {
    "w": np.arange(6, dtype=np.float32).reshape(2, 3),
    "names": np.array(["a", "bc"]),
    "mask": np.array([True, False]),
    "wide": np.arange(3, dtype=np.longdouble),
}

# destination -> (suffix, the names it cannot hold)
CASES = {
    "pt": (".pt", {"names", "wide"}),
    "gguf": (".gguf", {"names", "mask", "wide"}),
    "tf": (".ckpt", {"wide"}),
    "dcp": (".distcp", {"names", "wide"}),
    "orbax": ("", {"names", "wide"}),
}


@pytest.mark.parametrize("to", sorted(CASES))
def test_convert_skips_each_variable_the_destination_cannot_hold_and_writes_the_rest(tmp_path: Path, to: str) -> None:
    if to == "dcp":
        pytest.importorskip("torch")
    suffix, refused = CASES[to]
    source = vs.save(tmp_path / "src.h5", SOURCE)
    destination = tmp_path / f"out{suffix}" if suffix else tmp_path / "out"
    report = vs.convert(source, destination, to_format=to)
    skipped = {entry.name: entry.reason for entry in report.skipped}
    assert set(skipped) == refused, skipped
    assert all("cannot hold" in reason or "numeric arrays only" in reason for reason in skipped.values()), skipped
    back = vs.load(destination)  # a TF destination is the bundle prefix
    assert set(back) == set(SOURCE) - refused
    np.testing.assert_array_equal(back["w"], SOURCE["w"])

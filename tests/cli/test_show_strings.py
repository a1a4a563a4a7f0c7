"""`show` renders strings one way, whether the file stores bytes (HDF5, TF) or text (npz) (issue 38, item 10)."""

from __future__ import annotations

import h5py
import numpy as np


def test_hdf5_byte_strings_and_npz_strings_show_alike(run, tmp_path):
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f["names"] = np.array([b"abc", b"de"])
    np.savez(tmp_path / "s.npz", names=np.array(["abc", "de"]))
    lines = {suffix: [line.split(None, 1)[1] for line in run("show", tmp_path / f"s.{suffix}", "names").stdout.splitlines()
                      if line.startswith("values")] for suffix in ("h5", "npz")}
    assert lines["h5"] == lines["npz"] == ["['abc', 'de']"]  # the column is as wide as each file's rows

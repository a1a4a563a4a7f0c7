"""Issue 9, finding 5: HDF5 files use the 1.10 format bounds, so HDF5 1.10 tools read every attribute."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from varstore.backends.hdf5.store import LIBVER, Hdf5Writer
from varstore import save


def test_libver_bounds_are_pinned_to_v110_latest(tmp_path: Path) -> None:
    assert LIBVER == ("v110", "latest")
    writer = Hdf5Writer(tmp_path / "w.h5", header_bytes=512)
    try:
        import h5py

        low, high = writer._file.id.get_access_plist().get_libver_bounds()
        assert low == h5py.h5f.LIBVER_V110 and high == h5py.h5f.LIBVER_LATEST
    finally:
        writer.close()


def _checkpoint(tmp_path: Path) -> tuple[Path, int]:
    values = {"conv1/weights": np.ones((5, 5, 3, 8), np.float32), "conv1/biases": np.zeros(8, np.float32),
              "name": np.array(b"xyz")}
    path = save(tmp_path / "m.h5", values, step=3, metadata={"run": "a7"})
    import h5py

    with h5py.File(path, "r") as f:
        count = len(f.attrs)
        for name in ("conv1/weights", "conv1/biases", "name", "_varstore/manifest"):
            count += len(f[name].attrs)
    return path, count


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (apt-get install hdf5-tools) not installed")
def test_h5dump_reads_every_attribute(tmp_path: Path) -> None:
    path, count = _checkpoint(tmp_path)
    version = subprocess.run(["h5dump", "--version"], capture_output=True, text=True, timeout=30).stdout
    result = subprocess.run(["h5dump", "-A", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (version, result.stderr)
    assert "error" not in result.stderr + result.stdout
    assert result.stdout.count("ATTRIBUTE \"") == count
    for attribute in ("varstore_layout", "trainable", "collections", "checksum", "varstore_manifest_crc32c"):
        assert f'ATTRIBUTE "{attribute}"' in result.stdout
    assert '"per-variable"' in result.stdout

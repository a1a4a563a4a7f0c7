"""import varstore loads the core only; checkpoints, converters, inspection, h5py, zarr, ml_dtypes on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import varstore


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_varstore_loads_no_checkpoint_layer_or_optional_library() -> None:
    loaded = _modules_after("import varstore")
    for heavy in ("varstore.checkpoint", "varstore.convert", "varstore.inspect", "h5py", "zarr", "ml_dtypes",
                  "crc32c", "hashlib", "importlib.metadata"):
        assert heavy not in loaded, heavy


def test_reading_an_own_hdf5_file_needs_neither_h5py_nor_the_crc32c_package(tmp_path: Path) -> None:
    varstore.save(tmp_path / "ck.h5", {"a/b": np.arange(6, dtype=np.float32)})
    loaded = _modules_after(f"import varstore as vs\nassert vs.open_checkpoint({str(tmp_path / 'ck.h5')!r})"
                            "['a/b'].tolist() == [0, 1, 2, 3, 4, 5]")
    assert "h5py" not in loaded and "zarr" not in loaded and "crc32c" not in loaded
    assert "crc32c._crc32c" in loaded  # the C extension alone


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in varstore.__all__:
        assert getattr(varstore, name) is not None, name
        assert name in dir(varstore)
    assert callable(varstore.convert) and varstore.convert.__module__ == "varstore.convert"
    assert varstore.dtypes.bfloat16.name == "bfloat16"
    assert varstore.dtypes.as_dtype("float8_e5m2").itemsize == 1

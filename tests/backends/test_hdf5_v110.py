"""Issue 9, finding 5: HDF5 files use the 1.10 format bounds, so HDF5 1.10 tools read every attribute."""

from __future__ import annotations

import json
import math
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


def test_datasets_and_attributes_are_what_h5pys_create_dataset_and_attrs_make(tmp_path: Path) -> None:
    """Issue 39: the writer creates datasets through h5py's low-level calls; a plain h5py user reads
    the same dataset (type, shape, contiguous layout, early allocation) and the same attributes."""
    import h5py

    from varstore.backends.hdf5.store import _dataset_dcpl

    arrays = {"a/b/kernel": (np.dtype("<f4"), (4, 6)), "a/bias": (np.dtype("<f4"), (6,)),
              "ünï/cödé": (np.dtype("<i2"), (2, 3)), "empty": (np.dtype("<f8"), (0, 3)),
              "s": (np.dtype("S3"), (2,)), "scalar": (np.dtype("<f8"), ()), "flags": (np.dtype("u1"), (3,))}
    attrs = {"trainable": True, "collections": ["a", "b"], "dtype": "float32", "device": "cpu:0",
             "checksum": "crc32c:0000abcd", "count": 7, "ratio": 0.5}
    writer = Hdf5Writer(tmp_path / "w.h5", header_bytes=512)
    extents = {path: writer.create_array(path, dtype, shape, dict(attrs, name=path))
               for path, (dtype, shape) in arrays.items()}
    writer.close()
    with h5py.File(tmp_path / "h.h5", "w", libver=LIBVER, track_order=False, userblock_size=512) as f:
        for path, (dtype, shape) in arrays.items():
            group: h5py.Group = f
            for part in path.split("/")[:-1]:  # str names, one level at a time: as require_group("ünï") makes it
                group = group.require_group(part)
            dataset = group.create_dataset(path.rpartition("/")[2], shape=shape, dtype=dtype, dcpl=_dataset_dcpl())
            for key, value in dict(attrs, name=path).items():
                dataset.attrs[key] = value if not isinstance(value, list) else json.dumps(value)
    with h5py.File(tmp_path / "w.h5", "r") as ours, h5py.File(tmp_path / "h.h5", "r") as theirs:
        for path, (dtype, shape) in arrays.items():
            a, b = ours[path], theirs[path]
            assert (a.dtype, a.shape) == (b.dtype, b.shape) == (dtype, shape)
            assert a.id.get_create_plist().get_layout() == b.id.get_create_plist().get_layout()
            assert a.id.get_create_plist().get_alloc_time() == b.id.get_create_plist().get_alloc_time()
            assert dict(a.attrs) == dict(b.attrs) and dict(a.attrs)["collections"] == '["a", "b"]'
            assert {k: (type(v), a.attrs.get_id(k).get_type().get_class()) for k, v in a.attrs.items()} == \
                {k: (type(v), b.attrs.get_id(k).get_type().get_class()) for k, v in b.attrs.items()}
            assert isinstance(a.attrs["dtype"], str) and a.attrs["trainable"] is np.True_
            parent, _, leaf = path.rpartition("/")
            for scope in (ours, theirs):  # group and dataset links: the same name encoding
                assert isinstance(scope[parent or "/"], h5py.Group)
            if parent:
                cset = [f.id.links.get_info(parent.encode()).cset for f in (ours, theirs)]
                assert cset[0] == cset[1]
            if shape and math.prod(shape):  # a scalar is allocated late, as h5py makes it: no extent
                assert extents[path] is not None and extents[path].offset == a.id.get_offset()

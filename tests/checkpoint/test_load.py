"""Issue 9, finding 4: vs.load(path, names, filter) -> dict of arrays, checksums checked, bounded memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.errors import ChecksumError, UnknownVariableError

from tests.checkpoint.test_eager_restore import _flip


def _values() -> dict[str, np.ndarray]:
    return {"encoder/w": np.arange(12, dtype=np.float32).reshape(3, 4),
            "encoder/b": np.array([1.5, -2.0], np.float64),
            "decoder/w": np.arange(6, dtype=np.int16).reshape(2, 3),
            "step": np.array(7, np.int64)}


@pytest.mark.parametrize("layout", ["per-variable", "packed"])
def test_load_returns_every_array_with_its_values(ckpt: Path, layout: str) -> None:
    values = _values()
    vs.save(ckpt, values, layout=layout)
    loaded = vs.load(ckpt)
    assert list(loaded) == list(values)
    for name, value in values.items():
        assert loaded[name].dtype == value.dtype and loaded[name].shape == value.shape
        np.testing.assert_array_equal(loaded[name], value)


def test_load_names_and_filter(ckpt: Path) -> None:
    vs.save(ckpt, _values())
    assert list(vs.load(ckpt, names=["step", "encoder/b"])) == ["step", "encoder/b"]
    assert vs.load(ckpt, names=["step"])["step"] == 7
    assert sorted(vs.load(ckpt, filter="encoder/*")) == ["encoder/b", "encoder/w"]
    assert list(vs.load(ckpt, names=["decoder/w", "encoder/w"], filter="encoder/*")) == ["encoder/w"]
    with pytest.raises(UnknownVariableError, match="nope"):
        vs.load(ckpt, names=["nope"])


def test_load_checks_checksums(ckpt: Path) -> None:
    vs.save(ckpt, _values())
    _flip(ckpt, "encoder/w", at=4)
    with pytest.raises(ChecksumError, match=r"'encoder/w' in '.*model"):
        vs.load(ckpt)
    assert vs.load(ckpt, names=["encoder/b"])["encoder/b"].tolist() == [1.5, -2.0]


def test_load_reads_foreign_formats(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"encoder.w": np.ones((2, 2), np.float32), "encoder.b": np.zeros(2, np.float32)},
              str(tmp_path / "m.safetensors"))
    loaded = vs.load(tmp_path / "m.safetensors", names=["encoder.w"])
    assert list(loaded) == ["encoder.w"] and loaded["encoder.w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    np.savez(tmp_path / "m.npz", a=np.arange(3), b=np.ones(2))
    assert vs.load(tmp_path / "m.npz", filter="a")["a"].tolist() == [0, 1, 2]


_MEMORY_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import varstore as vs

    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    path = sys.argv[1]
    vs.load(path, names=["tiny"])                     # warm up imports and code paths
    with open("/proc/self/clear_refs", "w") as f:     # reset the peak (VmHWM) to the current RSS
        f.write("5")
    before = status("VmRSS")
    arrays = vs.load(path)
    peak = status("VmHWM")
    nbytes = sum(a.nbytes for a in arrays.values())
    assert float(arrays["w3"][-1, -1]) == 3.0
    print(nbytes, peak - before)
""")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_load_memory_is_the_arrays_plus_a_bounded_overhead(tmp_path: Path, suffix: str) -> None:
    values = {f"w{i}": np.full((1024, 4096), i, np.float32) for i in range(4)}  # 4 x 16 MiB
    values["tiny"] = np.ones(4, np.float32)
    path = vs.save(tmp_path / f"m{suffix}", values)
    del values
    script = tmp_path / "measure.py"
    script.write_text(_MEMORY_SCRIPT, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    nbytes, grown = map(int, result.stdout.split())
    assert nbytes == 4 * 1024 * 4096 * 4 + 16
    assert nbytes <= grown <= nbytes + (16 << 20), (nbytes, grown)  # the arrays + at most 16 MiB


def test_load_of_most_packed_bytes_hands_out_disjoint_views_of_its_own_blob(ckpt: Path) -> None:
    values = {f"s/v{i:03d}": np.full(16, i, np.float32) for i in range(100)}  # 64 B each: no padding
    values["s/scalar"] = np.array(2.5, np.float64)
    vs.save(ckpt, values, layout="packed")
    loaded = vs.load(ckpt)
    assert list(loaded) == list(values)
    assert not any(array.flags.owndata for array in loaded.values())  # views of the blob, none copied
    assert not np.shares_memory(loaded["s/v000"], loaded["s/v001"])
    loaded["s/v001"][:] = -1.0  # writable, and no other array (nor a later load) sees it
    assert loaded["s/v000"].tolist() == [0.0] * 16 and loaded["s/v002"].tolist() == [2.0] * 16
    assert float(loaded["s/scalar"]) == 2.5 and loaded["s/scalar"].shape == ()
    assert vs.load(ckpt, names=["s/v001"])["s/v001"].tolist() == [1.0] * 16


def test_load_of_a_few_packed_variables_copies_them_out_of_the_blob(ckpt: Path) -> None:
    values = {f"s/v{i:03d}": np.full(16, i, np.float32) for i in range(100)}
    vs.save(ckpt, values, layout="packed")
    few = vs.load(ckpt, filter="s/v00*")  # 10 of 100: a copy each, so the blob is not kept alive
    assert sorted(few) == [f"s/v{i:03d}" for i in range(10)]
    for name, array in few.items():
        assert array.flags.owndata and array.flags.writeable
        np.testing.assert_array_equal(array, values[name])

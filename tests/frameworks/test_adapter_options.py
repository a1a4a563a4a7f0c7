"""varstore.torch and varstore.jax take varstore.save's options: overwrite, layout, durable, storage_options.

A PyTorch or JAX user must not drop to vs.save_entries to replace a stray file, save without fsync,
pick the packed layout or reach a bucket with explicit settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore.checkpoint import open_varstore
from varstore.checkpoint.publish import atomic
from varstore.errors import CheckpointExistsError
from varstore.storage import local

torch = pytest.importorskip("torch")
import varstore.torch as vst  # noqa: E402


def _state() -> dict[str, Any]:
    return {"encoder.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
            "encoder.bias": torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16),
            "step": torch.tensor(7, dtype=torch.int64)}


def _zeros_like(state: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.zeros_like(v) for k, v in state.items()}


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_torch_save_refuses_a_stray_file_unless_overwrite(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"model{suffix}"
    path.write_bytes(b"not mine")
    with pytest.raises(CheckpointExistsError, match=r"model" + suffix.replace(".", r"\.") + r".*not a checkpoint"):
        vst.save(path, _state())
    assert path.read_bytes() == b"not mine"  # nothing destroyed
    vst.save(path, _state(), overwrite=True)
    target = _zeros_like(_state())
    vst.restore(path, target)
    _assert_same(target, _state())


def test_torch_save_layout_packed_and_per_variable(tmp_path: Path) -> None:
    vst.save(tmp_path / "p.h5", _state(), layout="packed")
    vst.save(tmp_path / "v.h5", _state(), layout="per-variable")
    with open_varstore(tmp_path / "p.h5") as packed, open_varstore(tmp_path / "v.h5") as own:
        assert (packed.layout, own.layout) == ("packed", "per-variable")
    for name in ("p.h5", "v.h5"):
        _assert_same(vst.load(tmp_path / name), _state())


def test_torch_save_durable_false_skips_fsync_and_stays_atomic(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.h5"
    vst.save(path, {"old": torch.zeros(2)})
    calls = {"fsync": 0, "writeback": 0}
    real_fsync, real_writeback = os.fsync, local.start_writeback

    def fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def writeback(fd: int, offset: int, nbytes: int) -> None:
        calls["writeback"] += 1
        real_writeback(fd, offset, nbytes)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(local, "start_writeback", writeback)
    big = {"w": torch.arange(3 << 20, dtype=torch.float32)}  # 12 MiB: a durable save hands 8 MiB over early
    vst.save(path, big, durable=False)
    assert calls == {"fsync": 0, "writeback": 0}
    assert [p.name for p in tmp_path.iterdir()] == ["m.h5"]  # replaced by rename, no temporary left
    _assert_same(vst.load(path), big)
    vst.save(path, big)
    assert calls["fsync"] >= 1 and calls["writeback"] == 1  # the default is still durable


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_torch_round_trip_on_a_bucket_with_storage_options(s3_server: Any, s3_prefix: str, suffix: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)  # the settings come from storage_options alone
    options = s3_server.storage_options
    url = f"{s3_prefix}/model{suffix}"
    assert vst.save(url, _state(), step=3, storage_options=options) == url
    target = _zeros_like(_state())
    pointers = {k: t.data_ptr() for k, t in target.items()}
    result = vst.restore(url, target, storage_options=options)
    assert sorted(result.restored) == sorted(_state())
    assert {k: t.data_ptr() for k, t in target.items()} == pointers  # in place
    _assert_same(target, _state())
    _assert_same(vst.load(url, storage_options=options), _state())


def test_jax_takes_the_same_options(tmp_path: Path, s3_server: Any, s3_prefix: str) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import varstore.jax as vsj

    params = {"dense": {"kernel": jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3),
                        "bias": jnp.ones(3, dtype=jnp.bfloat16)}}
    path = tmp_path / "params.zarr"
    path.write_text("notes")
    with pytest.raises(CheckpointExistsError, match="params.zarr"):
        vsj.save(path, params)
    vsj.save(path, params, overwrite=True, layout="packed", durable=False)
    with open_varstore(path) as reader:
        assert reader.layout == "packed"
    options = s3_server.storage_options
    url = f"{s3_prefix}/params.h5"
    vsj.save(url, params, storage_options=options)
    for loaded in (vsj.load(path), vsj.load(url, storage_options=options),
                   vsj.restore(url, like=params, storage_options=options)):
        assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
        for got, want in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(params)):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32))

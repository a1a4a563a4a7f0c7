"""Reading a step of an incremental repository: chunks fetched ahead concurrently within a byte window,
consumed in any order, each checked against its crc32c as it lands; restores stay bit-exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.manage.incremental import chunk_key
from varstore.checkpoint.read import snapshot_reader
from varstore.errors import ChecksumError
from varstore.storage.icechunk_repo import IcechunkRepository

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    model = {f"layer_{i}/kernel": rng.standard_normal((64, 32 + i)).astype(np.float32) for i in range(6)}
    model["embed"] = rng.standard_normal((16, 8)).astype(vs.dtypes.bfloat16)
    model["step"] = np.array(3, np.int64)
    model["empty"] = np.zeros((0, 2), np.float32)
    return model


@pytest.mark.parametrize("window", [1, 3 * 64 * 34 * 4, 64 << 20])
def test_restore_and_reads_in_any_order_are_bit_exact_whatever_the_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int) -> None:
    monkeypatch.setattr(snapshot_reader, "READ_AHEAD_BYTES", window)
    model = _model()
    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk")
    manager.save(model, step=1)
    model["layer_2/kernel"] = model["layer_2/kernel"] * 2
    manager.save(model, step=2)
    targets = {name: np.full_like(value, 7) for name, value in model.items()}
    vs.restore(f"{tmp_path / 'run'}@ckpt-2", targets)
    assert all(targets[n].dtype == v.dtype and targets[n].tobytes() == v.tobytes() for n, v in model.items())
    with vs.open_checkpoint(f"{tmp_path / 'run'}@ckpt-2") as reader:  # backwards, then skipping, then again
        names = reader.keys()
        order = names[::-1] + names[::2] + names
        assert all(reader.read(n).tobytes() == model[n].tobytes() for n in order)
        out = np.empty_like(model["layer_5/kernel"])
        assert reader.read("layer_5/kernel", out=out) is out and out.tobytes() == model["layer_5/kernel"].tobytes()


def test_a_damaged_chunk_fails_its_crc32c_on_restore_naming_the_variable(tmp_path: Path) -> None:
    model = _model()
    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk")
    manager.save(model, step=1)
    repo = IcechunkRepository(tmp_path / "run")
    txn = repo.writable()  # same length, one flipped byte, committed behind varstore's back
    damaged = bytearray(model["layer_3/kernel"].tobytes())
    damaged[100] ^= 0xFF
    txn.set(chunk_key("layer_3/kernel", 2), bytes(damaged))
    repo.tag("ckpt-2", txn.commit("damage", {}))
    targets = {name: np.zeros_like(value) for name, value in model.items()}
    with pytest.raises(ChecksumError, match="layer_3/kernel.*crc32c mismatch"):
        vs.restore(f"{tmp_path / 'run'}@ckpt-2", targets)
    vs.restore(f"{tmp_path / 'run'}@ckpt-1", targets)  # the step before is whole
    assert all(targets[n].tobytes() == v.tobytes() for n, v in model.items())

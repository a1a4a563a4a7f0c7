"""An incremental checkpoint repository on object storage: s3:// on moto and SeaweedFS, gs:// and az://
through the suite's test servers, each skipped with the reason where the server lacks what Icechunk needs."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.errors import CheckpointError

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")


def _round_trip(prefix: str, storage_options: dict[str, object]) -> None:
    location = f"{prefix}/run"
    try:
        manager = vs.CheckpointManager(location, max_to_keep=1, format="icechunk", storage_options=storage_options)
        base = np.arange(4096, dtype=np.float32)
        for step in (1, 2):
            manager.save({"base/w": base, "adapter/a": np.full(8, step, np.float32)}, step=step)
    except CheckpointError as err:
        pytest.skip(f"Icechunk cannot keep a repository on this server: {str(err).splitlines()[0][:300]}")
    assert manager.last_save is not None and manager.last_save.written == ("adapter/a",)
    assert [s.step for s in manager.steps()] == [2]  # retention on the bucket
    for step in (2,):
        loaded = vs.load(f"{location}@ckpt-{step}", storage_options=storage_options)
        assert loaded["base/w"].tobytes() == base.tobytes() and loaded["adapter/a"].tolist() == [step] * 8
    targets = {"base/w": np.zeros(4096, np.float32), "adapter/a": np.zeros(8, np.float32)}
    assert manager.restore_latest(targets) is not None and targets["adapter/a"][0] == 2


def test_s3_moto(s3_env: dict[str, str], s3_prefix: str, s3_server,  # type: ignore[no-untyped-def]
                 monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.checkpoint.publish import atomic

    def refused(*args: object) -> None:
        raise AssertionError("a step on object storage is durable once its PUTs return: nothing to sync")

    monkeypatch.setattr(atomic, "syncfs", refused)  # durable=True (the default) syncs nothing on a bucket
    monkeypatch.setattr(atomic, "_fsync_one", refused)
    _round_trip(s3_prefix, dict(s3_server.storage_options))


def test_s3_seaweedfs(seaweed_env: dict[str, str], seaweed_prefix: str, seaweed_server) -> None:  # type: ignore[no-untyped-def]
    _round_trip(seaweed_prefix, dict(seaweed_server.storage_options))


def test_gs(gs_env: dict[str, str], gs_prefix: str, gs_server) -> None:  # type: ignore[no-untyped-def]
    _round_trip(gs_prefix, dict(gs_server.storage_options))


def test_az(az_env: dict[str, str], az_prefix: str, az_server) -> None:  # type: ignore[no-untyped-def]
    _round_trip(az_prefix, dict(az_server.storage_options))

"""Faults under checkpoints on an object store: cut and delayed connections, a server killed mid-save.

A TCP proxy (tests/storage/_fault_proxy.py) sits between the client and moto's
server: a save either commits or leaves nothing listed; reads retry with
backoff and then fail with a typed error naming the URL; the old checkpoint
survives a server that dies mid-save.
"""

from __future__ import annotations

import logging
import urllib.parse
import uuid

import numpy as np
import pytest

import varstore as vs
from tests._s3server import DUMMY_CREDENTIALS, S3TestServer, start_s3_server
from tests.storage._fault_proxy import FaultProxy, Faults
from varstore.checkpoint import is_varstore_checkpoint
from varstore.checkpoint.publish import remote
from varstore.errors import CheckpointNotFoundError, ObjectStoreError
from varstore.storage.object_storage import ObjectStorage


def _proxy(server: S3TestServer, faults: Faults) -> FaultProxy:
    parts = urllib.parse.urlsplit(server.endpoint)
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or 80, faults, lifetime=90)


def _through(server: S3TestServer, proxy: FaultProxy) -> dict[str, object]:
    return {**server.storage_options, "endpoint": proxy.endpoint}


def _values() -> dict[str, np.ndarray]:
    return {f"layer{i}/w": np.full((128, 128), i, dtype=np.float32) for i in range(4)}  # 64 KiB each


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_a_save_whose_uploads_are_cut_commits_nothing(s3_server: S3TestServer, s3_prefix: str, suffix: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    url = f"{s3_prefix}/runs/ckpt-1.{suffix}"
    with _proxy(s3_server, Faults(cut_upstream_after=40_000)) as proxy, caplog.at_level(logging.DEBUG):
        with pytest.raises(ObjectStoreError, match=rf"PUT {s3_prefix}/runs/ckpt-1.{suffix}\S* failed after"):
            vs.save(url, _values(), pack_threshold_bytes=0, storage_options=_through(s3_server, proxy))
        assert proxy.cuts >= 1
    options = s3_server.storage_options
    assert not is_varstore_checkpoint(url)
    with pytest.raises(CheckpointNotFoundError, match=f"ckpt-1.{suffix}"):
        vs.open_checkpoint(url, storage_options=options)
    assert vs.CheckpointManager(f"{s3_prefix}/runs", format=suffix, storage_options=options).checkpoints == []
    assert DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in caplog.text


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_a_save_recovers_from_a_few_cut_and_delayed_connections(s3_server: S3TestServer, s3_prefix: str,
                                                                 suffix: str) -> None:
    url = f"{s3_prefix}/m.{suffix}"
    values = _values()
    # the first two connections are cut in their first request; the retries go over fresh ones
    with _proxy(s3_server, Faults(cut_upstream_after=200, cut_connections=2, delay=0.05)) as proxy:
        vs.save(url, values, pack_threshold_bytes=0, storage_options=_through(s3_server, proxy))
        assert proxy.cuts == 2
    out = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(url, out, storage_options=s3_server.storage_options)
    assert all(np.array_equal(out[name], values[name]) for name in values)


def test_a_restore_cut_every_time_fails_naming_the_url_and_a_few_cuts_are_retried(
        s3_server: S3TestServer, s3_prefix: str) -> None:
    url = f"{s3_prefix}/m.h5"
    values = _values()
    vs.save(url, values, pack_threshold_bytes=0, storage_options=s3_server.storage_options)
    with vs.open_checkpoint(url, storage_options=s3_server.storage_options) as reader:
        expected = reader.read("layer2/w")
    with _proxy(s3_server, Faults(cut_downstream_after=20_000, delay=0.02)) as proxy:
        with vs.open_checkpoint(url, storage_options=_through(s3_server, proxy)) as reader:  # small reads pass
            with pytest.raises(ObjectStoreError, match=rf"GET {url} failed after 4 attempt\(s\)"):
                reader.read("layer2/w")  # 64 KiB: cut at 20 KB every time
        assert proxy.cuts >= 4
    with _proxy(s3_server, Faults(cut_downstream_after=100, cut_connections=2)) as proxy:
        out = {name: np.zeros_like(value) for name, value in values.items()}
        vs.restore(url, out, storage_options=_through(s3_server, proxy))
        assert proxy.cuts == 2 and np.array_equal(out["layer2/w"], expected)


def test_the_server_killed_mid_save_leaves_the_old_checkpoint_restorable(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("obstore", reason="the [s3] extra (obstore) is not installed")
    bucket = f"kill-{uuid.uuid4().hex[:8]}"
    try:
        server = start_s3_server(bucket)
    except (ImportError, OSError) as err:
        pytest.skip(f"no S3 test server: {err}")
    manager = vs.CheckpointManager(f"s3://{bucket}/runs", format="zarr", storage_options=server.storage_options)
    manager.save({"w": np.arange(4.0)}, step=1)
    original = ObjectStorage.put_many

    def die_then_put(self: ObjectStorage, items: object) -> int:
        server.stop()  # the server goes away after the pending marker, before any chunk or the commit
        return original(self, items)  # type: ignore[arg-type]

    monkeypatch.setattr(ObjectStorage, "put_many", die_then_put)
    with pytest.raises(ObjectStoreError, match=rf"s3://{bucket}/runs/ckpt-2.zarr\S* failed after"):
        manager.save({"w": np.arange(4.0) * 10}, step=2)
    monkeypatch.undo()
    # moto keeps its buckets in the process: a new server on another port serves what the old one stored
    revived = start_s3_server(f"other-{uuid.uuid4().hex[:8]}")
    try:
        manager = vs.CheckpointManager(f"s3://{bucket}/runs", format="zarr", storage_options=revived.storage_options)
        assert manager.checkpoints == [f"s3://{bucket}/runs/ckpt-1.zarr"]
        out = {"w": np.zeros(4)}
        assert manager.restore_latest(out) is not None and out["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
        monkeypatch.setattr(remote, "SWEEP_GRACE_SECONDS", 0.0)
        manager.save({"w": np.ones(4)}, step=3)  # sweeps the unfinished ckpt-2
        storage = ObjectStorage(f"s3://{bucket}", revived.storage_options)
        assert storage.list("runs/ckpt-2.zarr") == []
        assert manager.checkpoints == [f"s3://{bucket}/runs/ckpt-{s}.zarr" for s in (1, 3)]
    finally:
        revived.stop()

"""Checkpoints on an object store: save/restore/open through URLs, ranged HDF5 reads, plain Zarr, the commit rule."""

from __future__ import annotations

import gc
import json
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests._bucket import Bucket
from tests._s3server import S3TestServer
from varstore.checkpoint import is_varstore_checkpoint, open_varstore
from varstore.checkpoint.publish import remote
from varstore.errors import CheckpointExistsError, CheckpointNotFoundError, ObjectChangedError
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient

KiB = 1024


def _values() -> dict[str, np.ndarray]:
    return {"conv1/weights": np.arange(64 * KiB, dtype=np.float32).reshape(256, 256),   # 256 KiB
            "conv1/bias": np.linspace(-1, 1, 256).astype(np.float32),
            "dense/kernel": (np.arange(32 * KiB, dtype=np.float64) % 97).reshape(128, 256),  # 256 KiB
            "step_count": np.array(1200, dtype=np.int64)}


def _client(server: S3TestServer, url: str) -> ObjectStoreClient:
    return ObjectStoreClient(url, server.storage_options)


@pytest.fixture
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every temporary file of the process goes here, so tests can check none is left."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_save_restore_and_open_through_a_url(bucket: Bucket, staging: Path, suffix: str) -> None:
    values = _values()
    url = f"{bucket.prefix}/runs/a7/model.{suffix}"
    assert vs.save(url, values, step=1200, metadata={"lr": 0.1}) == url
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    result = vs.restore(url, targets)
    assert sorted(result.restored) == sorted(values)
    for name, value in values.items():
        np.testing.assert_array_equal(targets[name], value)
    with vs.open_checkpoint(url) as reader:
        assert reader.step == 1200 and reader.metadata == {"lr": 0.1} and reader.location == url
        assert reader.format == f"varstore-{'hdf5' if suffix == 'h5' else 'zarr'}"
        np.testing.assert_array_equal(reader.read("conv1/bias"), values["conv1/bias"])
    with open_varstore(url) as reader:
        assert sorted(reader.keys()) == sorted(values)
    loaded = vs.load(url)
    assert sorted(loaded) == sorted(values) and np.array_equal(loaded["dense/kernel"], values["dense/kernel"])
    assert vs.load(url, names=["conv1/bias"])["conv1/bias"].tolist() == values["conv1/bias"].tolist()
    assert is_varstore_checkpoint(url) and not is_varstore_checkpoint(f"{bucket.prefix}/runs/a7/none.{suffix}")
    assert list(staging.iterdir()) == []  # the local staging (upload, Zarr read copy) is gone


def test_storage_options_reach_the_server_without_any_environment(
        s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP",
                 "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    options = s3_server.storage_options
    url = f"{s3_prefix}/m.zarr"
    vs.save(url, {"w": np.arange(5.0)}, storage_options=options)
    out = {"w": np.zeros(5)}
    vs.restore(url, out, storage_options=options)
    np.testing.assert_array_equal(out["w"], np.arange(5.0))
    with vs.open_checkpoint(url, storage_options=options) as reader:
        assert reader.keys() == ["w"]
    assert vs.load(url, storage_options=options)["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    manager = vs.CheckpointManager(f"{s3_prefix}/runs", storage_options=options)
    manager.save({"w": np.ones(2)}, step=1)
    assert manager.latest == f"{s3_prefix}/runs/ckpt-1.h5" and is_varstore_checkpoint(manager.latest, options)


def test_hdf5_is_read_with_ranged_gets_of_the_index_and_the_variable_only(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    values = _values()
    url = f"{s3_prefix}/model.h5"
    vs.save(url, values, pack_threshold_bytes=4 * KiB)
    size = _client(s3_server, s3_prefix).size("model.h5")
    s3_server.log.clear()
    with vs.open_checkpoint(url) as reader:
        opened = list(s3_server.log.requests)
        np.testing.assert_array_equal(reader.read("dense/kernel"), values["dense/kernel"])
    gets = s3_server.log.matching("GET", path_contains="model.h5")
    assert gets and all(r.range is not None for r in gets)  # never the whole object
    # opening: one GET of the first 4 KiB (the 512-byte index header; size and ETag come with it, no
    # HEAD), then the manifest; a few KiB in all
    assert [(r.method, r.range) for r in opened] == [("GET", "bytes=0-4095"), ("GET", opened[1].range)]
    assert sum(r.bytes_out for r in opened if r.method == "GET") < 8 * KiB
    variable = [r for r in gets if r not in opened]
    assert len(variable) == 1 and variable[0].bytes_out == values["dense/kernel"].nbytes
    assert sum(r.bytes_out for r in gets) < values["dense/kernel"].nbytes + 8 * KiB < size // 2 + 8 * KiB
    assert len(s3_server.log.requests) <= 8


def test_an_hdf5_checkpoint_replaced_while_open_fails_the_read_instead_of_mixing_two_saves(bucket: Bucket) -> None:
    """Reads are pinned with If-Match to the ETag seen at open; moto and Azurite answer a replaced object with 412."""
    values = _values()
    url = f"{bucket.prefix}/model.h5"
    vs.save(url, values)
    with vs.open_checkpoint(url) as reader:
        np.testing.assert_array_equal(reader["conv1/bias"], values["conv1/bias"])
        vs.save(url, {name: value + 1 for name, value in values.items()})  # another job's save lands
        with pytest.raises(ObjectChangedError, match=rf"{url} changed while it was being read.*open it again"):
            reader["conv1/weights"]
    with vs.open_checkpoint(url) as reader:  # opened again: the new checkpoint, whole
        np.testing.assert_array_equal(reader["conv1/weights"], values["conv1/weights"] + 1)


def test_a_restore_from_an_hdf5_checkpoint_replaced_meanwhile_leaves_the_store_as_it_was(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    values = _values()
    url = f"{s3_prefix}/model.h5"
    vs.save(url, values)
    opened = ObjectStorage.keep_open

    def open_then_replace(self: ObjectStorage, key: str) -> None:
        opened(self, key)  # the restore has pinned the object (size, ETag, index header) ...
        monkeypatch.setattr(ObjectStorage, "keep_open", opened)
        vs.save(url, {name: value * 2 for name, value in values.items()})  # ... and another save replaces it

    monkeypatch.setattr(ObjectStorage, "keep_open", open_then_replace)
    targets = {name: np.full_like(value, 7) for name, value in values.items()}
    with pytest.raises(ObjectChangedError, match=rf"{url} changed while it was being read"):
        vs.restore(url, targets)
    assert all(np.all(target == 7) for target in targets.values())
    vs.restore(url, targets)
    np.testing.assert_array_equal(targets["dense/kernel"], values["dense/kernel"] * 2)


def test_an_hdf5_object_without_a_valid_index_header_is_read_through_h5py_over_ranged_gets(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, tmp_path: Path) -> None:
    values = _values()
    local = vs.save(tmp_path / "model.h5", values)
    data = bytearray(local.read_bytes())
    data[:512] = bytes(512)  # an index header zeroed (a tool that rewrote the user block): h5py finds the rest
    _client(s3_server, s3_prefix).put("model.h5", bytes(data))
    # h5py holds its global lock while it reads through the file object, whose GETs this process's
    # own server thread answers; were that thread to collect an h5py object left by an earlier test,
    # it would wait for the lock until the client's timeout (60 s). Not a hazard with a real server.
    gc.collect()
    gc.disable()
    try:
        with vs.open_checkpoint(f"{s3_prefix}/model.h5") as reader:
            assert sorted(reader.keys()) == sorted(values)
            np.testing.assert_array_equal(reader["dense/kernel"], values["dense/kernel"])
            assert reader["step_count"] == 1200
    finally:
        gc.enable()


def test_a_restore_from_a_bucket_removes_its_local_metadata_copy_before_it_returns(
        s3_env: dict[str, str], s3_prefix: str, staging: Path) -> None:
    values = _values()
    url = f"{s3_prefix}/model.zarr"
    vs.save(url, values)
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    gc.disable()  # not left to the collector: restore closes the reader it opened
    try:
        vs.restore(url, targets)
        assert list(staging.iterdir()) == []
    finally:
        gc.enable()
    np.testing.assert_array_equal(targets["conv1/weights"], values["conv1/weights"])


def test_zarr_on_a_bucket_is_plain_zarr_v3_written_concurrently_commit_last(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    zarr = pytest.importorskip("zarr")
    obstore_store = pytest.importorskip("obstore.store")
    many = {f"layer{i:02d}/w": np.full((64, 64), i, dtype=np.float32) for i in range(24)}  # 16 KiB each
    s3_server.log.clear()
    vs.save(f"{s3_prefix}/model.zarr", many, step=3, pack_threshold_bytes=0)
    puts = [r for r in s3_server.log.requests if r.method == "PUT"]
    chunk_puts = [r for r in puts if r.path.endswith("/w/0.0")]  # each variable's one chunk file
    assert len(chunk_puts) >= 24
    assert 1 <= s3_server.log.peak_in_flight <= 8  # bounded by the client's max_in_flight
    assert puts[-1].path.endswith("/model.zarr/zarr.json")  # the commit object goes last
    assert s3_server.log.requests[-1].method in ("DELETE", "POST")  # then the pending marker goes
    key = _client(s3_server, s3_prefix).url.key
    s3 = obstore_store.S3Store(s3_server.bucket, prefix=f"{key}/model.zarr", endpoint=s3_server.endpoint,
                               region="us-east-1", access_key_id="x", secret_access_key="y",
                               client_options={"allow_http": True})
    group = zarr.open_group(zarr.storage.ObjectStore(s3, read_only=True), mode="r")
    assert group.attrs["step"] == 3
    np.testing.assert_array_equal(group["layer07/w"][...], many["layer07/w"])
    names = [info.name for info in _client(s3_server, s3_prefix).list("model.zarr")]
    assert not any(name.endswith(remote.PENDING_MARKER) for name in names)


def test_a_checkpoint_without_its_commit_object_is_not_listed_opened_or_restored(bucket: Bucket) -> None:
    url = f"{bucket.prefix}/runs/ckpt-5.zarr"  # s3:// on moto, az:// on Azurite
    vs.save(url, {"w": np.arange(3.0)})
    client = bucket.client()
    client.delete(["runs/ckpt-5.zarr/zarr.json"])  # as a writer killed before its commit leaves it
    with pytest.raises(CheckpointNotFoundError, match=r"ckpt-5.zarr: objects are there but no commit object"):
        vs.open_checkpoint(url)
    with pytest.raises(CheckpointNotFoundError, match="no commit object"):
        vs.restore(url, {"w": np.zeros(3)})
    assert not is_varstore_checkpoint(url)
    manager = vs.CheckpointManager(f"{bucket.prefix}/runs", format="zarr")
    assert manager.checkpoints == [] and manager.latest is None


def test_the_next_save_sweeps_abandoned_saves_and_uploads_after_the_grace_period(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client(s3_server, s3_prefix)
    client.put_many([("runs/ckpt-1.zarr/_varstore/pending", b"{}"), ("runs/ckpt-1.zarr/w/c/0", b"x" * 8),
                     ("runs/other-tool/data.bin", b"keep me")])
    vs.save(f"{s3_prefix}/runs/ckpt-3.zarr", {"w": np.arange(2.0)})  # within the grace period: nothing swept
    assert client.exists("runs/ckpt-1.zarr/w/c/0")
    # what a writer killed mid-upload leaves (moto dates every upload 2010, so it is always past the grace)
    urllib.request.urlopen(urllib.request.Request(
        f"{s3_server.endpoint}/{s3_server.bucket}/{client.url.key}/runs/ckpt-2.h5?uploads", method="POST")).close()
    assert [name for name, _ in client.incomplete_uploads("runs")] == ["runs/ckpt-2.h5"]
    monkeypatch.setattr(remote, "SWEEP_GRACE_SECONDS", 0.0)
    vs.save(f"{s3_prefix}/runs/ckpt-4.zarr", {"w": np.arange(2.0)})
    assert not client.list("runs/ckpt-1.zarr") and client.incomplete_uploads("runs") == []
    assert client.get("runs/other-tool/data.bin") == b"keep me"  # no pending marker: never touched
    assert is_varstore_checkpoint(f"{s3_prefix}/runs/ckpt-3.zarr")


def test_saving_over_a_checkpoint_replaces_it_and_never_over_foreign_data(bucket: Bucket) -> None:
    client, prefix = bucket.client(), bucket.prefix
    url = f"{prefix}/m.zarr"
    vs.save(url, {"a": np.arange(3.0), "b": np.ones(2)}, pack_threshold_bytes=0)
    vs.save(url, {"a": np.arange(3.0) * 2}, pack_threshold_bytes=0)
    with vs.open_checkpoint(url) as reader:
        assert reader.keys() == ["a"] and reader.read("a").tolist() == [0.0, 2.0, 4.0]
    assert not [n.name for n in client.list("m.zarr") if n.name.startswith("m.zarr/b/")]  # stale objects gone
    vs.save(f"{prefix}/m.h5", {"a": np.arange(3.0)})
    vs.save(f"{prefix}/m.h5", {"a": np.arange(4.0)})
    with vs.open_checkpoint(f"{prefix}/m.h5") as reader:
        assert reader.read("a").tolist() == [0.0, 1.0, 2.0, 3.0]
    client.put("foreign.h5", b"not hdf5 at all" * 40)
    with pytest.raises(CheckpointExistsError, match=r"foreign.h5: an object that is not a varstore checkpoint "
                                                    r"\(600 bytes\) is there; .* pass overwrite=True"):
        vs.save(f"{prefix}/foreign.h5", {"a": np.arange(3.0)})
    assert client.get("foreign.h5") == b"not hdf5 at all" * 40
    vs.save(f"{prefix}/foreign.h5", {"a": np.arange(3.0)}, overwrite=True)  # asked explicitly
    assert is_varstore_checkpoint(f"{prefix}/foreign.h5")
    with pytest.raises(CheckpointExistsError, match=r"m.h5: a varstore HDF5 checkpoint \(not Zarr\) is there"):
        vs.save(f"{prefix}/m.h5", {"a": np.arange(3.0)}, format="zarr")
    client.put("data.zarr/zarr.json", json.dumps({"zarr_format": 3, "node_type": "group"}).encode())
    with pytest.raises(CheckpointExistsError, match="data.zarr: a Zarr hierarchy varstore did not write"):
        vs.save(f"{prefix}/data.zarr", {"a": np.arange(3.0)})
    client.put("loose.zarr/x", b"1")
    with pytest.raises(CheckpointExistsError, match="loose.zarr: 1 objects that are not a varstore checkpoint"):
        vs.save(f"{prefix}/loose.zarr", {"a": np.arange(3.0)})


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_a_checkpoint_copied_to_a_bucket_is_complete_there(s3_env: dict[str, str], s3_server: S3TestServer,
                                                            s3_prefix: str, tmp_path: Path, suffix: str) -> None:
    """Orbax #394: a checkpoint saved on a disk and copied with a plain copy tool must not look unfinished."""
    local = tmp_path / f"ckpt-9.{suffix}"
    vs.save(local, {"w": np.arange(4.0)}, step=9)
    client = _client(s3_server, s3_prefix)
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:  # what `aws s3 cp --recursive` does: one PUT per file, in any order
        name = local.name if path == local else f"{local.name}/{path.relative_to(local).as_posix()}"
        client.put(f"runs/{name}", path.read_bytes())
    manager = vs.CheckpointManager(f"{s3_prefix}/runs", format=suffix)
    assert manager.latest == f"{s3_prefix}/runs/ckpt-9.{suffix}"
    out = {"w": np.zeros(4)}
    assert manager.restore_latest(out) is not None and out["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_large_hdf5_checkpoint_goes_up_as_a_multipart_upload(s3_env: dict[str, str], s3_server: S3TestServer,
                                                                s3_prefix: str, staging: Path) -> None:
    big = {"w": np.arange(3 * 1024 * 1024 // 8 * 4, dtype=np.float64)}  # 12 MiB: two 8 MiB parts
    s3_server.log.clear()
    vs.save(f"{s3_prefix}/big.h5", big)
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 2
    with vs.open_checkpoint(f"{s3_prefix}/big.h5") as reader:
        np.testing.assert_array_equal(reader.read("w"), big["w"])
    assert list(staging.iterdir()) == []


def test_a_restore_fetches_adjacent_hdf5_variables_in_one_coalesced_ranged_get(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    values = {f"layer{i}/w": np.full(16 * KiB, i, dtype=np.float32) for i in range(6)}  # 64 KiB each
    url = f"{s3_prefix}/m.h5"
    vs.save(url, values)
    with open_varstore(url) as reader:
        _, extents = reader.direct_extents(list(values))
    start, end = min(o for o, _ in extents), max(o + n for o, n in extents)
    assert end - start < 6 * 64 * KiB + 6 * 4 * KiB  # the variables lie back to back (small gaps between)
    s3_server.log.clear()
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(url, targets)
    assert all(np.array_equal(targets[name], values[name]) for name in values)
    requests = [r for r in s3_server.log.requests if "m.h5" in r.path]
    # one GET of the first 4 KiB (the object kept open: size, ETag and index header, no HEAD), the
    # manifest, then ONE GET for all six variables
    assert [r.method for r in requests] == ["GET", "GET", "GET"]
    assert requests[0].range == "bytes=0-4095"
    assert requests[2].range == f"bytes={start}-{end - 1}" and requests[2].bytes_out == end - start


def test_a_zarr_checkpoint_is_read_without_fetching_the_variables_not_asked_for(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, staging: Path) -> None:
    values = {f"layer{i}/w": np.full(16 * KiB, i, dtype=np.float32) for i in range(6)}  # 64 KiB each
    url = f"{s3_prefix}/m.zarr"
    vs.save(url, values, layout="per-variable")
    s3_server.log.clear()
    with vs.open_checkpoint(url) as reader:
        assert reader.read("layer4/w")[0] == 4.0
        assert list(staging.iterdir()) == []  # the metadata is held in memory: no local copy, ever
    chunk_gets = [r for r in s3_server.log.matching("GET", path_contains="m.zarr/")
                  if "manifest" not in r.path and not r.path.endswith("/zarr.json")]
    assert [r.path.rsplit("m.zarr/", 1)[1] for r in chunk_gets] == ["layer4/w/0"]
    assert sum(r.bytes_out for r in s3_server.log.requests) < 64 * KiB + 16 * KiB  # one variable + metadata
    assert list(staging.iterdir()) == []


def test_a_zarr_save_costs_one_request_per_object_plus_a_fixed_few(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    values = {f"{name}/w": np.arange(4.0) for name in "abc"}
    url = f"{s3_prefix}/runs/m.zarr"
    s3_server.log.clear()
    vs.save(url, values, layout="per-variable")
    fresh = list(s3_server.log.requests)
    puts = [r for r in fresh if r.method == "PUT"]
    # objects: the commit, _varstore and its manifest (zarr.json + chunk), per variable a group, an array
    # and a chunk; plus the pending marker
    assert len(puts) == 1 + 3 + 3 * 3 + 1
    # before them: what is there (list, HEAD), the parent's listing (the sweep's, and what the upload
    # replaces), the incomplete uploads; after them: one batch delete of the marker
    assert [(r.method, "uploads" in r.query) for r in fresh if r.method != "PUT"] == [
        ("GET", False), ("HEAD", False), ("GET", False), ("GET", True), ("POST", False)]
    s3_server.log.clear()
    vs.save(url, {"a/w": np.arange(4.0)}, layout="per-variable")  # over it: the old commit goes first
    deletes = s3_server.log.matching("POST")
    assert len(deletes) == 2 and deletes[0].bytes_in > 0 and "HEAD" not in [r.method for r in s3_server.log.requests[2:]]
    with vs.open_checkpoint(url) as reader:
        assert sorted(reader.keys()) == ["a/w"]
    left = [info.name for info in _client(s3_server, url).list()]
    assert not [name for name in left if name.startswith(("b/", "c/", "_varstore/pending"))]  # stale ones went too

"""UploadingStorage (storage/staged_upload.py) on the real S3 test server: whole writes become objects
straight from memory, pieced and kept-open writes stay in the staging directory, bounds hold; a Zarr
save to a bucket stages nothing but its commit object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests._s3server import S3TestServer
from varstore.errors import ObjectStoreError
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient
from varstore.storage.staged_upload import UploadingStorage

MiB = 1024 * 1024


def _storage(server: S3TestServer, url: str, max_in_flight: int = 2) -> ObjectStorage:
    return ObjectStorage(url, client=ObjectStoreClient(url, server.storage_options, part_size=5 * MiB,
                                                        max_in_flight=max_in_flight))


def test_whole_writes_are_uploaded_from_memory_and_pieced_ones_are_staged(
        tmp_path: Path, s3_server: S3TestServer, s3_prefix: str) -> None:
    remote = _storage(s3_server, s3_prefix)
    root = tmp_path / "m.zarr"
    (root / "w").mkdir(parents=True)
    uploading = UploadingStorage(root, remote, "m.zarr")
    value = np.arange(1000, dtype=np.float32)
    whole = uploading.writer(str(root / "w" / "0"))
    whole.write_at(0, value)
    whole.finish()
    pieced = uploading.writer(str(root / "p"))  # two pieces through one writer: staged
    pieced.write_at(0, b"abc")
    pieced.write_at(3, b"def")
    pieced.finish()
    kept = uploading.writer(str(root / "k"), keep_open=True)  # written in windows by several writers
    kept.write_at(4, b"5678")
    uploading.writer(str(root / "k"), keep_open=True).write_at(0, b"1234")
    uploading.wait()
    uploading.close()
    assert uploading.uploaded == ["m.zarr/w/0"]
    assert remote.read_all("m.zarr/w/0") == value.tobytes()
    assert not (root / "w" / "0").exists()  # never written to the local disk
    assert (root / "p").read_bytes() == b"abcdef" and (root / "k").read_bytes() == b"12345678"
    assert not remote.exists("m.zarr/p") and not remote.exists("m.zarr/k")  # the caller uploads those
    outside = uploading.writer(str(tmp_path / "elsewhere"))
    outside.write_at(0, b"x")
    with pytest.raises(ObjectStoreError, match="is not under the staging directory"):
        outside.finish()


def test_a_large_whole_write_is_one_multipart_upload_inside_the_request_bound(
        tmp_path: Path, s3_server: S3TestServer, s3_prefix: str) -> None:
    remote = _storage(s3_server, s3_prefix, max_in_flight=3)
    root = tmp_path / "m.zarr"
    root.mkdir()
    uploading = UploadingStorage(root, remote, "m.zarr")
    big = np.random.default_rng(0).integers(0, 255, 12 * MiB, dtype=np.uint8)  # 3 parts of 5 MiB
    small = [np.full(1000, i, dtype=np.uint8) for i in range(6)]
    s3_server.log.clear()
    for i, value in enumerate(small[:3] + [big] + small[3:]):
        writer = uploading.writer(str(root / f"c{i}"))
        writer.write_at(0, value)
        writer.finish()
    uploading.wait()
    uploading.close()
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 3
    assert s3_server.log.peak_in_flight <= 3
    assert remote.read_all("m.zarr/c3") == big.tobytes()
    assert [remote.read_all(f"m.zarr/c{i}") for i in (0, 1, 2, 4, 5, 6)] == [v.tobytes() for v in small]


def test_a_failed_upload_is_raised_by_wait_and_stops_later_uploads(
        tmp_path: Path, s3_server: S3TestServer) -> None:
    remote = _storage(s3_server, "s3://no-such-bucket-here/runs")
    root = tmp_path / "m.zarr"
    root.mkdir()
    uploading = UploadingStorage(root, remote, "m.zarr")
    writer = uploading.writer(str(root / "a"))
    writer.write_at(0, b"x" * 10)
    writer.finish()
    with pytest.raises(ObjectStoreError, match="s3://no-such-bucket-here/runs/m.zarr/a"):
        uploading.wait()
    later = uploading.writer(str(root / "b"))
    later.write_at(0, b"y")
    with pytest.raises(ObjectStoreError):
        later.finish()
    uploading.close()
    assert uploading.uploaded == ["m.zarr/a"]


def test_a_zarr_save_to_a_bucket_uploads_its_chunks_without_staging_them(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    staged: list[list[str]] = []
    original = UploadingStorage.close

    def close_and_measure(self: UploadingStorage) -> None:  # what is on the staging disk at the end
        root = Path(self._root)
        staged.append(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))
        original(self)

    monkeypatch.setattr(UploadingStorage, "close", close_and_measure)
    values = {f"layer{i}/kernel": np.full((256, 256), i, dtype=np.float32) for i in range(4)}  # 256 KiB each
    url = f"{s3_prefix}/m.zarr"
    vs.save(url, values, layout="per-variable")
    # chunks, arrays' and groups' zarr.json and the manifest went up as they were made; only the commit
    # object (the root zarr.json, uploaded last) is on the staging disk
    assert staged == [["zarr.json"]]
    restored = vs.load(url)
    assert sorted(restored) == sorted(values)
    for name, value in values.items():
        np.testing.assert_array_equal(restored[name], value)


def test_a_packed_zarr_save_to_a_bucket_stages_the_blob_and_reads_back(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    values = {f"opt/slot_{i:04d}": np.full(16, i, dtype=np.float32) for i in range(300)}
    values["big/kernel"] = np.arange(64 * 1024, dtype=np.float32)  # 256 KiB: its own array
    url = f"{s3_prefix}/packed.zarr"
    s3_server.log.clear()
    vs.save(url, values, layout="packed")
    # one object per own array, the blob, the manifest and the metadata: not one per small variable
    assert len(s3_server.log.matching("PUT")) < 20
    with vs.open_checkpoint(url) as reader:
        assert len(reader.keys()) == 301
        np.testing.assert_array_equal(reader["opt/slot_0123"], values["opt/slot_0123"])
        np.testing.assert_array_equal(reader["big/kernel"], values["big/kernel"])


def test_an_async_zarr_save_to_a_bucket_within_a_snapshot_budget_round_trips(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str) -> None:
    store = vs.VariableStore()
    with store.variable_scope("m"):
        big = store.get_variable("big", shape=(3 * MiB,), dtype="float32")  # 12 MiB: a multipart chunk
        small = [store.get_variable(f"s{i}", shape=(1000,), dtype="float32") for i in range(5)]
    big.assign(np.arange(3 * MiB, dtype=np.float32))
    for i, variable in enumerate(small):
        variable.assign(np.full(1000, i, dtype=np.float32))
    url = f"{s3_prefix}/async.zarr"
    s3_server.log.clear()
    handle = vs.save(url, store, blocking=False, max_snapshot_bytes=13 * MiB, layout="per-variable")
    big.assign(np.zeros(3 * MiB, dtype=np.float32))  # the snapshot was taken: the save keeps the old values
    handle.wait()
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 2  # 12 MiB in 8 MiB parts
    restored = vs.load(url)
    np.testing.assert_array_equal(restored["m/big"], np.arange(3 * MiB, dtype=np.float32))
    assert [restored[f"m/s{i}"][0] for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]

"""ObjectStorage keeps the Storage / ConditionalStorage contract (varstore/storage/protocol.py) on a real S3 server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests._s3server import S3TestServer
from varstore.errors import CorruptCheckpointError, InvalidURLError, ObjectStoreError
from varstore.storage import ConditionalStorage, LocalStorage, Storage, is_remote, storage_for
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient

MiB = 1024 * 1024


def _storage(server: S3TestServer, url: str, part_size: int = 5 * MiB) -> ObjectStorage:
    return ObjectStorage(url, client=ObjectStoreClient(url, server.storage_options, part_size=part_size,
                                                        max_in_flight=2))


def test_object_storage_is_a_conditional_storage_without_rename(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    assert isinstance(storage, Storage) and isinstance(storage, ConditionalStorage)
    assert storage.renames is False and storage.url == s3_prefix


def test_storage_for_a_url_is_object_storage_rooted_at_the_bucket(s3_server: S3TestServer) -> None:
    storage, key = storage_for("s3://varstore-test/runs/a7/model.h5", s3_server.storage_options)
    assert isinstance(storage, ObjectStorage) and storage.url == "s3://varstore-test"
    assert key == "s3://varstore-test/runs/a7/model.h5"
    # pathlib spells a URL with one slash; it is still the URL
    storage, key = storage_for(Path("s3://varstore-test/runs/model.h5"), s3_server.storage_options)
    assert key == "s3://varstore-test/runs/model.h5" and storage.name_of(key) == "runs/model.h5"
    assert storage.name_of(str(Path(key))) == "runs/model.h5"
    assert isinstance(storage_for("/tmp/x.h5")[0], LocalStorage)
    assert is_remote("gs://b/k") and is_remote(Path("az://c/k")) and not is_remote("/tmp/s3:/x")
    with pytest.raises(InvalidURLError, match="s3://other/x is not under s3://varstore-test"):
        storage.name_of("s3://other/x")


def test_positional_writes_become_one_object_on_finish(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    writer = storage.writer(f"{s3_prefix}/model.h5")
    writer.reserve(100)
    writer.write_at(10, np.frombuffer(b"body", dtype=np.uint8))
    writer.write_at(0, b"HEAD")
    assert not storage.exists("model.h5")  # nothing visible before finish
    writer.finish()
    assert storage.read_all("model.h5") == b"HEAD" + bytes(6) + b"body"
    out = np.zeros(4, dtype=np.uint8)
    assert storage.read_range("model.h5", 10, 4, out) is out and out.tobytes() == b"body"
    assert bytes(storage.read_range(f"{s3_prefix}/model.h5", 2, 3)) == b"AD\x00"
    assert storage.size("model.h5") == 14 and storage.list("") == ["model.h5"]


def test_short_reads_are_corrupt_and_missing_keys_are_not_found(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    storage.put("short.h5", b"0123456789")
    with pytest.raises(CorruptCheckpointError, match=rf"{s3_prefix}/short.h5 holds 10 bytes, 16 were expected"):
        storage.read_range("short.h5", 8, 8)
    with pytest.raises(FileNotFoundError, match="no object at"):
        storage.read_range("missing.h5", 0, 4)
    with pytest.raises(FileNotFoundError):
        storage.size("missing.h5")


def test_a_large_object_is_uploaded_as_multipart(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    s3_server.log.clear()
    writer = storage.writer("big.h5")
    block = bytes(range(256)) * 4096
    for i in range(11):
        writer.write(block)
    writer.write_at(0, b"MAGIC")
    writer.finish()
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 3  # 11 MiB in 5 MiB parts
    data = storage.read_all("big.h5")
    assert len(data) == 11 * MiB and data[:5] == b"MAGIC" and data[5:MiB] == block[5:]
    with pytest.raises(ObjectStoreError, match="already finished"):
        writer.write(b"x")


def test_an_aborted_writer_leaves_nothing(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    writer = storage.writer("x.h5")
    writer.write_at(0, b"partial")
    writer.abort()
    assert storage.list("") == []


def test_put_if_is_create_only_then_if_match(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    assert storage.version("latest") is None
    first = storage.put_if("latest", b"ckpt-1", None)
    with pytest.raises(FileExistsError, match="latest lost the race"):
        storage.put_if("latest", b"ckpt-x", None)
    second = storage.put_if("latest", b"ckpt-2", first)
    with pytest.raises(FileExistsError):
        storage.put_if("latest", b"ckpt-3", first)  # a stale etag: another writer moved it
    assert storage.read_all("latest") == b"ckpt-2" and storage.version("latest") == second != first


def test_delete_removes_an_object_or_a_whole_prefix(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    assert storage.put_many([(f"m.zarr/c/{i}", bytes([i]) * 8) for i in range(5)]) == 5
    storage.put("m.h5", b"x")
    assert storage.list("m.zarr") == [f"m.zarr/c/{i}" for i in range(5)]
    storage.delete("m.zarr")
    storage.delete("m.h5")
    storage.delete("never-there")
    assert storage.list("") == []


def test_download_tree_copies_a_prefix_into_a_directory(s3_server: S3TestServer, s3_prefix: str,
                                                         tmp_path: Path) -> None:
    storage = _storage(s3_server, s3_prefix)
    storage.put_many([("m.zarr/zarr.json", b"{}"), ("m.zarr/w/c/0", b"abc"), ("m.zarr/w/zarr.json", b"[]")])
    assert storage.download_tree("m.zarr", tmp_path / "m.zarr") == 7  # 2 + 3 + 2 bytes
    assert (tmp_path / "m.zarr" / "w" / "c" / "0").read_bytes() == b"abc"
    assert sorted(p.name for p in (tmp_path / "m.zarr").rglob("*") if p.is_file()) == ["0", "zarr.json", "zarr.json"]


def test_h5py_reads_an_hdf5_object_through_ranged_gets(s3_server: S3TestServer, s3_prefix: str,
                                                       tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")

    path = tmp_path / "foreign.h5"
    big = np.arange(256 * 1024, dtype=np.float32)  # 1 MiB
    with h5py.File(path, "w") as f:
        f["small"] = np.arange(6, dtype=np.int64)
        f["big"] = big
    storage = _storage(s3_server, s3_prefix)
    storage.client.put("foreign.h5", path.read_bytes())
    storage.client.bytes_read = 0
    with h5py.File(storage.open_reader("foreign.h5"), "r") as f:
        np.testing.assert_array_equal(f["small"][...], np.arange(6))
        read_for_small = storage.client.bytes_read
        np.testing.assert_array_equal(f["big"][1000:1010], big[1000:1010])
    assert read_for_small < 64 * 1024  # the 1 MiB dataset was not fetched to read "small"
    assert storage.client.bytes_read < 128 * 1024  # nor to read 10 of its elements
    with storage.open_reader("foreign.h5") as reader:
        assert reader.seek(0, 2) == path.stat().st_size and reader.seek(1) == 1
        assert reader.read(3) == path.read_bytes()[1:4]

"""ObjectStorage (provisional Storage over a bucket): positional writes, reads into buffers, commit last."""

from __future__ import annotations

import pytest

from tests._s3server import S3TestServer
from varstore.errors import ConditionalWriteError, ObjectStoreError
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient

MiB = 1024 * 1024


def _storage(server: S3TestServer, url: str, part_size: int = 5 * MiB) -> ObjectStorage:
    return ObjectStorage(url, client=ObjectStoreClient(url, server.storage_options, part_size=part_size,
                                                        max_in_flight=2))


def test_positional_writes_become_one_object_on_finish(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    with storage.open_writer("model.h5") as writer:
        writer.write_at(10, b"body")
        writer.write_at(0, b"HEAD")
        assert not storage.exists("model.h5")  # nothing visible before finish
    assert storage.read("model.h5") == b"HEAD" + bytes(6) + b"body"
    out = bytearray(4)
    assert storage.read_into("model.h5", 10, out) == 4 and out == b"body"
    assert storage.size("model.h5") == 14


def test_a_large_object_is_uploaded_as_multipart(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    s3_server.log.clear()
    writer = storage.open_writer("big.h5")
    block = bytes(range(256)) * 4096
    for i in range(11):
        writer.write(block)
    writer.write_at(0, b"MAGIC")
    writer.finish()
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 3  # 11 MiB in 5 MiB parts
    data = storage.read("big.h5")
    assert len(data) == 11 * MiB and data[:5] == b"MAGIC" and data[5:MiB] == block[5:]
    with pytest.raises(ObjectStoreError, match="already finished"):
        writer.write(b"x")


def test_an_aborted_writer_leaves_nothing(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    with pytest.raises(RuntimeError, match="boom"), storage.open_writer("x.h5") as writer:
        writer.write(b"partial")
        raise RuntimeError("boom")
    assert storage.list() == []


def test_commit_is_create_only_and_the_pointer_moves_with_if_match(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = _storage(s3_server, s3_prefix)
    assert storage.write_many([(f"ckpt-1/c/{i}", bytes([i]) * 8) for i in range(5)]) == 5
    storage.commit("ckpt-1/manifest.json", b'{"step": 1}')
    with pytest.raises(ConditionalWriteError, match="ckpt-1/manifest.json lost the race"):
        storage.commit("ckpt-1/manifest.json", b'{"step": 1, "writer": 2}')
    etag = storage.replace_if_unchanged("latest", b"ckpt-1", None)
    etag2 = storage.replace_if_unchanged("latest", b"ckpt-2", etag)
    with pytest.raises(ConditionalWriteError):
        storage.replace_if_unchanged("latest", b"ckpt-3", etag)  # a stale etag: another writer moved it
    assert storage.read("latest") == b"ckpt-2" and storage.client.head("latest").etag == etag2
    assert storage.list("latest") == []  # a prefix lists what is under "latest/", never the object itself
    storage.delete([i.name for i in storage.list("ckpt-1")])
    assert [i.name for i in storage.list()] == ["latest"]


def test_h5py_reads_an_hdf5_object_through_ranged_gets(s3_server: S3TestServer, s3_prefix: str, tmp_path) -> None:  # noqa: ANN001
    h5py = pytest.importorskip("h5py")
    import numpy as np

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

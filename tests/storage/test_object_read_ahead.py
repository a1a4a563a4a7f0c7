"""ObjectStorage's read-ahead on a real S3 server: chunk objects fetched ahead concurrently, within the window."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests._s3server import S3TestServer
from varstore.storage import object_storage
from varstore.storage.object_storage import ObjectStorage

KiB = 1024


def _wait_for_gets(server: S3TestServer, count: int, path_contains: str) -> int:
    """Polls the server log until `count` GETs under `path_contains` arrived (or 10 s passed); returns how many."""
    for _ in range(1000):
        found = len(server.log.matching("GET", path_contains=path_contains))
        if found >= count:
            break
        time.sleep(0.01)
    time.sleep(0.05)  # anything beyond `count` would show up now
    return len(server.log.matching("GET", path_contains=path_contains))


def test_objects_read_ahead_fetches_chunks_before_the_reader_asks_and_serves_every_read(
        s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = ObjectStorage(s3_prefix, s3_server.storage_options)
    chunks = {f"a{i}/c/0": bytes([i]) * (8 * KiB + i) for i in range(6)}
    storage.put_many(chunks.items())
    s3_server.log.clear()
    ahead = storage.read_ahead_objects([(name, len(data)) for name, data in chunks.items()], 1 << 20)
    assert ahead is not None
    try:
        assert _wait_for_gets(s3_server, 6, "/c/0") == 6  # all six fetched with nobody reading yet
        for name, data in chunks.items():
            out = bytearray(len(data))
            storage.read_range(name, 0, len(data), out)
            assert bytes(out) == data
            ahead.done(0)
    finally:
        ahead.stop()
    gets = s3_server.log.matching("GET", path_contains="/c/0")
    assert sorted(r.path.rsplit("/", 3)[1] for r in gets) == sorted(name.split("/")[0] for name in chunks)
    assert len(s3_server.log.requests) == 6  # each chunk once, nothing else (sizes came from the caller)


def test_objects_read_ahead_stays_within_its_window(s3_server: S3TestServer, s3_prefix: str) -> None:
    storage = ObjectStorage(s3_prefix, s3_server.storage_options)
    chunks = {f"b{i}/c/0": bytes([i]) * (16 * KiB) for i in range(6)}
    storage.put_many(chunks.items())
    s3_server.log.clear()
    ahead = storage.read_ahead_objects([(name, len(data)) for name, data in chunks.items()], 32 * KiB)
    assert ahead is not None
    try:
        assert _wait_for_gets(s3_server, 2, "/c/0") == 2  # a 32 KiB window holds two 16 KiB chunks
        out = bytearray(16 * KiB)
        storage.read_range("b0/c/0", 0, 16 * KiB, out)  # the first one read: one more may come
        assert bytes(out) == chunks["b0/c/0"]
        assert _wait_for_gets(s3_server, 3, "/c/0") == 3
    finally:
        ahead.stop()
    assert len(s3_server.log.matching("GET", path_contains="/c/0")) == 3  # stopped: nothing more


def test_a_zarr_restore_on_a_bucket_fetches_every_chunk_object_once_through_the_read_ahead(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    original = ObjectStorage.read_ahead_objects

    def recording(self: ObjectStorage, objects: list[tuple[str, int]], window_bytes: int) -> object:
        started.append(len(objects))
        return original(self, objects, window_bytes)

    monkeypatch.setattr(object_storage.ObjectStorage, "read_ahead_objects", recording)
    values = {f"layer{i}/w": np.full(4 * KiB, i, dtype=np.float32) for i in range(6)}  # 16 KiB each
    url = f"{s3_prefix}/m.zarr"
    vs.save(url, values, layout="per-variable")
    s3_server.log.clear()
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(url, targets)
    assert all(np.array_equal(targets[name], values[name]) for name in values)
    assert started == [6]  # one read-ahead over the six chunk objects
    chunk_gets = [r for r in s3_server.log.matching("GET", path_contains="/w/0")]  # single-chunk arrays: "<array>/0"
    assert sorted(r.path.rsplit("m.zarr/", 1)[1] for r in chunk_gets) == [f"layer{i}/w/0" for i in range(6)]
    assert all(r.bytes_out == 16 * KiB for r in chunk_gets)
    # metadata: one listing, then the root (the commit), which carries every array's zarr.json (the
    # varstore_zarr_nodes attribute of a save to a bucket), and the manifest's chunk; no HEAD
    documents = sorted(r.path.rsplit("m.zarr", 1)[1] for r in s3_server.log.matching("GET", path_contains="zarr.json"))
    assert documents == ["/zarr.json"]
    assert [r.method for r in s3_server.log.requests].count("HEAD") == 0
    assert len(s3_server.log.requests) == 1 + 1 + 1 + 6  # list, root, manifest chunk, chunks


def test_a_node_rewritten_after_the_save_is_fetched_not_taken_from_the_root(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, tmp_path: Path) -> None:
    values = {f"layer{i}/w": np.full(4 * KiB, i, dtype=np.float32) for i in range(3)}
    url = f"{s3_prefix}/m.zarr"
    vs.save(url, values, layout="per-variable")
    client = ObjectStorage(s3_prefix).client
    # another tool rewrites one array: the default chunk key encoding, its chunk moved to <array>/c/0
    document = json.loads(client.get("m.zarr/layer1/w/zarr.json"))
    document["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "/"}}
    client.put("m.zarr/layer1/w/zarr.json", json.dumps(document, indent=2).encode())
    client.put("m.zarr/layer1/w/c/0", client.get("m.zarr/layer1/w/0"))
    client.delete(["m.zarr/layer1/w/0"])
    s3_server.log.clear()
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(url, targets)
    assert all(np.array_equal(targets[name], values[name]) for name in values)
    documents = sorted(r.path.rsplit("m.zarr", 1)[1] for r in s3_server.log.matching("GET", path_contains="zarr.json"))
    assert documents == ["/layer1/w/zarr.json", "/zarr.json"]  # only the changed node is fetched
    # a local save does not carry the copies (its reader opens the files anyway)
    vs.save(tmp_path / "m.zarr", values)
    assert "varstore_zarr_nodes" not in json.loads((tmp_path / "m.zarr/zarr.json").read_text())["attributes"]

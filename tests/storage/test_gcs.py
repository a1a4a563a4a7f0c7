"""gs:// against our model of the GCS XML API (tests/_gcsserver.py; a model of GCS, not GCS).

What differs from S3 and Azure: GCS matches a conditional replace on the object's generation, not
its ETag, so the version tag carries both; the model itself is checked where the client relies on
it (generation preconditions, ranged reads, listing pages).
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from xml.etree import ElementTree

import numpy as np
import pytest

import varstore as vs
from tests._gcsserver import GCSTestServer
from varstore.checkpoint.publish import remote
from varstore.errors import ConditionalWriteError, ObjectStoreError
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient


def _client(server: GCSTestServer, url: str) -> ObjectStoreClient:
    return ObjectStoreClient(url, server.storage_options, environ={})


def _request(server: GCSTestServer, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(server.endpoint + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_gcs_replaces_only_the_generation_it_read(gs_server: GCSTestServer, gs_prefix: str) -> None:
    client = _client(gs_server, gs_prefix)
    etag, generation = client.put_if_version("latest", b"ckpt-100", None)
    assert etag == '"' + hashlib.md5(b"ckpt-100").hexdigest() + '"' and generation and generation.isdigit()
    info = client.head("latest")
    assert (info.etag, info.version, info.size) == (etag, generation, 8)
    with pytest.raises(ConditionalWriteError, match="latest lost the race: the object already exists"):
        client.put_if_absent("latest", b"ckpt-999")
    with pytest.raises(ObjectStoreError, match="Version required for conditional update"):
        client.put_if_match("latest", b"ckpt-200", etag)  # the ETag alone: GCS's client refuses
    second = client.put_if_match("latest", b"ckpt-200", etag, generation)
    assert second == '"' + hashlib.md5(b"ckpt-200").hexdigest() + '"'
    with pytest.raises(ConditionalWriteError, match="latest lost the race: the object changed"):
        client.put_if_match("latest", b"ckpt-150", etag, generation)  # a stale generation
    assert client.get("latest") == b"ckpt-200" and int(client.head("latest").version or 0) > int(generation)


def test_storage_version_tag_carries_the_generation(gs_server: GCSTestServer, gs_prefix: str) -> None:
    storage = ObjectStorage(gs_prefix, client=_client(gs_server, gs_prefix))
    assert storage.version("latest") is None
    first = storage.put_if("latest", b"ckpt-1", None)
    info = storage.client.head("latest")
    assert first == f"{info.etag} generation={info.version}" == storage.version("latest")
    second = storage.put_if("latest", b"ckpt-2", first)
    with pytest.raises(FileExistsError, match="latest lost the race"):
        storage.put_if("latest", b"ckpt-3", first)
    assert storage.read_all("latest") == b"ckpt-2" and storage.version("latest") == second != first


def test_every_request_goes_to_the_model_and_names_the_bucket(gs_env: dict[str, str], gs_server: GCSTestServer,
                                                              gs_prefix: str) -> None:
    # a token request would go to the GCE metadata server (169.254.169.254), unreachable here: the
    # save and load finishing at all shows none was made; the log shows what the client did send
    vs.save(f"{gs_prefix}/one.h5", {"w": np.arange(6.0).reshape(2, 3)})
    assert vs.load(f"{gs_prefix}/one.h5")["w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    requests = gs_server.log.matching()
    assert requests and all(r.path.startswith(f"/{gs_server.bucket}") for r in requests)
    assert {r.method for r in requests} <= {"GET", "HEAD", "PUT", "POST", "DELETE"}


def test_the_model_refuses_a_wrong_generation_and_serves_ranges(gs_server: GCSTestServer, gs_prefix: str) -> None:
    path = f"/{gs_server.bucket}/{gs_prefix.split('/', 3)[3]}/obj"
    status, headers, _ = _request(gs_server, "PUT", path, b"0123456789", {"x-goog-if-generation-match": "0"})
    assert status == 200
    generation = headers["x-goog-generation"]
    status, _, body = _request(gs_server, "PUT", path, b"x", {"x-goog-if-generation-match": "0"})
    assert status == 412 and b"PreconditionFailed" in body
    status, _, _ = _request(gs_server, "PUT", path, b"x", {"x-goog-if-generation-match": str(int(generation) + 5)})
    assert status == 412
    status, headers, body = _request(gs_server, "GET", path, headers={"Range": "bytes=2-4"})
    assert (status, body, headers["Content-Range"]) == (206, b"234", "bytes 2-4/10")
    status, _, _ = _request(gs_server, "GET", path, headers={"If-Match": '"stale"'})
    assert status == 412
    status, _, _ = _request(gs_server, "PUT", path + "-copy", b"", {"x-goog-copy-source": path})
    assert status == 200 and _request(gs_server, "GET", path + "-copy")[2] == b"0123456789"


def test_the_model_lists_in_pages_with_common_prefixes(gs_server: GCSTestServer, gs_prefix: str) -> None:
    client = _client(gs_server, gs_prefix)
    client.put_many([(name, b"x") for name in ("a/1", "a/2", "b", "c/1", "d")])
    root = gs_prefix.split("/", 3)[3] + "/"
    keys: list[str] = []
    token = ""
    for _ in range(10):
        query = f"list-type=2&prefix={root}&delimiter=/&max-keys=2" + (f"&continuation-token={token}" if token else "")
        status, _, body = _request(gs_server, "GET", f"/{gs_server.bucket}?{query}")
        page = ElementTree.fromstring(body)
        assert status == 200 and len(list(page.iter("Contents"))) + len(list(page.iter("CommonPrefixes"))) <= 2
        keys += [e.text or "" for e in page.iter("Key")] + [p.findtext("Prefix") or "" for p in page.iter("CommonPrefixes")]
        token = page.findtext("NextContinuationToken") or ""
        if page.findtext("IsTruncated") == "false":
            break
    assert sorted(k[len(root):] for k in keys) == ["a/", "b", "c/", "d"]
    directories, objects = client.list_children()
    assert directories == ["a", "c"] and [(i.name, i.size, i.etag) for i in objects] == [
        ("b", 1, client.head("b").etag), ("d", 1, client.head("d").etag)]
    assert [i.name for i in client.list()] == ["a/1", "a/2", "b", "c/1", "d"]
    assert objects[0].version is None  # a listing names no generation: put_if reads it with a HEAD


# ------------------------------------------------------------------ checkpoints on gs:// (what S3's tests check by request log)
def test_hdf5_opens_with_one_ranged_get_and_reads_one_variable_by_range(gs_env: dict[str, str],
                                                                         gs_server: GCSTestServer,
                                                                         gs_prefix: str) -> None:
    values = {"a": np.arange(64 * 1024, dtype=np.float32), "b": np.linspace(0, 1, 32 * 1024)}
    url = f"{gs_prefix}/model.h5"
    vs.save(url, values, pack_threshold_bytes=4096)
    gs_server.log.clear()
    with vs.open_checkpoint(url) as reader:
        opened = list(gs_server.log.requests)
        np.testing.assert_array_equal(reader.read("b"), values["b"])
    assert [(r.method, r.range) for r in opened][:1] == [("GET", "bytes=0-4095")]  # no HEAD first
    gets = gs_server.log.matching("GET", path_contains="model.h5")
    assert gets and all(r.range is not None for r in gets)  # never the whole object
    assert [r.bytes_out for r in gets if r not in opened] == [values["b"].nbytes]


def test_zarr_commit_object_goes_last_and_a_killed_save_is_swept(gs_env: dict[str, str], gs_server: GCSTestServer,
                                                                 gs_prefix: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    gs_server.log.clear()
    vs.save(f"{gs_prefix}/runs/ckpt-3.zarr", {f"l{i}/w": np.full((8, 8), i, dtype=np.float32) for i in range(4)},
            pack_threshold_bytes=0)
    puts = gs_server.log.matching("PUT")
    assert len(puts) >= 5 and puts[-1].path.endswith("/runs/ckpt-3.zarr/zarr.json")
    client = _client(gs_server, gs_prefix)
    client.put_many([("runs/ckpt-1.zarr/_varstore/pending", b"{}"), ("runs/ckpt-1.zarr/w/c/0", b"x" * 8),
                     ("runs/other-tool/data.bin", b"keep me")])
    monkeypatch.setattr(remote, "SWEEP_GRACE_SECONDS", 0.0)
    vs.save(f"{gs_prefix}/runs/ckpt-4.zarr", {"w": np.arange(2.0)})
    assert client.list("runs/ckpt-1.zarr") == [] and client.get("runs/other-tool/data.bin") == b"keep me"
    assert client.incomplete_uploads("runs") == []  # GCS: a lifecycle rule's job, never listed here
    assert vs.load(f"{gs_prefix}/runs/ckpt-3.zarr")["l2/w"].tolist() == [[2.0] * 8] * 8


def test_a_large_object_goes_up_as_an_xml_multipart_upload(gs_server: GCSTestServer, gs_prefix: str) -> None:
    client = ObjectStoreClient(gs_prefix, gs_server.storage_options, environ={}, part_size=5 * 1024 * 1024)
    data = bytes(range(256)) * (11 * 4096)  # 11 MiB: three parts of 5, 5 and 1 MiB
    gs_server.log.clear()
    etag = client.put_multipart("big.bin", lambda: [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)])
    calls = [(r.method, r.query.split("&")[0].split("=")[0]) for r in gs_server.log.requests]
    assert calls[0] == ("POST", "uploads") and calls[-1] == ("POST", "uploadId")
    assert sorted(r.bytes_in for r in gs_server.log.matching("PUT", query_contains="partNumber")) == [
        1 << 20, 5 << 20, 5 << 20]
    assert client.head("big.bin").etag == etag and client.get("big.bin") == data

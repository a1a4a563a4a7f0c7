"""ObjectStoreClient against moto's S3 server: ranged reads, conditional writes, multipart, listing, sweep."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import urllib.request

import pytest

from tests._s3server import S3TestServer
from varstore.errors import ConditionalWriteError, ObjectChangedError, ObjectNotFoundError, ObjectStoreError
from varstore.storage.object_store import ObjectStoreClient, parse_url

MiB = 1024 * 1024


def _client(server: S3TestServer, url: str, **kwargs: object) -> ObjectStoreClient:
    return ObjectStoreClient(url, server.storage_options, **kwargs)  # type: ignore[arg-type]


def test_ranged_reads_fetch_only_the_requested_bytes(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    payload = bytes(range(256)) * 4096  # 1 MiB
    client.put("model.h5", payload)
    s3_server.log.clear()
    out = bytearray(100)
    view = client.get_range("model.h5", 1000, 100, out=out)
    assert bytes(out) == payload[1000:1100] and bytes(view) == payload[1000:1100]
    assert bytes(client.get_range("model.h5", 500_000, 4096)) == payload[500_000:504_096]
    gets = s3_server.log.matching("GET", "/model.h5")
    assert [r.range for r in gets] == ["bytes=1000-1099", "bytes=500000-504095"]
    assert [r.bytes_out for r in gets] == [100, 4096]
    assert client.requests["GET"] == 2 and client.bytes_read == 4196


def test_a_truncated_object_is_an_error_naming_the_url(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    client.put("short", b"0123456789")
    with pytest.raises(Exception, match=rf"{s3_prefix}/short bytes \[5, 25\) returned 5 bytes"):
        client.get_range("short", 5, 20)


def test_head_list_and_delete(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    etag_a = client.put("a/x.bin", b"12345")
    client.put("a/y.bin", b"1")
    client.put("ab/z.bin", b"123")
    info = client.head("a/x.bin")
    assert (info.name, info.size, info.etag) == ("a/x.bin", 5, etag_a)
    assert info.etag == '"' + hashlib.md5(b"12345").hexdigest() + '"'
    assert abs((info.last_modified - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 300
    assert [(i.name, i.size) for i in client.list("a")] == [("a/x.bin", 5), ("a/y.bin", 1)]
    assert [i.name for i in client.list()] == ["a/x.bin", "a/y.bin", "ab/z.bin"]
    assert client.exists("a/x.bin") and not client.exists("a")
    client.delete(["a/x.bin", "a/y.bin", "a/never-there"])
    assert [i.name for i in client.list()] == ["ab/z.bin"]
    with pytest.raises(ObjectNotFoundError, match=rf"no object at {s3_prefix}/a/x.bin"):
        client.size("a/x.bin")
    with pytest.raises(FileNotFoundError):
        client.get("a/x.bin")


def test_create_only_put_has_exactly_one_winner(s3_server: S3TestServer, s3_prefix: str) -> None:
    clients = [_client(s3_server, s3_prefix) for _ in range(4)]
    results: list[str] = []
    barrier = threading.Barrier(len(clients))

    def writer(i: int) -> None:
        barrier.wait()
        try:
            clients[i].put_if_absent("manifest.json", f"writer {i}".encode())
            results.append(f"won {i}")
        except ConditionalWriteError as err:
            results.append(f"lost {i}: {err}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.startswith("won")]
    assert len(winners) == 1 and len(results) == 4
    assert clients[0].get("manifest.json") == f"writer {winners[0].split()[1]}".encode()
    assert all("already exists (another writer won)" in r for r in results if r.startswith("lost"))


def test_if_match_put_detects_a_lost_update(s3_server: S3TestServer, s3_prefix: str) -> None:
    first, second = _client(s3_server, s3_prefix), _client(s3_server, s3_prefix)
    etag0 = first.put_if_absent("latest", b"step-100")
    seen_by_first = first.head("latest").etag
    seen_by_second = second.head("latest").etag
    assert seen_by_first == seen_by_second == etag0
    etag1 = first.put_if_match("latest", b"step-200", seen_by_first)  # type: ignore[arg-type]
    with pytest.raises(ConditionalWriteError, match=rf"{s3_prefix}/latest lost the race: the object changed"):
        second.put_if_match("latest", b"step-150", seen_by_second)  # type: ignore[arg-type]
    assert second.get("latest") == b"step-200" and second.head("latest").etag == etag1 != etag0


def test_multipart_upload_pulls_parts_lazily_with_bounded_requests(s3_server: S3TestServer, s3_prefix: str) -> None:
    part, in_flight, parts = 5 * MiB, 2, 5
    client = _client(s3_server, s3_prefix, part_size=part, max_in_flight=in_flight)
    read_ahead: list[int] = []
    digest = hashlib.sha256()

    def source():  # noqa: ANN202
        for i in range(parts):
            done = len([r for r in s3_server.log.matching("PUT", query_contains="partNumber") if r.status == 200])
            read_ahead.append(i - done)  # parts handed out but not yet stored by the server
            chunk = bytes([i + 1]) * part
            digest.update(chunk)
            yield chunk

    s3_server.log.clear()
    etag = client.put_multipart("big.h5", source)
    assert etag is not None and etag.endswith(f'-{parts}"')
    assert max(read_ahead) <= in_flight + 1, read_ahead  # memory: at most (in_flight + 1) parts held
    part_puts = s3_server.log.matching("PUT", query_contains="partNumber")
    assert len(part_puts) == parts and all(r.bytes_in == part for r in part_puts)
    assert s3_server.log.peak_in_flight <= in_flight + 1
    assert client.size("big.h5") == parts * part and client.bytes_written == parts * part
    assert hashlib.sha256(client.get("big.h5")).hexdigest() == digest.hexdigest()


def test_multipart_from_a_local_file(s3_server: S3TestServer, s3_prefix: str, tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "model.bin"
    data = bytes(range(251)) * (11 * MiB // 251)
    path.write_bytes(data)
    client = _client(s3_server, s3_prefix, part_size=5 * MiB, max_in_flight=2)
    client.put_multipart("model.bin", path)
    assert client.get("model.bin") == data
    assert len(s3_server.log.matching("PUT", query_contains="partNumber")) == 3


def test_put_many_bounds_requests_in_flight(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix, max_in_flight=3)
    s3_server.log.clear()
    count = client.put_many((f"c/{i}", i.to_bytes(4, "little") * 64) for i in range(24))
    assert count == 24
    assert s3_server.log.peak_in_flight <= 3
    assert len(s3_server.log.matching("PUT", "/c/")) == 24
    assert client.get("c/17") == (17).to_bytes(4, "little") * 64
    assert [i.name for i in client.list("c")] == sorted(f"c/{i}" for i in range(24))


def _start_multipart(server: S3TestServer, url: str) -> None:
    """Starts a multipart upload and never completes it: what a killed writer leaves behind."""
    parsed = parse_url(url)
    request = urllib.request.Request(f"{server.endpoint}/{parsed.bucket}/{parsed.key}?uploads", method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def test_incomplete_uploads_are_listed_and_swept_after_the_grace_period(
        s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    _start_multipart(s3_server, f"{s3_prefix}/ckpt-1/model.h5")
    _start_multipart(s3_server, f"{s3_prefix}/ckpt-2/model.h5")
    listed = client.incomplete_uploads()
    assert sorted(name for name, _ in listed) == ["ckpt-1/model.h5", "ckpt-2/model.h5"]
    assert [name for name, _ in client.incomplete_uploads("ckpt-2")] == ["ckpt-2/model.h5"]
    # moto reports every upload as initiated 2010-11-10T20:48:33Z, so the clock is set relative to it
    initiated = listed[0][1]
    assert all(when.tzinfo is not None for _, when in listed)
    soon = initiated + dt.timedelta(minutes=30)
    assert client.abort_incomplete_uploads(older_than=3600, now=soon) == []  # inside the grace period
    later = initiated + dt.timedelta(hours=2)
    assert client.abort_incomplete_uploads("ckpt-1", older_than=3600, now=later) == ["ckpt-1/model.h5"]
    assert [name for name, _ in client.incomplete_uploads()] == ["ckpt-2/model.h5"]
    assert client.list() == []  # an incomplete upload is never a listed object


def test_list_children_lists_one_level(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    client.put_many([("run/ckpt-1.zarr/zarr.json", b"{}"), ("run/ckpt-1.zarr/c/0", b"x"),
                     ("run/ckpt-2.h5", b"hdf"), ("run/latest", b"ckpt-2.h5")])
    directories, objects = client.list_children("run")
    assert directories == ["run/ckpt-1.zarr"]
    assert [(o.name, o.size) for o in objects] == [("run/ckpt-2.h5", 3), ("run/latest", 9)]


def test_a_conditional_write_that_finds_its_own_bytes_succeeds(s3_server: S3TestServer, s3_prefix: str) -> None:
    # what a retry sees when the first PUT landed but its response was lost
    client = _client(s3_server, s3_prefix)
    etag = client.put_if_absent("manifest", b"writer-7f3a step 5")
    assert client.put_if_absent("manifest", b"writer-7f3a step 5") == etag
    with pytest.raises(ConditionalWriteError, match="already exists"):
        client.put_if_absent("manifest", b"writer-0b1c step 5")


def test_get_head_brings_size_etag_and_first_bytes_in_one_request(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    payload = bytes(range(256)) * 64  # 16 KiB
    etag = client.put("model.h5", payload)
    client.put("small", b"abc")
    client.put("empty", b"")
    s3_server.log.clear()
    info, head = client.get_head("model.h5", 4096)
    assert (info.name, info.size, info.etag, bytes(head)) == ("model.h5", 16384, etag, payload[:4096])
    info, head = client.get_head("small", 4096)  # shorter than asked: all of it
    assert (info.size, bytes(head)) == (3, b"abc")
    assert [(r.method, r.range) for r in s3_server.log.requests] == [("GET", "bytes=0-4095")] * 2
    info, head = client.get_head("empty", 4096)  # answers a range with 416: a HEAD more
    assert (info.size, bytes(head)) == (0, b"")
    with pytest.raises(ObjectNotFoundError, match="missing"):
        client.get_head("missing", 4096)


def test_a_read_pinned_to_an_etag_refuses_a_replaced_object(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = _client(s3_server, s3_prefix)
    old = client.put("model.h5", b"A" * 1000)
    assert bytes(client.get_range_view("model.h5", 10, 5, etag=old)) == b"AAAAA"
    assert s3_server.log.requests[-1].range == "bytes=10-14"
    client.put("model.h5", b"B" * 1000)  # another save replaced it
    with pytest.raises(ObjectChangedError, match=rf"{s3_prefix}/model.h5 changed while it was being read"):
        client.get_range_view("model.h5", 10, 5, etag=old)
    assert bytes(client.get_range_view("model.h5", 10, 5)) == b"BBBBB"  # unpinned reads see the new one


def test_listing_a_missing_bucket_says_so_on_s3_too(s3_server: S3TestServer) -> None:
    """A LIST of a bucket that does not exist is a 404 (S3 NoSuchBucket, Azure ContainerNotFound): named as such."""
    client = ObjectStoreClient("s3://no-such-bucket-7c1/runs", s3_server.storage_options)
    with pytest.raises(ObjectStoreError, match=r"LIST s3://no-such-bucket-7c1/runs/a failed: the bucket \(container\) "
                                               r"'no-such-bucket-7c1' does not exist .*\(NoSuchBucket\); create it"):
        client.list("a")

"""Faults between client and server (a TCP proxy that cuts and delays): retries, then a typed error naming the URL."""

from __future__ import annotations

import logging
import urllib.parse

import pytest

from tests._s3server import S3TestServer
from tests.storage._fault_proxy import Faults, FaultProxy
from varstore.errors import ObjectStoreError
from varstore.storage.object_store import ObjectStoreClient, RetryPolicy

FAST = RetryPolicy(attempts=3, initial_backoff=0.01, max_backoff=0.05, client_retries=0, timeout=5.0)


def _proxy(server: S3TestServer, faults: Faults) -> FaultProxy:
    parts = urllib.parse.urlsplit(server.endpoint)
    return FaultProxy(parts.hostname or "127.0.0.1", parts.port or 80, faults, lifetime=60)


def _client(server: S3TestServer, url: str, endpoint: str, retry: RetryPolicy = FAST) -> ObjectStoreClient:
    return ObjectStoreClient(url, {**server.storage_options, "endpoint": endpoint}, retry=retry)


def test_the_proxy_passes_bytes_through_unchanged(s3_server: S3TestServer, s3_prefix: str) -> None:
    with _proxy(s3_server, Faults()) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint)
        client.put("x", b"a" * 10_000)
        assert client.get("x") == b"a" * 10_000
        assert proxy.bytes_up > 10_000 and proxy.bytes_down > 10_000 and proxy.cuts == 0


def test_a_read_cut_every_time_fails_after_the_retries_naming_the_url(
        s3_server: S3TestServer, s3_prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    _client(s3_server, s3_prefix, s3_server.endpoint).put("model.h5", bytes(200_000))
    with _proxy(s3_server, Faults(cut_downstream_after=1000)) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint)
        with caplog.at_level(logging.DEBUG), pytest.raises(
                ObjectStoreError, match=rf"GET {s3_prefix}/model.h5 failed after 3 attempt\(s\)"):
            client.get_range("model.h5", 0, 150_000)
        assert client.requests["GET"] == 3 and proxy.cuts >= 3


def test_a_read_recovers_when_only_the_first_connections_are_cut(s3_server: S3TestServer, s3_prefix: str) -> None:
    payload = bytes(range(256)) * 400
    _client(s3_server, s3_prefix, s3_server.endpoint).put("model.h5", payload)
    with _proxy(s3_server, Faults(cut_downstream_after=500, cut_connections=2)) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint)
        assert bytes(client.get_range("model.h5", 100, 90_000)) == payload[100:90_100]
        assert proxy.cuts == 2 and client.requests["GET"] == 3


def test_an_upload_cut_midway_leaves_no_object(s3_server: S3TestServer, s3_prefix: str) -> None:
    with _proxy(s3_server, Faults(cut_upstream_after=20_000)) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint)
        with pytest.raises(ObjectStoreError, match=rf"PUT {s3_prefix}/model.h5 failed after 3 attempt"):
            client.put("model.h5", bytes(100_000))
        assert proxy.cuts >= 3
    direct = _client(s3_server, s3_prefix, s3_server.endpoint)
    assert direct.list() == [] and not direct.exists("model.h5")


def test_a_slow_response_within_the_timeout_succeeds(s3_server: S3TestServer, s3_prefix: str) -> None:
    _client(s3_server, s3_prefix, s3_server.endpoint).put("k", b"value")
    with _proxy(s3_server, Faults(delay=0.3)) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint)
        assert client.get("k") == b"value" and client.requests["GET"] == 1


def test_a_response_slower_than_the_timeout_is_a_typed_error(s3_server: S3TestServer, s3_prefix: str) -> None:
    _client(s3_server, s3_prefix, s3_server.endpoint).put("k", b"value")
    slow = RetryPolicy(attempts=2, initial_backoff=0.01, client_retries=0, timeout=0.5)
    with _proxy(s3_server, Faults(delay=1.5)) as proxy:
        client = _client(s3_server, s3_prefix, proxy.endpoint, slow)
        with pytest.raises(ObjectStoreError, match=rf"GET {s3_prefix}/k failed after 2 attempt"):
            client.get("k")


def test_a_server_that_is_gone_is_a_typed_error(s3_server: S3TestServer, s3_prefix: str) -> None:
    proxy = _proxy(s3_server, Faults())
    endpoint = proxy.endpoint
    proxy.stop()  # nothing listens on that port any more
    client = _client(s3_server, s3_prefix, endpoint)
    with pytest.raises(ObjectStoreError, match=rf"HEAD {s3_prefix}/k failed after 3 attempt"):
        client.size("k")


def test_a_multipart_upload_cut_midway_is_aborted_and_leaves_nothing(s3_server: S3TestServer, s3_prefix: str) -> None:
    part = 5 * 1024 * 1024
    once = RetryPolicy(attempts=1, client_retries=0, timeout=10.0)
    with _proxy(s3_server, Faults(cut_upstream_after=part // 2)) as proxy:
        client = ObjectStoreClient(s3_prefix, {**s3_server.storage_options, "endpoint": proxy.endpoint},
                                   retry=once, part_size=part, max_in_flight=1)
        with pytest.raises(ObjectStoreError, match=rf"PUT {s3_prefix}/big.h5 failed after 1 attempt"):
            client.put_multipart("big.h5", lambda: (bytes([i]) * part for i in range(3)))
    direct = _client(s3_server, s3_prefix, s3_server.endpoint)
    assert direct.list() == []
    assert direct.incomplete_uploads() == []  # obstore aborted the upload it failed

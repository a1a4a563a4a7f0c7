"""az:// end to end against Azurite (a real Blob service on 127.0.0.1, started by the az_server fixture).

The issue-13 behaviours that tests/checkpoint/test_remote*.py check on S3 (moto), here on Azure
Blob storage: round trips, ranged HDF5 reads, plain Zarr, commit without rename and the sweep, the
manager's conditional `latest`, convert, the CLI from the environment alone, and redaction.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

import varstore as vs
from tests._azserver import (AZURITE_FLAGS, AZURITE_VERSION, AzuriteServer, AzuriteUnavailable, cache_dir,
                             install_azurite, shared_key_request)
from tests.storage._fault_proxy import FaultProxy, Faults
from varstore.checkpoint import is_varstore_checkpoint
from varstore.checkpoint.publish import remote
from varstore.dtypes import as_dtype
from varstore.errors import (CheckpointNotFoundError, ConditionalWriteError, ObjectNotFoundError,
                             ObjectStoreError)
from varstore.storage.object_store import ObjectStoreClient

KiB = 1024


def _values() -> dict[str, np.ndarray]:
    bf16 = as_dtype("bfloat16")
    return {"enc/w": np.arange(64 * KiB, dtype=np.float32).reshape(256, 256),          # 256 KiB
            "enc/b": np.array([0.5, -0.25, 1.5], dtype=bf16),
            "dec/w": (np.arange(16 * KiB, dtype=np.float64) % 97).reshape(64, 256),    # 128 KiB
            "dec/half": np.array([[1.0, -2.0], [0.125, 65504.0]], dtype=np.float16),
            "mask": np.array([True, False, True]),
            "step_count": np.array(1200, dtype=np.int64)}


def _client(server: AzuriteServer, url: str, endpoint: str | None = None) -> ObjectStoreClient:
    options = dict(server.storage_options)
    if endpoint:
        options["endpoint"] = endpoint
    return ObjectStoreClient(url, options, environ={})


@pytest.fixture
def cli() -> Callable[..., Result]:
    from varstore_cli.main import cli as command

    runner = CliRunner()
    return lambda *args: runner.invoke(command, [str(a) for a in args], prog_name="varstore")


# ------------------------------------------------------------------ the server helper (no server needed)
def test_the_install_is_taken_as_done_only_when_complete_and_says_what_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "azurite-x"
    leftover = tmp_path / "azurite-x.tmp-4242" / "node_modules" / ".bin"  # a killed install's staging
    leftover.mkdir(parents=True)
    (leftover / "azurite-blob").write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AzuriteUnavailable, match="Azurite needs Node.js: npm is not on PATH"):
        install_azurite(target)
    assert not target.exists()
    (target / "node_modules" / ".bin").mkdir(parents=True)
    (target / "node_modules" / ".bin" / "azurite-blob").write_text("")
    assert install_azurite(target) == target / "node_modules" / ".bin" / "azurite-blob"  # no npm needed
    monkeypatch.setenv("VARSTORE_TEST_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache" / f"azurite-{AZURITE_VERSION}"
    assert "--disableTelemetry" in AZURITE_FLAGS and AZURITE_VERSION == "3.37.0"


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_save_restore_open_and_load_round_trip_every_dtype(az_env: dict[str, str], az_prefix: str,
                                                           suffix: str) -> None:
    values = _values()
    url = f"{az_prefix}/runs/a7/model.{suffix}"
    assert vs.save(url, values, step=1200, metadata={"lr": 0.1}) == url
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    assert sorted(vs.restore(url, targets).restored) == sorted(values)
    for name, value in values.items():
        assert targets[name].dtype == value.dtype and targets[name].shape == value.shape
        np.testing.assert_array_equal(targets[name], value)
    with vs.open_checkpoint(url) as reader:
        assert (reader.step, reader.metadata, reader.location) == (1200, {"lr": 0.1}, url)
        assert reader.format == f"varstore-{'hdf5' if suffix == 'h5' else 'zarr'}"
        assert reader.info("enc/b").dtype == "bfloat16"
        assert reader.read("enc/b").astype(np.float32).tolist() == [0.5, -0.25, 1.5]
        assert reader.read("step_count").shape == () and int(reader.read("step_count")) == 1200
    loaded = vs.load(url)
    assert sorted(loaded) == sorted(values)
    assert loaded["dec/half"].tolist() == [[1.0, -2.0], [0.125, 65504.0]] and loaded["mask"].tolist() == [1, 0, 1]
    assert is_varstore_checkpoint(url) and not is_varstore_checkpoint(f"{az_prefix}/runs/a7/none.{suffix}")


def test_storage_options_alone_reach_azurite(az_server: AzuriteServer, az_prefix: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("AZURE_", "AZURITE_"))]:
        monkeypatch.delenv(name)
    options = az_server.storage_options
    url = f"{az_prefix}/m.zarr"
    vs.save(url, {"w": np.arange(5.0)}, storage_options=options)
    assert vs.load(url, storage_options=options)["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    client = _client(az_server, az_prefix)
    assert repr(client) == f"ObjectStoreClient({az_prefix!r}, endpoint={az_server.endpoint!r})"


def test_the_emulator_switch_and_azurite_url_from_the_environment(az_server: AzuriteServer, az_prefix: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """AZURE_STORAGE_USE_EMULATOR + AZURITE_BLOB_STORAGE_URL: the development account, no key given."""
    for name in [n for n in os.environ if n.startswith(("AZURE_", "AZURITE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{az_server.port}")
    url = f"{az_prefix}/emu.h5"
    vs.save(url, {"w": np.arange(3, dtype=np.int32)})
    assert vs.load(url)["w"].tolist() == [0, 1, 2]
    client = ObjectStoreClient(az_prefix)
    assert client._resolved.endpoint == az_server.endpoint and client._resolved.allow_http


# ------------------------------------------------------------------ ranged reads
def test_hdf5_open_and_one_variable_read_far_fewer_bytes_than_the_object(az_env: dict[str, str],
                                                                        az_server: AzuriteServer,
                                                                        az_prefix: str) -> None:
    values = {f"layer{i}/w": np.full(64 * KiB, i, dtype=np.float32) for i in range(8)}  # 256 KiB each, 2 MiB
    url = f"{az_prefix}/model.h5"
    vs.save(url, values)
    size = _client(az_server, az_prefix).size("model.h5")
    assert size > 8 * 256 * KiB
    with FaultProxy("127.0.0.1", az_server.port) as proxy:  # counts every byte Azurite sends back
        options = {"endpoint": f"{proxy.endpoint}/{az_server.account}"}
        with vs.open_checkpoint(url, storage_options=options) as reader:
            opened = proxy.bytes_down
            assert reader.read("layer5/w")[:3].tolist() == [5.0, 5.0, 5.0]
        total = proxy.bytes_down
    assert opened < 16 * KiB                                  # the first 4 KiB (index header), the manifest
    assert 256 * KiB <= total - opened < 256 * KiB + 8 * KiB  # the one variable, plus response headers
    assert total < size // 6


@pytest.mark.parametrize("suffix", ["h5", "zarr"])
def test_cut_connections_are_retried_on_azure_too(az_server: AzuriteServer, az_prefix: str, suffix: str) -> None:
    values = {f"layer{i}/w": np.full((128, 128), i, dtype=np.float32) for i in range(4)}  # 64 KiB each
    url = f"{az_prefix}/m.{suffix}"
    with FaultProxy("127.0.0.1", az_server.port, Faults(cut_upstream_after=200, cut_connections=2),
                    lifetime=60) as proxy:
        vs.save(url, values, pack_threshold_bytes=0,
                storage_options={**az_server.storage_options, "endpoint": f"{proxy.endpoint}/{az_server.account}"})
        assert proxy.cuts == 2
    with FaultProxy("127.0.0.1", az_server.port, Faults(cut_downstream_after=100, cut_connections=2),
                    lifetime=60) as proxy:
        out = {name: np.zeros_like(value) for name, value in values.items()}
        vs.restore(url, out,
                   storage_options={**az_server.storage_options, "endpoint": f"{proxy.endpoint}/{az_server.account}"})
        assert proxy.cuts == 2
    assert all(np.array_equal(out[name], values[name]) for name in values)


# ------------------------------------------------------------------ plain Zarr
def test_a_zarr_checkpoint_in_the_container_is_plain_zarr_v3(az_env: dict[str, str], az_server: AzuriteServer,
                                                             az_prefix: str) -> None:
    zarr = pytest.importorskip("zarr")
    from obstore.store import AzureStore

    many = {f"layer{i:02d}/w": np.full((32, 32), i, dtype=np.float32) for i in range(6)}
    vs.save(f"{az_prefix}/model.zarr", many, step=3, pack_threshold_bytes=0)
    key = _client(az_server, az_prefix).url.key
    store = AzureStore(az_server.container, prefix=f"{key}/model.zarr", account_name=az_server.account,
                       account_key=az_server.key, endpoint=az_server.endpoint, client_options={"allow_http": True})
    group = zarr.open_group(zarr.storage.ObjectStore(store, read_only=True), mode="r")
    assert group.attrs["step"] == 3
    np.testing.assert_array_equal(group["layer04/w"][...], many["layer04/w"])
    names = [info.name for info in _client(az_server, az_prefix).list("model.zarr")]
    assert "model.zarr/zarr.json" in names and not any(n.endswith(remote.PENDING_MARKER) for n in names)


# ------------------------------------------------------------------ commit without rename, sweep
def test_uncommitted_blocks_of_a_killed_hdf5_upload_are_invisible(az_env: dict[str, str], az_server: AzuriteServer,
                                                                  az_prefix: str) -> None:
    """A block blob exists only once its block list is committed: what a killed upload staged is not an object."""
    client = _client(az_server, az_prefix)
    blob = f"/{az_server.container}/{client.url.key}/runs/ckpt-2.h5"
    block_id = base64.b64encode(b"block-000001").decode()
    status, _ = shared_key_request(az_server.endpoint, az_server.account, az_server.key, "PUT", blob,
                                   {"comp": "block", "blockid": block_id}, body=b"\x89HDF" * 256)
    assert status == 201
    assert client.list("runs") == [] and not client.exists("runs/ckpt-2.h5")
    assert client.incomplete_uploads("runs") == []  # Azure lists no uploads; the service drops blocks in 7 days
    with pytest.raises(CheckpointNotFoundError, match=r"ckpt-2.h5"):
        vs.open_checkpoint(f"{az_prefix}/runs/ckpt-2.h5")
    assert vs.CheckpointManager(f"{az_prefix}/runs").checkpoints == []


def test_a_large_hdf5_checkpoint_goes_up_as_one_block_blob_of_8_mib_blocks(
        az_env: dict[str, str], az_server: AzuriteServer, az_prefix: str) -> None:
    big = {"w": np.arange(12 * 1024 * 1024 // 8, dtype=np.float64)}  # 12 MiB: two blocks
    vs.save(f"{az_prefix}/big.h5", big)
    key = _client(az_server, az_prefix).url.key
    status, body = shared_key_request(az_server.endpoint, az_server.account, az_server.key, "GET",
                                      f"/{az_server.container}/{key}/big.h5", {"comp": "blocklist",
                                                                              "blocklisttype": "all"})
    sizes = [int(size) for size in re.findall(rb"<Size>(\d+)</Size>", body)]
    assert status == 200 and b"<UncommittedBlocks/>" in body  # every block is committed, none left behind
    assert len(sizes) == 2 and sizes[0] == 8 * 1024 * 1024
    assert sum(sizes) == _client(az_server, az_prefix).size("big.h5")
    with vs.open_checkpoint(f"{az_prefix}/big.h5") as reader:
        np.testing.assert_array_equal(reader.read("w"), big["w"])


def test_the_next_save_sweeps_abandoned_saves_after_the_grace_period(az_env: dict[str, str], az_server: AzuriteServer,
                                                                    az_prefix: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client(az_server, az_prefix)
    client.put_many([("runs/ckpt-1.zarr/_varstore/pending", b"{}"), ("runs/ckpt-1.zarr/w/c/0", b"x" * 8),
                     ("runs/other-tool/data.bin", b"keep me")])
    vs.save(f"{az_prefix}/runs/ckpt-3.zarr", {"w": np.arange(2.0)})  # within the grace period: nothing swept
    assert client.exists("runs/ckpt-1.zarr/w/c/0")
    monkeypatch.setattr(remote, "SWEEP_GRACE_SECONDS", 0.0)
    vs.save(f"{az_prefix}/runs/ckpt-4.zarr", {"w": np.arange(2.0)})
    assert client.list("runs/ckpt-1.zarr") == []
    assert client.get("runs/other-tool/data.bin") == b"keep me"  # no pending marker: never touched
    assert vs.load(f"{az_prefix}/runs/ckpt-3.zarr")["w"].tolist() == [0.0, 1.0]


# ------------------------------------------------------------------ conditional writes (the manager: test_remote_manager.py)
def test_azurite_enforces_if_match_and_if_none_match(az_env: dict[str, str], az_server: AzuriteServer,
                                                     az_prefix: str) -> None:
    client = _client(az_server, az_prefix)
    first = client.put_if_absent("latest", b"ckpt-100")
    assert first and first.startswith('"0x')
    with pytest.raises(ConditionalWriteError, match=r"latest lost the race: the object already exists"):
        client.put_if_absent("latest", b"ckpt-999")
    second = client.put_if_match("latest", b"ckpt-200", first)
    assert second != first
    with pytest.raises(ConditionalWriteError, match=r"latest lost the race: the object changed since it was read"):
        client.put_if_match("latest", b"ckpt-150", first)  # a stale etag: refused by the server
    assert client.get("latest") == b"ckpt-200" and client.head("latest").etag == second


# ------------------------------------------------------------------ convert
def test_convert_safetensors_to_the_container_and_back_to_a_disk(az_env: dict[str, str], az_prefix: str,
                                                                 tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    save_file({"a": np.arange(4, dtype=np.float32), "b": np.eye(2, dtype=np.int16)}, str(tmp_path / "m.safetensors"))
    vs.convert(tmp_path / "m.safetensors", f"{az_prefix}/m.h5")
    with vs.open_checkpoint(f"{az_prefix}/m.h5") as reader:
        assert reader.format == "varstore-hdf5" and sorted(reader.keys()) == ["a", "b"]
    vs.convert(f"{az_prefix}/m.h5", tmp_path / "back.zarr")
    back = vs.load(tmp_path / "back.zarr")
    assert back["a"].tolist() == [0.0, 1.0, 2.0, 3.0] and back["b"].tolist() == [[1, 0], [0, 1]]
    assert back["b"].dtype == np.int16
    vs.convert(tmp_path / "m.safetensors", f"{az_prefix}/m.safetensors")  # a foreign format, uploaded whole
    with vs.open_checkpoint(f"{az_prefix}/m.safetensors") as reader:  # read in place with ranged GETs
        assert reader.read("b").tolist() == [[1, 0], [0, 1]] and reader.read("a")[3] == 3.0


# ------------------------------------------------------------------ the CLI, redaction
def test_cli_ls_show_verify_with_credentials_from_the_environment_only(az_env: dict[str, str], az_prefix: str,
                                                                      cli: Callable[..., Result]) -> None:
    url = f"{az_prefix}/runs/model.zarr"
    vs.save(url, {"enc/w": np.arange(6.0).reshape(2, 3), "enc/b": np.array([0.5, -0.5], np.float32)}, step=7)
    listed = cli("ls", url)
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"{url}  (varstore-zarr, version 1.0, step 7)"
    assert "enc/w  [2, 3]  float64  48 B" in listed.stdout
    document = json.loads(cli("ls", "--json", url).stdout)
    assert document["path"] == url and document["step"] == 7
    shown = cli("show", url, "enc/b")
    assert shown.exit_code == 0 and "values             [0.5, -0.5]" in shown.stdout
    verified = cli("verify", url)
    assert verified.exit_code == 0 and verified.stdout.startswith(f"ok: {url}")
    for text in (listed.stdout, shown.stdout, verified.stdout):
        assert az_env["AZURE_STORAGE_ACCOUNT_KEY"] not in text


def test_a_wrong_key_or_a_missing_container_is_a_typed_error_without_the_key(
        az_env: dict[str, str], az_server: AzuriteServer, az_prefix: str, cli: Callable[..., Result],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"{az_prefix}/m.h5"
    vs.save(url, {"w": np.arange(3.0)})
    wrong = base64.b64encode(b"varstore-wrong-azure-key-7f3a9c").decode()
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", wrong)
    with pytest.raises(ObjectStoreError, match=rf"{url} was refused: .*check the credentials") as refused:
        vs.load(url)
    with pytest.raises(ObjectStoreError, match=rf"LIST {url} was refused: .*403 Forbidden \(AuthorizationFailure\); "
                                               r"check the credentials") as on_save:
        vs.save(url, {"w": np.arange(3.0)})
    result = cli("ls", "--json", url)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1 and url in result.stderr
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", az_server.key)
    missing_url = "az://no-such-container/m.h5"
    with pytest.raises(ObjectNotFoundError, match=rf"no object at {missing_url}") as missing:
        _client(az_server, "az://no-such-container").get("m.h5")
    with pytest.raises(ObjectStoreError, match=r"LIST az://no-such-container/runs failed: the bucket \(container\) "
                                               r"'no-such-container' does not exist .*\(ContainerNotFound\)") as gone:
        vs.CheckpointManager("az://no-such-container/runs").save({"w": np.arange(2.0)}, step=1)
    texts = [str(refused.value), repr(refused.value), str(refused.value.__cause__), str(on_save.value),
             str(missing.value), str(gone.value), result.stdout, result.stderr]
    for text in texts:
        assert wrong not in text and az_server.key not in text


def test_azurite_makes_no_connection_beyond_loopback(az_server: AzuriteServer, az_env: dict[str, str],
                                                     az_prefix: str) -> None:
    """Telemetry is off: every socket the Azurite process holds is on 127.0.0.1 (Linux /proc)."""
    if not Path(f"/proc/{az_server.pid}/fd").is_dir():
        pytest.skip("needs Linux /proc to inspect the server's sockets")
    vs.save(f"{az_prefix}/m.h5", {"w": np.arange(2.0)})
    inodes = set()
    for fd in Path(f"/proc/{az_server.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    remotes = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        path = Path(f"/proc/{az_server.pid}/net/{table}")
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            fields = line.split()
            if fields[9] in inodes:
                remotes.append((table, fields[2].split(":")[0]))
    assert remotes, "the listening socket should be found"
    loopback_or_unbound = {"0100007F", "00000000", "00000000000000000000000000000000",
                           "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}
    assert [r for r in remotes if r[1] not in loopback_or_unbound] == []

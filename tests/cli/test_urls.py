"""Every CLI command takes object-store URLs; --storage-option; errors are one line; secrets never show."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

import varstore as vs
from tests._s3server import DUMMY_CREDENTIALS, S3TestServer


@pytest.fixture
def bucket_checkpoint(s3_env: dict[str, str], s3_prefix: str) -> str:
    url = f"{s3_prefix}/runs/model.zarr"
    vs.save(url, {"enc/w": np.arange(6.0).reshape(2, 3), "enc/b": np.array([0.5, -0.5], np.float32)}, step=7)
    return url


def test_ls_show_verify_diff_on_urls(run: Callable[..., Result], bucket_checkpoint: str, s3_prefix: str) -> None:
    listed = run("ls", bucket_checkpoint)
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines()[0] == f"{bucket_checkpoint}  (varstore-zarr, version 1.0, step 7)"
    assert "enc/w  [2, 3]  float64  48 B" in listed.stdout
    document = json.loads(run("ls", "--json", bucket_checkpoint).stdout)
    assert document["path"] == bucket_checkpoint and document["step"] == 7
    shown = run("show", bucket_checkpoint, "enc/b")
    assert shown.exit_code == 0 and "values             [0.5, -0.5]" in shown.stdout
    verified = run("verify", bucket_checkpoint)
    assert verified.exit_code == 0 and verified.stdout.startswith(f"ok: {bucket_checkpoint}")
    converted = run("convert", bucket_checkpoint, f"{s3_prefix}/runs/model.h5")
    assert converted.exit_code == 0, converted.stderr
    assert converted.stdout.startswith(f"converted {bucket_checkpoint} (varstore-zarr) -> {s3_prefix}/runs/model.h5")
    same = run("diff", bucket_checkpoint, f"{s3_prefix}/runs/model.h5")
    assert same.exit_code == 0 and "checkpoints are equal" in same.stdout


def test_convert_local_safetensors_to_a_bucket_and_back(run: Callable[..., Result], s3_env: dict[str, str],
                                                        s3_prefix: str, tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    save_file({"a": np.arange(4, dtype=np.float32)}, str(tmp_path / "m.safetensors"))
    up = run("convert", tmp_path / "m.safetensors", f"{s3_prefix}/m.h5")
    assert up.exit_code == 0, up.stderr
    assert run("convert", f"{s3_prefix}/m.h5", tmp_path / "back.npz").exit_code == 0
    with np.load(tmp_path / "back.npz") as back:
        assert back["a"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_storage_options_on_the_command_line(run: Callable[..., Result], s3_server: S3TestServer,
                                             bucket_checkpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(name)
    options = [f"{key}={value}" for key, value in s3_server.storage_options.items()]
    per_command = run("ls", bucket_checkpoint, *[arg for o in options for arg in ("--storage-option", o)])
    assert per_command.exit_code == 0, per_command.stderr
    global_ = run(*[arg for o in options for arg in ("--storage-option", o)], "verify", "--json", bucket_checkpoint)
    assert global_.exit_code == 0 and json.loads(global_.stdout)["ok"] is True
    bad = run("ls", bucket_checkpoint, "--storage-option", "secret_access_key")
    assert bad.exit_code == 2 and "storage option #1 is not of the form KEY=VALUE" in bad.stderr


def test_errors_are_one_line_exit_2_and_never_show_secrets(run: Callable[..., Result], s3_env: dict[str, str],
                                                           s3_prefix: str, bucket_checkpoint: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    secret = "cli-secret-value-93ad11f"
    outputs = []
    with caplog.at_level(logging.DEBUG):
        missing = run("ls", f"{s3_prefix}/none.h5")
        assert missing.exit_code == 2
        assert missing.stderr == f"varstore: error: no checkpoint at {s3_prefix}/none.h5; check the URL\n"
        refused = run("ls", "--json", bucket_checkpoint, "--storage-option", "endpoint=http://127.0.0.1:9",
                      "--storage-option", f"secret_access_key={secret}",
                      "--storage-option", "access_key_id=AKIAEXAMPLEKEY")
        assert refused.exit_code == 2 and len(refused.stderr.splitlines()) == 1
        # the first request (the listing of the checkpoint) names the URL it failed on
        assert refused.stderr.startswith(f"varstore: error: LIST {bucket_checkpoint} failed after")
        unknown = run("ls", bucket_checkpoint, "--storage-option", f"password={secret}")
        assert unknown.exit_code == 2 and "password" in unknown.stderr
        good = run("verify", "--json", bucket_checkpoint, "--storage-option", f"secret_access_key={secret}x")
        outputs += [missing, refused, unknown, good]
    texts = [r.stdout + r.stderr for r in outputs] + [caplog.text]
    for text in texts:
        for value in (secret, DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]):
            assert value not in text


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_a_manager_directory_on_a_bucket_is_a_path_for_every_command(run: Callable[..., Result], bucket,
                                                                     tmp_path: Path, fmt: str) -> None:
    directory = f"{bucket.prefix}/runs/b2"
    manager = vs.CheckpointManager(directory, format=fmt)
    manager.save({"enc/w": np.arange(4.0)}, 100)
    manager.save({"enc/w": np.arange(4.0) * 2}, 200)
    latest = f"{directory}/ckpt-200.{fmt}"
    assert manager.latest == latest

    listed = run("ls", directory)
    assert listed.exit_code == 0, listed.stderr
    kind = {"h5": "hdf5", "zarr": "zarr"}[fmt]
    assert listed.stdout.splitlines()[0] == f"{latest}  (varstore-{kind}, version 1.0, step 200)"
    shown = run("show", directory, "enc/w")
    assert shown.exit_code == 0 and "values             [0, 2, 4, 6]" in shown.stdout, shown.output
    assert run("verify", directory).stdout.startswith(f"ok: {latest}")
    assert run("diff", directory, latest).exit_code == 0
    converted = run("convert", directory, tmp_path / "latest.npz")
    assert converted.exit_code == 0, converted.stderr
    assert converted.stdout.startswith(f"converted {latest} (varstore-{kind})")
    with np.load(tmp_path / "latest.npz") as back:
        assert back["enc/w"].tolist() == [0.0, 2.0, 4.0, 6.0]
    listed = run("ls", "--checkpoints", directory)
    assert listed.exit_code == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert [row[:2] for row in rows[1:3]] == [[f"ckpt-100.{fmt}", "100"], [f"ckpt-200.{fmt}", "200"]]
    assert rows[2][-1] == "latest" and rows[1][-1] != "latest" and rows[3][:3] == ["total:", "2", "checkpoints,"]
    document = json.loads(run("ls", "--checkpoints", "--json", directory).stdout)
    assert [(c["path"], c["step"], c["latest"]) for c in document["checkpoints"]] == [
        (f"{directory}/ckpt-100.{fmt}", 100, False), (latest, 200, True)]
    assert all(c["nbytes"] > 0 and c["created_utc"].endswith("Z") for c in document["checkpoints"])
    empty = run("ls", f"{bucket.prefix}/runs/none")
    assert empty.exit_code == 2 and empty.stderr.startswith("varstore: error: no checkpoint at ")

"""Object-store URLs: recognised, split, resolved from the environment and storage_options; secrets redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from varstore.errors import InvalidURLError
from varstore.storage._urls import Redactor, is_url, parse_url, resolve


@pytest.mark.parametrize("path, expected", [
    ("s3://bucket/runs/a7/model.zarr", True), ("gs://b/k", True), ("az://container/k", True),
    ("abfs://c@acct.dfs.core.windows.net/k", True), ("S3://bucket/x", True),
    ("/tmp/model.h5", False), ("model.h5", False), ("file:///tmp/x", False), ("http://host/x", False),
    (Path("s3:/bucket"), False), ("C:\\x\\model.h5", False),
])
def test_is_url_accepts_only_object_store_schemes(path: object, expected: bool) -> None:
    assert is_url(path) is expected


def test_parse_url_splits_scheme_bucket_and_key() -> None:
    url = parse_url("s3://bucket/runs/a7/model.zarr/")
    assert (url.scheme, url.bucket, url.key, url.provider) == ("s3", "bucket", "runs/a7/model.zarr", "s3")
    assert str(url.child("zarr.json")) == "s3://bucket/runs/a7/model.zarr/zarr.json"
    assert str(parse_url("gs://b")) == "gs://b" and parse_url("gs://b").key == ""
    assert parse_url("abfs://models@acct.dfs.core.windows.net/a/b").bucket == "models"
    assert parse_url("az://c/a").provider == "azure"


@pytest.mark.parametrize("url, match", [("s3:///key", "names no bucket"), ("s3://b/a/../c", r"'\.\.'"),
                                        ("s3://b/a//c", "empty"), ("ftp://b/k", "not an object-store URL")])
def test_parse_url_rejects_malformed_urls(url: str, match: str) -> None:
    with pytest.raises(InvalidURLError, match=match):
        parse_url(url)


def test_resolve_reads_the_standard_aws_environment() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value", "AWS_SESSION_TOKEN": "tok-123",
           "AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "eu-central-1",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}
    resolved = resolve("s3://b/k", environ=env)
    assert dict(resolved.config) == {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3cr3t-value",
                                     "session_token": "tok-123", "region": "eu-central-1",
                                     "endpoint": "http://127.0.0.1:9000"}
    assert resolved.allow_http is True  # an http:// endpoint is allowed without AWS_ALLOW_HTTP
    assert resolved.endpoint == "http://127.0.0.1:9000"
    assert "s3cr3t-value" not in repr(resolved) and "tok-123" not in repr(resolved)


def test_storage_options_override_the_environment() -> None:
    env = {"AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "https://s3.example.com"}
    resolved = resolve("s3://b/k", {"region": "us-east-1", "endpoint": "https://minio.local:9000"}, environ=env)
    assert resolved.config["region"] == "us-east-1" and resolved.config["endpoint"] == "https://minio.local:9000"
    assert resolved.allow_http is False
    assert resolve("s3://b", {"allow_http": True}, environ={}).allow_http is True
    assert resolve("s3://b", environ={"AWS_ALLOW_HTTP": "true"}).allow_http is True


def test_gcs_and_azure_environment() -> None:
    gcs = resolve("gs://b/k", environ={"GOOGLE_APPLICATION_CREDENTIALS": "/etc/key.json"})
    assert dict(gcs.config) == {"application_credentials": "/etc/key.json"}
    azure = resolve("az://c/k", {"sas_token": "sv=2024&sig=abcdef"},
                    environ={"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "a2V5a2V5"})
    assert dict(azure.config) == {"account_name": "acct", "account_key": "a2V5a2V5", "sas_key": "sv=2024&sig=abcdef"}
    assert azure.redactor.redact("key a2V5a2V5 sas sv=2024&sig=abcdef") == "key *** sas ***"


def test_azure_standard_environment_endpoint_emulator_and_key_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The AZURE_* variables obstore reads itself are read here too (endpoint, emulator, key aliases, SAS token)."""
    azure = resolve("az://c/k", environ={"AZURE_STORAGE_ACCOUNT_NAME": "acct",
                                         "AZURE_STORAGE_ACCESS_KEY": "a2V5LWFsaWFz",
                                         "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:10000/acct",
                                         "AZURE_STORAGE_SAS_TOKEN": "sv=2024&sig=0a1b2c"})
    assert dict(azure.config) == {"account_name": "acct", "account_key": "a2V5LWFsaWFz",
                                  "endpoint": "http://127.0.0.1:10000/acct", "sas_key": "sv=2024&sig=0a1b2c"}
    assert azure.allow_http is True and azure.endpoint == "http://127.0.0.1:10000/acct"  # an http endpoint
    assert azure.redactor.redact("a2V5LWFsaWFz and sv=2024&sig=0a1b2c") == "*** and ***"
    # the specific variable wins over the generic one, as in obstore
    both = resolve("az://c", environ={"AZURE_ENDPOINT": "https://generic.example", "AZURE_STORAGE_ENDPOINT":
                                      "https://specific.example", "AZURE_STORAGE_MASTER_KEY": "bWFzdGVy",
                                      "AZURE_STORAGE_ACCOUNT_KEY": "YWNjb3VudA=="})
    assert both.config["endpoint"] == "https://specific.example" and both.config["account_key"] == "YWNjb3VudA=="
    assert both.allow_http is False
    monkeypatch.delenv("AZURITE_BLOB_STORAGE_URL", raising=False)
    emulator = resolve("az://c/k", environ={"AZURE_STORAGE_USE_EMULATOR": "true"})
    assert emulator.config["use_emulator"] == "true" and emulator.allow_http is True
    assert emulator.endpoint == "http://127.0.0.1:10000/devstoreaccount1"  # Azurite's default address
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:41000/")
    assert resolve("az://c", {"use_emulator": True, "account_name": "dev2"}, environ={}).endpoint == \
        "http://127.0.0.1:41000/dev2"
    assert resolve("az://c", environ={"AZURE_STORAGE_USE_EMULATOR": "false"}).endpoint is None


def test_unknown_storage_option_is_named_with_the_known_ones() -> None:
    with pytest.raises(InvalidURLError, match=r"'endpoint_url' is not known for s3://b/k; known keys: .*endpoint"):
        resolve("s3://b/k", {"endpoint_url": "http://x"}, environ={})


def test_redactor_removes_secrets_and_signatures() -> None:
    redactor = Redactor(("wJalrXUtnFEMI", "short"))
    text = ("GET https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F20250101&X-Amz-Signature=abc123def "
            "secret wJalrXUtnFEMI Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, Signature=00ff\n"
            "next line")
    out = redactor.redact(text)
    assert "wJalrXUtnFEMI" not in out and "abc123def" not in out and "AKIA%2F" not in out
    assert "Authorization: ***\nnext line" in out and "X-Amz-Signature=***" in out
    assert "short" not in out


def test_short_test_credentials_leave_bucket_and_key_names_alone() -> None:
    resolved = resolve("s3://varstore-test/guide/latest", environ={"AWS_ACCESS_KEY_ID": "test",
                                                                    "AWS_SECRET_ACCESS_KEY": "test"})
    message = "no checkpoint at s3://varstore-test/guide/latest (key test, secret test; token=test)"
    assert resolved.redactor.redact(message) == \
        "no checkpoint at s3://varstore-test/guide/latest (key ***, secret ***; token=***)"
    assert resolved.redactor.redact("s3://b/testing/test-1/latest.test") == "s3://b/testing/test-1/latest.test"


def test_the_access_key_id_is_not_redacted() -> None:
    resolved = resolve("s3://b/k", {"access_key_id": "AKIAEXAMPLEKEY", "secret_access_key": "s3cr3t-value-1"},
                       environ={})
    assert resolved.redactor.redact("key AKIAEXAMPLEKEY secret s3cr3t-value-1") == "key AKIAEXAMPLEKEY secret ***"


def test_a_missing_obstore_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from varstore.errors import MissingDependencyError
    from varstore.storage.object_store import ObjectStoreClient

    monkeypatch.setitem(sys.modules, "obstore", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'varstore\[s3\]'"):
        ObjectStoreClient("s3://bucket/key", environ={})


def test_client_settings_are_checked() -> None:
    pytest.importorskip("obstore")
    from varstore.storage.object_store import ObjectStoreClient

    with pytest.raises(InvalidURLError, match=r"s3://b/k: part_size must be >= 5242880 .* got 1024 and 8"):
        ObjectStoreClient("s3://b/k", environ={}, part_size=1024)
    with pytest.raises(InvalidURLError, match="max_in_flight >= 1"):
        ObjectStoreClient("s3://b/k", environ={}, max_in_flight=0)


def test_secrets_in_the_process_environment_are_redacted_even_when_not_passed_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "process-env-secret-91ab")
    resolved = resolve("s3://b/k", environ={})  # obstore may still read os.environ itself
    assert "secret_access_key" not in resolved.config
    assert resolved.redactor.redact("echo process-env-secret-91ab") == "echo ***"


def test_gcs_and_azure_settings_reach_the_client_and_bad_ones_name_the_url(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("obstore")
    from varstore.errors import ObjectStoreError
    from varstore.storage.object_store import ObjectStoreClient

    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                 "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ObjectStoreError, match=r"cannot configure a client for az://models/run: .*Account must be") as info:
        ObjectStoreClient("az://models/run", {"account_key": "c2VjcmV0LWF6dXJlLWtleQ=="}, environ={})
    assert "c2VjcmV0LWF6dXJlLWtleQ==" not in str(info.value)
    missing = tmp_path / "no-such-key.json"
    with pytest.raises(ObjectStoreError, match=r"cannot configure a client for gs://b/k: .*no-such-key.json"):
        ObjectStoreClient("gs://b/k", {"application_credentials": str(missing)}, environ={})
    client = ObjectStoreClient("az://models/run", {"account_name": "acct", "use_emulator": True}, environ={})
    assert str(client.url) == "az://models/run" and client.url.provider == "azure"

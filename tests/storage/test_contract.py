"""Every storage passes the storage contract (tests/storage/contract.py): local files, and s3:// on moto and
on SeaweedFS, az:// on Azurite, gs:// on our GCS XML-API model (the `bucket` fixture starts each server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._bucket import Bucket
from tests.storage.contract import ObjectStoreContract, StorageContract
from varstore.storage import LocalStorage, Storage, storage_for


class TestLocalStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        root = tmp_path / "root"
        root.mkdir()
        return LocalStorage(root)


class TestObjectStorage(ObjectStoreContract):
    @pytest.fixture
    def storage(self, bucket: Bucket) -> Storage:
        storage, _ = storage_for(bucket.prefix, bucket.storage_options)
        # rooted at the test's prefix: relative keys never meet another test's objects
        return type(storage)(bucket.prefix, bucket.storage_options)  # type: ignore[call-arg]

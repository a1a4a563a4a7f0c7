"""zarr-python's own ObjectStore reads a Zarr v3 group on the moto bucket (phase 2 builds on this)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests._s3server import S3TestServer
from varstore.storage.object_store import ObjectStoreClient


def test_zarr_object_store_round_trips_a_group_on_the_bucket(s3_server: S3TestServer, s3_prefix: str) -> None:
    zarr = pytest.importorskip("zarr")
    obstore_store = pytest.importorskip("obstore.store")
    client = ObjectStoreClient(s3_prefix, s3_server.storage_options)
    prefix = f"{client.url.key}/model.zarr"
    s3 = obstore_store.S3Store(s3_server.bucket, prefix=prefix, endpoint=s3_server.endpoint, region="us-east-1",
                               access_key_id="x", secret_access_key="y", client_options={"allow_http": True})
    group = zarr.open_group(zarr.storage.ObjectStore(s3), mode="w")
    weights = np.arange(24, dtype=np.float32).reshape(4, 6)
    group.create_array("conv1/weights", shape=(4, 6), chunks=(2, 6), dtype="float32")[...] = weights
    group.attrs["step"] = 1200

    names = [i.name for i in client.list("model.zarr")]
    assert "model.zarr/zarr.json" in names and "model.zarr/conv1/weights/zarr.json" in names
    assert sorted(n for n in names if "/c/" in n) == ["model.zarr/conv1/weights/c/0/0",
                                                      "model.zarr/conv1/weights/c/1/0"]
    assert json.loads(client.get("model.zarr/zarr.json"))["attributes"] == {"step": 1200}

    reopened = zarr.open_group(zarr.storage.ObjectStore(s3, read_only=True), mode="r")
    np.testing.assert_array_equal(reopened["conv1/weights"][...], weights)
    assert reopened.attrs["step"] == 1200

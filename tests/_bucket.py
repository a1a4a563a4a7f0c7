"""Bucket: one test's prefix on a running object-store server (the `bucket` fixture in tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from varstore.storage.object_store import ObjectStoreClient


@dataclass(frozen=True)
class Bucket:
    """A test's prefix on a running object-store server; the standard environment points at it."""

    provider: str  # "s3" (moto), "az" (Azurite), "gs" (tests/_gcsserver.py) or "s3-seaweedfs"
    prefix: str
    storage_options: dict[str, object]

    def client(self) -> ObjectStoreClient:
        """A client rooted at `prefix` with the server's credentials (not the environment's)."""
        from varstore.storage.object_store import ObjectStoreClient

        return ObjectStoreClient(self.prefix, self.storage_options, environ={})

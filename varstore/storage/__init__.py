"""Storage: where a checkpoint's bytes go (the Storage protocol and its implementations).

`Storage` (protocol.py) is the seam the checkpoint engines read and write
through; `LocalStorage` (local.py) implements it on a local file system. An
object-store implementation (object_store.py, s3:// gs:// az:// through
obstore) implements the same protocol. Knows nothing about checkpoint formats.
"""

from __future__ import annotations

from varstore.storage.local import LocalStorage
from varstore.storage.protocol import Buffer, ReadAhead, Storage, StorageWriter

__all__ = ["Storage", "StorageWriter", "ReadAhead", "Buffer", "LocalStorage"]

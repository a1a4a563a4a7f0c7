"""Where checkpoint bytes go: the local filesystem or an object store (s3://, gs://, az://).

`Storage` (protocol.py) is the seam the checkpoint engines read and write
through; `LocalStorage` (local.py) implements it on a local file system and
`ObjectStorage` (object_storage.py) on an object store through obstore.
`storage_for(location)` is the one place an engine gets its Storage. Knows
nothing about checkpoint formats.
"""

from __future__ import annotations

import os

from varstore.storage.local import LocalStorage
from varstore.storage.protocol import Buffer, ConditionalStorage, ReadAhead, Storage, StorageWriter

__all__ = ["Storage", "StorageWriter", "ReadAhead", "ConditionalStorage", "Buffer", "LocalStorage", "storage_for"]


def storage_for(location: os.PathLike[str] | str) -> tuple[Storage, str]:
    """The Storage that holds `location` and its key there: where the engines get their storage from.

    Local paths give (LocalStorage(), the path as a string). Object-store URLs
    (s3://, gs://, az://) are the next implementation's to add here.
    """
    return LocalStorage(), os.fspath(location)

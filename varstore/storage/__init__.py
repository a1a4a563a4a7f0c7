"""Where checkpoint bytes go: the local filesystem or an object store (s3://, gs://, az://).

`Storage` (protocol.py) is the seam the checkpoint engines read and write
through; `LocalStorage` (local.py) implements it on a local file system and
`ObjectStorage` (object_storage.py) on an object store through obstore.
`storage_for(location)` is the one place an engine gets its Storage. Knows
nothing about checkpoint formats.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from varstore.storage._url_names import url_from_path
from varstore.storage.local import LocalStorage
from varstore.storage.protocol import Buffer, ConditionalStorage, ReadAhead, Storage, StorageWriter

__all__ = ["Storage", "StorageWriter", "ReadAhead", "ConditionalStorage", "Buffer", "LocalStorage", "storage_for", "is_remote"]


def storage_for(location: os.PathLike[str] | str,
                storage_options: Mapping[str, object] | None = None) -> tuple[Storage, str]:
    """The Storage that holds `location` and its key there: where the engines get their storage from.

    Local paths give (LocalStorage(), the path as a string). Object-store URLs
    (s3://, gs://, az://; also as `pathlib.Path` spells them, "s3:/bucket/key")
    give (an ObjectStorage rooted at the bucket, the URL); `storage_options`
    (endpoint, region, credentials) apply to those only.

    Raises:
      InvalidURLError: a malformed URL or an unknown storage_options key.
      MissingDependencyError: a URL without obstore installed (the [s3] extra).
    """
    url = url_from_path(location)
    if url is None:
        return LocalStorage(), os.fspath(location)
    from varstore.storage._urls import parse_url
    from varstore.storage.object_storage import ObjectStorage

    where = parse_url(url)
    return ObjectStorage(f"{where.scheme}://{where.bucket}", storage_options), url


def is_remote(location: object) -> bool:
    """True when `location` is an object-store URL (also as `pathlib.Path` spells one)."""
    return url_from_path(location) is not None

"""Where checkpoint bytes go: the local filesystem or an object store (s3://, gs://, az://).

`Storage` (protocol.py) is the seam the checkpoint engines read and write
through, `ObjectStore` the calls a storage without rename adds for the
manifest-last commit; `LocalStorage` (local.py) implements Storage on a local
file system and `ObjectStorage` (object_storage.py) ObjectStore through
obstore. `storage_for(location)` is the one place an engine gets its Storage,
from a table of URL schemes (`register_storage` adds one). Knows nothing about
checkpoint formats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from varstore.errors import InvalidURLError
from varstore.storage._url_names import SCHEMES, URL_PATTERN, url_from_path
from varstore.storage.local import LocalStorage
from varstore.storage.protocol import Buffer, ConditionalStorage, ObjectStore, ReadAhead, Storage, StorageWriter

__all__ = ["Storage", "StorageWriter", "ReadAhead", "ConditionalStorage", "ObjectStore", "Buffer", "LocalStorage",
           "StorageOpener", "storage_for", "object_store_for", "register_storage", "is_remote", "is_url", "url_from_path",
           "parse_storage_options"]

#: Makes the Storage for a URL: (url, storage_options) -> a storage whose keys include that URL.
StorageOpener = Callable[[str, "Mapping[str, object] | None"], Storage]


def _object_storage(url: str, storage_options: Mapping[str, object] | None) -> ObjectStore:
    """s3://, gs://, az:// (and their aliases) through obstore: an ObjectStorage rooted at the bucket."""
    from varstore.storage._urls import parse_url
    from varstore.storage.object_storage import ObjectStorage

    where = parse_url(url)
    return ObjectStorage(f"{where.scheme}://{where.bucket}", storage_options)


#: URL scheme (lower case) -> the opener of its storage; a local path needs none (LocalStorage).
_OPENERS: dict[str, StorageOpener] = {scheme: _object_storage for scheme in SCHEMES}


def register_storage(scheme: str, opener: StorageOpener) -> None:
    """Serves URLs `scheme://...` with the storage `opener(url, storage_options)` makes.

    The storage must pass tests/storage/contract.py: Storage always; ObjectStore too when
    `renames` is False (checkpoints there are committed by writing the manifest last).
    A registered scheme replaces the built-in one of the same name (e.g. gs:// through another client).

    Raises:
      InvalidURLError: `scheme` is not a URL scheme (RFC 3986: a letter, then letters, digits, + - .).
    """
    key = scheme.lower()
    if URL_PATTERN.match(f"{key}://x") is None or key == "file":
        raise InvalidURLError(f"{scheme!r} is not a URL scheme varstore can serve")
    SCHEMES.setdefault(key, key)
    _OPENERS[key] = opener


def storage_for(location: os.PathLike[str] | str,
                storage_options: Mapping[str, object] | None = None) -> tuple[Storage, str]:
    """The Storage that holds `location` and its key there: where the engines get their storage from.

    Local paths give (LocalStorage(), the path as a string). URLs of a known
    scheme (s3://, gs://, az:// and any `register_storage` added; also as
    `pathlib.Path` spells them, "s3:/bucket/key") give (the scheme's storage, the
    URL); `storage_options` (endpoint, region, credentials) apply to those only.

    Raises:
      InvalidURLError: a malformed URL or an unknown storage_options key.
      MissingDependencyError: an object-store URL without obstore installed (the [s3] extra).
    """
    url = url_from_path(location)
    if url is None:
        return LocalStorage(), os.fspath(location)
    match = URL_PATTERN.match(url)
    assert match is not None  # url_from_path gives only URLs of a known scheme
    return _OPENERS[match.group("scheme").lower()](url, storage_options), url


def object_store_for(location: os.PathLike[str] | str,
                     storage_options: Mapping[str, object] | None = None) -> tuple[ObjectStore, str]:
    """storage_for for a location that must be on a storage without rename (an object store).

    Raises:
      InvalidURLError: `location` is a local path, or its storage lacks the ObjectStore calls.
      MissingDependencyError: as storage_for.
    """
    storage, key = storage_for(location, storage_options)
    if not isinstance(storage, ObjectStore):
        raise InvalidURLError(f"{key} is not on an object store ({storage.url} has no object-store calls)")
    return storage, key


def is_remote(location: object) -> bool:
    """True when `location` is a URL served by a registered storage (also as `pathlib.Path` spells one)."""
    return url_from_path(location) is not None


#: The public name of is_remote (varstore.is_url): does a path name an object-store URL?
is_url = is_remote


def parse_storage_options(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`storage_options` from "KEY=VALUE" texts (the CLI's --storage-option); later keys win.

    Raises:
      InvalidURLError: a text without "=" or without a key; the text is not shown (it may be a secret).
    """
    from varstore.storage._urls import parse_storage_options as parse  # URL rules: only when asked

    return parse(items)

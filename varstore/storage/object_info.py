"""ObjectInfo and version tags: what a listing or HEAD says about one object, and the tag a conditional write matches.

Plain values, no I/O: object_store.py fills ObjectInfo from obstore's answers; object_storage.py
turns an object's ETag and generation (GCS numbers versions) into the one opaque tag of the
ConditionalStorage protocol and back.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

__all__ = ["ObjectInfo", "version_tag", "split_version_tag"]


@dataclass(frozen=True)
class ObjectInfo:
    """What a listing or HEAD says about one object.

    Attributes:
      name: key relative to the client's root URL ('/'-separated).
      size: bytes.
      last_modified: UTC timestamp from the server.
      etag: the entity tag (quoted, as the server sends it), the token for If-Match; None if absent.
      version: the object's version as the server numbers it (GCS: its generation, which a
        conditional replace on GCS needs beside the ETag); None where the server sends none.
    """

    name: str
    size: int
    last_modified: _dt.datetime
    etag: str | None
    version: str | None = None


_GENERATION = " generation="   # never inside an ETag (RFC 9110: no spaces), so the tag splits back cleanly


def version_tag(etag: str | None, version: str | None) -> str | None:
    """One opaque tag for the ConditionalStorage protocol: the ETag, plus ' generation=N' when the
    server numbers versions (GCS)."""
    if etag is None:
        return None
    return etag if version is None else f"{etag}{_GENERATION}{version}"


def split_version_tag(tag: str) -> tuple[str, str | None]:
    """(ETag, version or None) of a tag version_tag made."""
    etag, separator, version = tag.rpartition(_GENERATION)
    return (etag, version) if separator else (tag, None)

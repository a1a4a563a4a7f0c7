"""Whether a location is an object-store URL: the URL schemes and the two spellings a URL arrives in.

The part of the URL rules every local open asks (is this path a URL?), kept apart
from _urls.py (URL splitting, settings, secrets, redaction) so that opening a local
checkpoint imports neither that module nor dataclasses. Never makes a request,
never imports the object-store client.
"""

from __future__ import annotations

import os
import re

__all__ = ["SCHEMES", "URL_PATTERN", "is_url", "url_from_path"]

#: scheme -> provider
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "azure": "azure",
           "abfs": "azure", "abfss": "azure"}
URL_PATTERN = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_PATH_SPELLED = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):/(?P<rest>[^/].*)$", re.DOTALL)


def is_url(path: object) -> bool:
    """True when `path` is an object-store URL this package serves (s3://, gs://, az://, abfs://).

    A local path (str or os.PathLike), a `file://` URL or an unknown scheme is not.
    """
    if not isinstance(path, str) or "://" not in path:
        return False
    match = URL_PATTERN.match(path)
    return match is not None and match.group("scheme").lower() in SCHEMES


def url_from_path(location: object) -> str | None:
    """The URL a `pathlib.Path` made from an object-store URL stands for, else None.

    `Path("s3://bucket/k")` is spelled "s3:/bucket/k" (one slash); this gives back
    "s3://bucket/k". A URL string is returned as it is; a local path gives None.
    """
    text = str(location) if isinstance(location, (str, os.PathLike)) else None
    if text is None or ":" not in text:  # both spellings need "scheme:"
        return None
    if is_url(text):
        return text
    match = _PATH_SPELLED.match(text)
    if match is not None and match.group("scheme").lower() in SCHEMES:
        return f"{match.group('scheme')}://{match.group('rest')}"
    return None

"""Dropping files from the page cache, for tests that tell a read from memory from a read from the disk."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["evict"]


def evict(paths: Iterable[str]) -> None:
    """Drops clean files' pages from the page cache: fsync, then POSIX_FADV_DONTNEED (a hint the kernel may
    refuse; callers check with local_read_ahead.cached_already and skip when it did)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

"""paused_gc: keep Python's cyclic garbage collector out of bulk saves and restores.

A save or restore of 50,000 small variables allocates a few hundred thousand
short-lived objects (records, views, manifest lists); each allocation burst
triggers collections that walk every live object of the process, which
doubled the time of such saves and restores. Nothing these loops build has
reference cycles, so collection is paused for their duration and resumed
(when it was on) afterwards. Decoding a manifest pauses it too (its JSON
holds a list per shape: 50,000 of them cost one full collection, ~30 ms, per
open). Uses the `_thread` lock so that a read does not import `threading`.
Knows nothing about files or variables.
"""

from __future__ import annotations

import contextlib
import gc
from _thread import allocate_lock
from collections.abc import Iterator

__all__ = ["paused_gc"]

_lock = allocate_lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Disables the cyclic collector inside the block (nestable, thread-safe); restores its state after."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()

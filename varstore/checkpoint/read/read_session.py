"""ReadSession: what verify lends a VarstoreReader while it runs (verify.py owns the read-ahead).

Plain state, no behaviour: the reader (reader.py) consults it on each fill.
No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only (~1 ms at import)
    from varstore.checkpoint.format.manifest import Record
    from varstore.storage import ReadAhead

__all__ = ["ReadSession"]


class ReadSession:
    """What verify (verify.py) lends a reader while it runs; bulk restores use ReadChecks (read_checks.py) instead.

    Attributes:
      packed: the whole packed blob, read once, or None.
      packed_checked: True once every packed variable to be read was checked on `packed`.
      read_ahead: the storage's read-ahead over the planned extents, or None.
      defer: takes a variable's crc32c check off the reading thread: called
        with the record and the buffer just filled; None checks inline.
    """

    __slots__ = ("packed", "packed_checked", "read_ahead", "defer")

    def __init__(self) -> None:
        self.packed: bytearray | None = None
        self.packed_checked = False
        self.read_ahead: ReadAhead | None = None
        self.defer: Callable[[Record, npt.NDArray[Any]], bool] | None = None

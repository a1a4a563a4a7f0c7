"""VariableState: a variable's value storage (buffer, pending restore, cached host view) and the few changes to it.

The one object that holds what a Variable's value is right now: the device
buffer (None until materialized), a pending restore's ValueSource, and the
read-only host view cached for that buffer. Variable (variables.py) owns one;
the checkpoint engine's batch hooks (variable_batches.py) and ownership
(ownership.py) change a variable's value only through this object (its
methods; restore_many sets `buffer` and `source` directly in its hot loop).
Never allocates, never does I/O, never runs an initializer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VariableState"]


class VariableState:
    """A variable's value state.

    Attributes:
      buffer: the value, a NumPy or CuPy array of the variable's shape and dtype; None until materialized.
      source: a pending restore (a value_sources.ValueSource) read on first use; None when none.
      view: the read-only host view last made of `buffer` (valid while `view_of is buffer`).
      view_of: the buffer `view` was made of.
    """

    __slots__ = ("buffer", "source", "view", "view_of")

    def __init__(self) -> None:
        self.buffer: Any = None
        self.source: Any = None
        self.view: Any = None
        self.view_of: Any = None

    def cached_view(self) -> Any:
        """The cached read-only view of the current buffer, or None (none made, buffer replaced, restore pending)."""
        buffer = self.buffer
        if self.source is None and buffer is not None and self.view_of is buffer:
            return self.view
        return None

    def remember_view(self, view: Any) -> None:
        """Caches `view` as the read-only view of the current buffer."""
        self.view, self.view_of = view, self.buffer

    def adopt(self, buffer: Any) -> None:
        """Makes `buffer` the value (the caller keeps no other reference to it); a pending restore is dropped."""
        self.buffer = buffer
        self.source = None

    def defer(self, source: Any) -> None:
        """Leaves the value in `source` until first use (a lazy or deferred restore)."""
        self.source = source

    def settle(self) -> None:
        """Says the buffer now holds the value: a pending restore no longer applies."""
        self.source = None

    def release(self) -> None:
        """Forgets the value, the pending restore and the view (another process holds this variable)."""
        self.buffer = self.source = self.view = self.view_of = None

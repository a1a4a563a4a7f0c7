"""RestoreResult: what a restore matched, and its checks (strict, assert_consumed) as RestoreErrors with hints.

The rule, as tf.compat.v1.train.Saver.restore and TF2's checkpoint status:
a target variable the checkpoint has no value for is *missing* and fails a
strict restore (the default); a checkpoint value no target takes is
*unexpected* and is only reported (a store keeps it for variables created
later), failing only `assert_consumed()`. Builds messages and errors; reads
no file and changes no variable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from varstore.checkpoint.read.name_hints import missing_with_hints, suggestions
from varstore.errors import RestoreError

__all__ = ["RestoreResult", "Consumption", "strict_restore_error", "unconsumed_error"]

#: Unexpected names listed in full in a message; the rest are counted.
_LISTED = 20


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_LISTED])
    return f"[{shown}{', and %d more' % (len(names) - _LISTED) if len(names) > _LISTED else ''}]"


def _unexpected_with_pairs(unexpected: Sequence[str], missing: Sequence[str]) -> str:
    """The first twenty unexpected names, each with the missing variable it may be meant for ("and N more")."""
    parts = []
    for name in unexpected[:_LISTED]:
        close = suggestions(name, missing)
        parts.append(f"{name!r} (for {close[0]!r}?)" if close else repr(name))
    if len(unexpected) > _LISTED:
        parts.append(f"and {len(unexpected) - _LISTED} more")
    return "[" + ", ".join(parts) + "]"


def strict_restore_error(path: object, missing: list[str], unexpected: list[str],
                         stored: Sequence[str] = ()) -> RestoreError:
    """The RestoreError of a strict restore: every target variable without a value, each with did-you-mean hints.

    Shared by the one-process, the foreign-format and the collective restore.

    Args:
      path: the checkpoint, for the message.
      missing: target names (after the assignment_map) the checkpoint has no value for.
      unexpected: checkpoint names no target takes (reported, kept on the error).
      stored: the checkpoint's names as the targets would see them (after the
        assignment_map); hints are drawn from these, else from `unexpected`.
    """
    candidates = list(stored) or list(unexpected)
    extra = (f"; the checkpoint also holds {len(unexpected)} value(s) no variable takes: "
             f"{_unexpected_with_pairs(unexpected, missing)}" if unexpected else "")
    return RestoreError(
        f"restoring '{path}' failed: {len(missing)} variable(s) have no value in the checkpoint: "
        f"{missing_with_hints(missing, candidates)}{extra}; pass strict=False to restore only the names "
        f"both have (the others keep their values or initializers), or an assignment_map to rename",
        missing=missing, unexpected=unexpected)


def unconsumed_error(path: object, missing: list[str], unexpected: list[str],
                     stored: Sequence[str] = ()) -> RestoreError:
    """The RestoreError of `RestoreResult.assert_consumed()`: what is unmatched on either side, with hints."""
    parts = []
    if missing:
        parts.append(f"variables without a value in the checkpoint: {missing_with_hints(missing, list(stored))}")
    if unexpected:
        parts.append(f"checkpoint values no variable took: {_listed(unexpected)}")
    return RestoreError(
        f"restore from '{path}' was not consumed: {'; '.join(parts)}; call expect_partial() instead of "
        f"assert_consumed() when a partial restore is intended", missing=missing, unexpected=unexpected)


@dataclasses.dataclass
class Consumption:
    """How a store target's restore stands now, for assert_consumed (variables are created after restore returns).

    Attributes:
      location: the checkpoint, for messages.
      unmatched: returns the store's variables now that have no checkpoint value (as mapped).
      unconsumed: returns the checkpoint names no variable has taken so far.
      stored: returns the checkpoint's names as the targets see them (for hints; computed only when asked).
    """

    location: str
    unmatched: Callable[[], list[str]]
    unconsumed: Callable[[], list[str]]
    stored: Callable[[], Sequence[str]] = tuple


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What a restore did, and TF2-style checks of it (tf.train.Checkpoint.restore's status).

    Attributes:
      restored: target names that received (or, lazily, will receive) a checkpoint value now.
      missing: target names the checkpoint (as mapped) has no value for (empty after a strict restore).
      unexpected: checkpoint names (as stored) with no target variable at restore time. Not an
        error: a store takes them for variables created later (`deferred`); others ignore them.
      deferred: target names waiting for variables created later in the store.
    """

    restored: list[str]
    missing: list[str]
    unexpected: list[str]
    deferred: list[str] = dataclasses.field(default_factory=list)
    consumption: Consumption | None = dataclasses.field(default=None, repr=False, compare=False)

    def assert_consumed(self) -> RestoreResult:
        """Checks that every target has a value and every checkpoint value was used, as TF2's assert_consumed.

        For a VariableStore it looks at the store NOW: variables created after
        the restore whose names the checkpoint lacks count as missing (they got
        their initializers), and values still waiting for a variable (deferred,
        never created) count as unexpected.

        Returns:
          This result, so calls can be chained.

        Raises:
          RestoreError: naming every missing variable (with did-you-mean hints)
            and every unused checkpoint value; `.missing` and `.unexpected` hold them.
        """
        tracked = self.consumption
        stored: Sequence[str]
        if tracked is None:
            missing, unexpected, location, stored = list(self.missing), list(self.unexpected), "the checkpoint", ()
        else:
            missing, unexpected = tracked.unmatched(), tracked.unconsumed()
            location, stored = tracked.location, tracked.stored()
        if missing or unexpected:
            raise unconsumed_error(location, missing, unexpected, stored)
        return self

    def expect_partial(self) -> RestoreResult:
        """Says a partial restore is intended, as TF2's expect_partial; returns this result.

        varstore never warns about unmatched names (they are in `missing` and
        `unexpected`), so there is nothing to silence: this exists so code
        written for tf.train.Checkpoint reads the same.
        """
        return self

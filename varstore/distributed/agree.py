"""Collective outcomes: run a step on every rank, then all raise the same error or all go on.

`agree(comm, step)` runs `step()` on this rank and allgathers whether it
failed; when any rank failed, EVERY rank raises the error of the lowest
failing rank (same class, same message, naming that rank), so a collective
save or restore never leaves some ranks waiting in a collective call that
others will never reach. Knows nothing about checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from varstore import errors
from varstore.distributed.communicator import Communicator
from varstore.errors import CheckpointError, VarstoreError

__all__ = ["agree", "raise_first"]

T = TypeVar("T")


def _error_class(name: str) -> type[VarstoreError]:
    found = getattr(errors, name, None)
    if isinstance(found, type) and issubclass(found, VarstoreError):
        return found
    return CheckpointError


def raise_first(outcomes: list[list[str] | None], size: int) -> None:
    """Raises the first failure among gathered outcomes ((class name, message) or None per rank)."""
    everywhere = len({tuple(o) if o is not None else None for o in outcomes}) == 1
    for rank, outcome in enumerate(outcomes):
        if outcome is not None:
            name, message = outcome
            prefix = "" if size == 1 or everywhere else f"rank {rank} of {size}: "
            raise _error_class(name)(prefix + message)


def agree(comm: Communicator, step: Callable[[], T]) -> T:
    """Runs `step()` here; raises on every rank the lowest failing rank's error, else returns its result.

    Raises:
      The failing rank's VarstoreError class (CheckpointError for any other
      exception), message prefixed with "rank R of N: " unless every rank failed alike; on the failing rank
      itself the original error is chained as the cause and its fields (RestoreError.missing, ...) are kept.
    """
    outcome: list[str] | None = None
    result: T | None = None
    failure: BaseException | None = None
    try:
        result = step()
    except Exception as err:  # noqa: BLE001 - every failure must reach the other ranks
        failure = err
        name = type(err).__name__ if isinstance(err, VarstoreError) else "CheckpointError"
        outcome = [name, str(err) if isinstance(err, VarstoreError) else f"{type(err).__name__}: {err}"]
    outcomes = cast("list[list[str] | None]", comm.allgather(outcome))
    try:
        raise_first(outcomes, comm.size)
    except VarstoreError as err:
        if type(err) is type(failure):  # this rank's own error: keep its fields (RestoreError.missing, ...)
            vars(err).update({key: value for key, value in vars(failure).items() if key != "message"})
        raise err from failure
    return result  # type: ignore[return-value]

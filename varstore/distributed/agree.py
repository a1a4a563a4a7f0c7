"""Collective outcomes: run a step on every rank, then all raise the same error or all go on.

`agree(comm, step)` runs `step()` on this rank and allgathers whether it
failed; when any rank failed, EVERY rank raises the error of the lowest
failing rank (same class, same message, naming that rank), so a collective
save or restore never leaves some ranks waiting in a collective call that
others will never reach. `agree_all` also brings every rank's result back
in the same allgather, and can check that a value is the same on every
rank, so a step, its exchange and a consistency check cost one collective
(each costs milliseconds on a busy host). Knows nothing about checkpoints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from varstore import errors
from varstore.distributed.communicator import Communicator, Message
from varstore.errors import CheckpointError, DistributedMismatchError, VarstoreError

__all__ = ["agree", "agree_all", "raise_first"]

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


def _run(step: Callable[[], T]) -> tuple[T | None, list[str] | None, BaseException | None]:
    try:
        return step(), None, None
    except Exception as err:  # noqa: BLE001 - every failure must reach the other ranks
        name = type(err).__name__ if isinstance(err, VarstoreError) else "CheckpointError"
        return None, [name, str(err) if isinstance(err, VarstoreError) else f"{type(err).__name__}: {err}"], err


def _raise_agreed(outcomes: list[list[str] | None], size: int, failure: BaseException | None) -> None:
    try:
        raise_first(outcomes, size)
    except VarstoreError as err:
        if type(err) is type(failure):  # this rank's own error: keep its fields (RestoreError.missing, ...)
            vars(err).update({key: value for key, value in vars(failure).items() if key != "message"})
        raise err from failure


def agree(comm: Communicator, step: Callable[[], T]) -> T:
    """Runs `step()` here; raises on every rank the lowest failing rank's error, else returns its result.

    Raises:
      The failing rank's VarstoreError class (CheckpointError for any other
      exception), message prefixed with "rank R of N: " unless every rank failed alike; on the failing rank
      itself the original error is chained as the cause and its fields (RestoreError.missing, ...) are kept.
    """
    result, outcome, failure = _run(step)
    outcomes = cast("list[list[str] | None]", comm.allgather(outcome))
    _raise_agreed(outcomes, comm.size, failure)
    return result  # type: ignore[return-value]


def agree_all(comm: Communicator, step: Callable[[], Message], *, same: tuple[str, Any] | None = None) -> list[Any]:
    """Runs `step()` here and returns every rank's result (index = rank), in one allgather with the outcomes.

    Args:
      step: returns a JSON message (lists, dicts, str, int, float, bool, None).
      same: (what, value): a JSON value every rank must hold equal; its sha256 travels with the outcome.

    Raises:
      DistributedMismatchError: on every rank when `same` differs ("the N ranks disagree about <what>:
        ranks [...] differ from rank 0"), before any step's error.
      As `agree`: the lowest failing rank's error on every rank.
    """
    result, outcome, failure = _run(step)
    digest = None if same is None else hashlib.sha256(
        json.dumps(same[1], sort_keys=True, default=str).encode("utf-8")).hexdigest()
    gathered = cast("list[list[Any]]", comm.allgather([outcome, digest, result]))
    digests = [g[1] for g in gathered]
    if same is not None and len(set(digests)) > 1:
        ranks = [rank for rank, d in enumerate(digests) if d != digests[0]]
        raise DistributedMismatchError(f"the {comm.size} ranks disagree about {same[0]}: ranks {ranks} differ from "
                                       f"rank 0; every rank must pass the same structure")
    _raise_agreed([g[0] for g in gathered], comm.size, failure)
    return [g[2] for g in gathered]

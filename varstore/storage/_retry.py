"""Retry with exponential backoff and jitter: which object-store failures are transient, and how long to wait.

Knows nothing about URLs or the client's calls; object_store.py passes in the operation and
turns the last failure into a typed error. Only idempotent operations are retried here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["RetryPolicy", "call_with_retries"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure.

    Attributes:
      attempts: total tries of one operation (1 = no retry), >= 1.
      initial_backoff: seconds before the second try; doubles each time (base 2) with full jitter.
      max_backoff: cap of one wait, seconds.
      client_retries: retries the HTTP client itself makes per request (obstore's RetryConfig).
      timeout: seconds one request may take (connect + body), passed to the client.
    """

    attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 5.0
    client_retries: int = 2
    timeout: float = 60.0

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed try number `attempt` (1-based): full jitter in [cap/2, cap]."""
        cap = min(self.max_backoff, self.initial_backoff * (2 ** (attempt - 1)))
        return cap * (0.5 + 0.5 * (rng or random).random())


def call_with_retries(operation: Callable[[], T], policy: RetryPolicy,
                      is_transient: Callable[[BaseException], bool],
                      sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
    """Runs `operation` until it succeeds, fails permanently, or `policy.attempts` are spent.

    Returns:
      (result, attempts used).

    Raises:
      The last exception, unchanged, with `.varstore_attempts` set to the number of tries.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return operation(), attempt
        except Exception as err:  # noqa: BLE001 - classified below, re-raised unchanged
            if attempt >= policy.attempts or not is_transient(err):
                err.varstore_attempts = attempt  # type: ignore[attr-defined]
                raise
        sleep(policy.backoff(attempt))

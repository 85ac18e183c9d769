"""Retries: the one place that decides whether to try again and how long to wait first.

`Backoff` spaces attempts (informers, the agent's IMDS calls). `RetryPolicy` and `retrying` wrap
one controller write: an error that says it is `retryable` (a 409 Conflict: at once, after the
write has read the object afresh; a 429 that is not a PodDisruptionBudget's, a 5xx or no answer:
after `Retry-After`, or the backoff, never more than `max_wait_seconds`) is tried again up to
`attempts` times in all; every retry is logged. A write that still fails raises, and the next
planning pass, which sees the cluster as it is, plans it again.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    initial_seconds: float = 0.2
    factor: float = 2.0
    max_seconds: float = 5.0
    jitter: float = 0.2  # +- fraction, so many agents do not retry in lockstep

    def delay(self, attempt: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt number `attempt` + 1 (attempt counts from 1)."""
        base = min(self.max_seconds, self.initial_seconds * self.factor ** max(0, attempt - 1))
        jittered = base * (1.0 + random.uniform(-self.jitter, self.jitter))
        if retry_after is not None:
            return max(retry_after, jittered)
        return jittered


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3
    max_wait_seconds: float = 2.0  # a pass must not stall near a deadline on one write
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_seconds=0.2, max_seconds=2.0))

    def wait(self, attempt: int, error: BaseException) -> float:
        """Seconds before the next attempt; a conflict is retried at once (it reads afresh)."""
        if getattr(error, "kind", "") == "conflict":
            return 0.0
        retry_after = getattr(error, "retry_after", None)
        return min(self.max_wait_seconds, self.backoff.delay(attempt, retry_after=retry_after))


async def retrying(
    operation: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]],
    log: Any = None,
    what: str = "",
) -> T:
    """`operation(attempt)` (attempt counts from 1) until it succeeds, raises an error that is
    not `retryable`, or has been tried `policy.attempts` times."""
    attempt = 1
    while True:
        try:
            return await operation(attempt)
        except Exception as error:
            if not getattr(error, "retryable", False) or attempt >= policy.attempts:
                raise
            wait = policy.wait(attempt, error)
            if log is not None:
                log.info(
                    "retrying a write",
                    action=what,
                    attempt=attempt,
                    kind=getattr(error, "kind", type(error).__name__),
                    wait_seconds=round(wait, 3),
                    reason=str(error),
                )
            await sleep(wait)
            attempt += 1

"""Backoff policy: the one place that decides how long to wait before trying again."""

from __future__ import annotations

import random
from dataclasses import dataclass


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

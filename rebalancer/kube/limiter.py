"""A token bucket for API requests: `qps` on average, bursts up to `burst` (client-go's model).

Time comes from `monotonic` (the controller's clock), so on a virtual clock the budget is
virtual too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self, qps: float, burst: int, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._monotonic = monotonic
        self._tokens = float(burst)
        self._updated: float | None = None  # the first take starts the count
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0

    async def take(self) -> None:
        async with self._lock:
            now = self._monotonic()
            since = 0.0 if self._updated is None else now - self._updated
            self._tokens = min(self.burst, self._tokens + since * self.qps)
            self._updated = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.qps
                self.waited_seconds += wait
                await asyncio.sleep(wait)
                self._tokens = 1.0
                self._updated = self._monotonic()
            self._tokens -= 1

"""A token bucket for API requests: `qps` on average, bursts up to `burst` (client-go's model)."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0

    async def take(self) -> None:
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
            self._updated = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.qps
                self.waited_seconds += wait
                await asyncio.sleep(wait)
                self._tokens = 1.0
                self._updated = time.monotonic()
            self._tokens -= 1

"""The one clock. Decision code takes `now` from here (or as an argument), never from `time`.

`SystemClock` is the real one; tests and simulations pass `ManualClock` and step it by hand.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, aware, in UTC (for deadlines such as NotBefore)."""
        ...

    def monotonic(self) -> float:
        """Seconds for measuring intervals; never jumps."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when `advance` is called; `sleep` waits for that."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 0.0
        self._changed = asyncio.Event()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
        self._changed.set()
        self._changed = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        wake_at = self._mono + seconds
        while self._mono < wake_at:
            await self._changed.wait()

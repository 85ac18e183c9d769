"""Kubernetes Events, recorded in the background with a budget of their own.

Acting on a notice must never wait behind the Events that describe it: `emit` only queues; a
worker writes them at most `qps` per second (bursts of `burst`), outside the write budget of the
actions. When the queue is full, Events are dropped and counted, as client-go's recorder does.
On stop, what is still queued is written within a short budget: the Events of the last actions
before a shutdown (a leader handing over mid-surge) are the ones an operator looks for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from rebalancer.kube.errors import KubeError
from rebalancer.kube.limiter import TokenBucket
from rebalancer.kube.writes import Writer


class EventRecorder:
    def __init__(
        self,
        writer: Writer,
        *,
        qps: float = 10.0,
        burst: int = 25,
        capacity: int = 1000,
        flush_seconds: float = 2.0,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self._writer = writer
        # Events describe what this replica did while it held the Lease: once it may have lost
        # it (paused, cut off), what is still queued is dropped rather than written late.
        self._fence = fence or (lambda: True)
        self._flush_seconds = flush_seconds
        self._bucket = TokenBucket(qps, burst)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self.dropped = 0
        self.failed = 0
        self.written = 0

    def emit(
        self,
        *,
        regarding: Mapping[str, str],
        reason: str,
        message: str,
        event_type: str = "Normal",
        now: datetime | None = None,
    ) -> None:
        try:
            self._queue.put_nowait(
                {
                    "regarding": dict(regarding),
                    "reason": reason,
                    "message": message,
                    "event_type": event_type,
                    "now": now,
                }
            )
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self, stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                getting = asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait(
                    {getting, stopping}, return_when=asyncio.FIRST_COMPLETED
                )
                if getting not in done:
                    getting.cancel()
                    break
                await self._bucket.take()
                await self._write(getting.result())
        finally:
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
        await self._flush()

    async def _flush(self) -> None:
        """Write what is queued, for at most `flush_seconds` (the pod's grace period is short);
        whatever is left then is dropped and counted."""
        queued, done_before = self._queue.qsize(), self.written + self.failed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._flush_seconds):
                while not self._queue.empty():
                    await self._write(self._queue.get_nowait())
        self.dropped += queued - (self.written + self.failed - done_before)

    async def _write(self, event: dict[str, Any]) -> None:
        if not self._fence():
            self.failed += 1
            return
        try:
            await self._writer.record_event(**event, limited=False)
            self.written += 1
        except KubeError:
            self.failed += 1  # an Event is worth less than a retry loop

"""Sends notifications (`messages.py`) to one webhook: Slack, Microsoft Teams or generic JSON.

What it guarantees the controller: `offer` never blocks and never raises. It drops what was
already offered (the same kind for the same node or workload and event, once per process),
what the kinds setting leaves out, what a replica that does not lead offers, and what exceeds
`per_minute` in the last minute (counted; the next one sent says how many were dropped); the
rest waits in a bounded queue (full: dropped and counted). `run` is the one task that drains the
queue and POSTs, retrying 429 and 5xx answers under the project's `RetryPolicy` (honouring
Retry-After); any other failure counts at once. Every outcome is
`rebalancer_notifications_total{target, outcome}`.

The URL is a secret (Slack's and Teams' carry their token in the path): it is never logged,
and errors are told by their status or type, never by aiohttp's text, which quotes the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import aiohttp

from rebalancer.clock import Clock
from rebalancer.controller.messages import Kind, Notification, Target, payload
from rebalancer.metrics import ControllerMetrics, initialise
from rebalancer.retry import RetryPolicy, retrying

OUTCOMES = ("sent", "failed", "rate_limited", "queue_full")
REMEMBERED = 10_000  # keys kept for deduplication; the oldest are forgotten first
WINDOW_SECONDS = 60.0


class SendError(Exception):
    """A POST that did not succeed; `retryable` for a 429 or a 5xx (retry.py reads these)."""

    def __init__(self, status: int | None, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.status = status
        self.kind = f"http_{status}" if status is not None else "connection"
        self.retryable = status is not None and (status == 429 or status >= 500)
        self.retry_after = retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by chat webhooks: ignored)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class Notifier:
    def __init__(
        self,
        *,
        url: str,
        target: Target,
        metrics: ControllerMetrics,
        clock: Clock,
        log: Any,
        cluster: str = "",
        kinds: Iterable[Kind] = tuple(Kind),
        per_minute: int = 20,
        queue_size: int = 100,
        timeout_seconds: float = 10.0,
        policy: RetryPolicy | None = None,
        may_send: Callable[[], bool] = lambda: True,
    ) -> None:
        self._url = url
        self.target = target
        self._metrics = metrics
        self._clock = clock
        self._log = log
        self._cluster = cluster
        self._kinds = frozenset(kinds)
        self._per_minute = per_minute
        self._timeout = timeout_seconds
        self._policy = policy or RetryPolicy()
        self._may_send = may_send
        self._queue: asyncio.Queue[tuple[Notification, datetime, int]] = asyncio.Queue(
            maxsize=queue_size
        )
        self._offered: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._accepted: deque[float] = deque()  # monotonic times, the last minute's
        self._dropped = 0  # by the rate limit since the last one accepted
        initialise(metrics.notifications, [str(target)], OUTCOMES)

    # ---- the controller's side: never blocks -------------------------------------------------

    def offer(self, notification: Notification) -> None:
        if notification.kind not in self._kinds or not self._may_send():
            return
        if notification.key in self._offered:
            return
        self._offered[notification.key] = None
        if len(self._offered) > REMEMBERED:
            self._offered.popitem(last=False)
        now = self._clock.monotonic()
        while self._accepted and now - self._accepted[0] >= WINDOW_SECONDS:
            self._accepted.popleft()
        if len(self._accepted) >= self._per_minute:
            self._dropped += 1
            self._count("rate_limited")
            self._log.warning(
                "notification dropped: rate limit",
                kind=notification.kind,
                per_minute=self._per_minute,
                dropped=self._dropped,
            )
            return
        try:
            self._queue.put_nowait((notification, self._clock.now(), self._dropped))
        except asyncio.QueueFull:
            self._count("queue_full")
            self._log.warning("notification dropped: queue full", kind=notification.kind)
            return
        self._accepted.append(now)
        self._dropped = 0

    # ---- its own task ------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, flush_seconds: float = 3.0) -> None:
        """Send what is queued until `stop`; then what is still queued, for `flush_seconds`
        at most (a leader stepping down still tells what it did)."""
        async with aiohttp.ClientSession() as session:
            stopping = asyncio.ensure_future(stop.wait())
            try:
                while not stop.is_set():
                    getting = asyncio.ensure_future(self._queue.get())
                    await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    if not getting.done():
                        getting.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await getting
                        break
                    await self._send(session, *getting.result())
            finally:
                stopping.cancel()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(flush_seconds):
                    while not self._queue.empty():
                        await self._send(session, *self._queue.get_nowait())

    async def _send(
        self, session: aiohttp.ClientSession, notification: Notification, at: datetime, dropped: int
    ) -> None:
        body = payload(self.target, notification, cluster=self._cluster, at=at, dropped=dropped)

        async def post(_attempt: int) -> None:
            try:
                async with session.post(
                    self._url, json=body, timeout=aiohttp.ClientTimeout(total=self._timeout)
                ) as response:
                    if 200 <= response.status < 300:
                        return
                    raise SendError(
                        response.status,
                        f"HTTP {response.status}",
                        retry_after_seconds(response.headers.get("Retry-After")),
                    )
            except (aiohttp.ClientError, TimeoutError) as error:
                # Named by type only: aiohttp's messages quote the URL.
                raise SendError(None, type(error).__name__) from None

        try:
            await retrying(
                post,
                policy=self._policy,
                sleep=self._clock.sleep,
                log=self._log,
                what=f"notification {notification.kind}",
            )
        except SendError as error:
            self._count("failed")
            self._log.warning(
                "notification failed",
                kind=notification.kind,
                target=self.target,
                error=str(error),
                retried=error.retryable,
            )
            return
        self._count("sent")
        self._log.info("notification sent", kind=notification.kind, target=self.target)

    def _count(self, outcome: str) -> None:
        self._metrics.notifications.labels(str(self.target), outcome).inc()

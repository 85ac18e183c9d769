"""Azure's risk data in use: the eviction-rate buckets and the Spot Placement Scores, each
refreshed on its own schedule, each keeping its last good data through failures.

The shape of `PriceBook`: `data` is what the risk model reads (None until the first good
refresh, or when the source is off); `run` refreshes the regions and sizes the cluster uses every
`ttl_seconds`; a failed refresh (an error, a 429, a timeout, a token Azure refuses, an empty
answer) keeps the last good data, calls `on_failure(reason)` (the caller's metric) and logs one
line, and the next try comes after `retry_seconds`, or after Azure's Retry-After if longer.
The risk model decides when last good data is too old to use (it knows `fetched_at`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from rebalancer.azure.arm import AzureApiError
from rebalancer.azure.risk_data import EvictionRates, PlacementScores
from rebalancer.clock import Clock, SystemClock
from rebalancer.process import sleep_or_stop

T = TypeVar("T", EvictionRates, PlacementScores)
InUse = Callable[[], tuple[Iterable[str], Iterable[str]]]  # -> (regions, skus)
Fetch = Callable[[list[str], list[str]], Awaitable[Mapping[Any, str]]]


class RiskFeed(Generic[T]):
    def __init__(
        self,
        *,
        source: str,
        fetch: Fetch,
        wrap: Callable[[Mapping[Any, str], datetime], T],
        ttl_seconds: float,
        retry_seconds: float = 300.0,
        clock: Clock | None = None,
        log: Any = None,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self._fetch = fetch
        self._wrap: Callable[[Mapping[Any, str], datetime], T] = wrap
        self._ttl = ttl_seconds
        self._retry = retry_seconds
        self._clock = clock or SystemClock()
        self._log = log
        self._on_failure = on_failure or (lambda reason: None)
        self.data: T | None = None
        self.last_error: str | None = None
        self.refreshes = 0
        self.failures = 0
        self.next_wait: float = 0.0  # seconds run() waits after the last refresh

    async def refresh(self, regions: Iterable[str], skus: Iterable[str]) -> bool:
        wanted_regions = sorted({r.lower() for r in regions if r})
        wanted_skus = sorted({s for s in skus if s}, key=str.lower)
        try:
            found = await self._fetch(wanted_regions, wanted_skus)
            if not found:
                raise AzureApiError(f"no {self.source} data for {wanted_skus}", reason="empty")
        except AzureApiError as error:
            self._failed(error)
            return False
        except Exception as error:  # an answer no parser foresaw must not end the refreshes
            if self._log is not None:
                self._log.exception("risk data refresh crashed", source=self.source)
            self._failed(AzureApiError(f"{type(error).__name__}: {error}", reason="parse"))
            return False
        self.data = self._wrap(dict(found), self._clock.now())
        self.last_error = None
        self.refreshes += 1
        self.next_wait = self._ttl
        return True

    def _failed(self, error: AzureApiError) -> None:
        self.failures += 1
        self.last_error = str(error)
        self.next_wait = max(self._retry, error.retry_after or 0.0)
        self._on_failure(error.reason)
        if self._log is not None:
            self._log.warning(
                "risk data refresh failed; keeping the last good data",
                source=self.source,
                reason=error.reason,
                detail=str(error),
                last_good=self.data.fetched_at.isoformat() if self.data else None,
                retry_in_seconds=round(self.next_wait),
            )

    async def run(self, stop: asyncio.Event, in_use: InUse) -> None:
        while not stop.is_set():
            regions, skus = in_use()
            regions, skus = list(regions), list(skus)
            if any(regions) and any(skus):
                await self.refresh(regions, skus)
            else:
                self.next_wait = self._retry  # no spot node yet: look again later
            await sleep_or_stop(stop, self.next_wait)


def eviction_rate_feed(fetch: Fetch, **options: Any) -> RiskFeed[EvictionRates]:
    return RiskFeed(source="resource_graph", fetch=fetch, wrap=EvictionRates, **options)


def placement_score_feed(fetch: Fetch, **options: Any) -> RiskFeed[PlacementScores]:
    return RiskFeed(source="placement_score", fetch=fetch, wrap=PlacementScores, **options)

"""A risk feed keeps its last good data through every kind of failure, and says why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebalancer.azure.arm import AzureApiError
from rebalancer.azure.risk_feeds import eviction_rate_feed
from rebalancer.clock import ManualClock

GOOD = {("standard_nc24ads_a100_v4", "eastus"): "5-10"}


async def test_every_failure_keeps_the_last_good_data() -> None:
    answers: list[Any] = [
        GOOD,
        AzureApiError("HTTP 500", reason="http_error"),
        AzureApiError("throttled", reason="throttled", retry_after=1200),
        KeyError("a field nobody expected"),
        {},
    ]
    asked: list[tuple[list[str], list[str]]] = []

    async def fetch(regions: list[str], skus: list[str]) -> Mapping[Any, str]:
        asked.append((regions, skus))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    clock = ManualClock()
    failures: list[str] = []
    feed = eviction_rate_feed(
        fetch, ttl_seconds=3600, retry_seconds=300, clock=clock, on_failure=failures.append
    )
    assert await feed.refresh(["EastUS", "eastus", ""], ["Standard_NC24ads_A100_v4"])
    assert asked == [(["eastus"], ["Standard_NC24ads_A100_v4"])]
    good = feed.data
    assert good is not None and good.buckets == GOOD and good.fetched_at == clock.now()
    waits = []
    for _ in range(4):
        clock.advance(60)
        assert not await feed.refresh(["eastus"], ["Standard_NC24ads_A100_v4"])
        assert feed.data is good
        waits.append(feed.next_wait)
    assert failures == ["http_error", "throttled", "parse", "empty"]
    assert waits == [300, 1200, 300, 300]  # Azure's Retry-After when it is longer
    assert "KeyError" not in (feed.last_error or "")  # the last error is the latest one
    assert feed.failures == 4 and feed.refreshes == 1

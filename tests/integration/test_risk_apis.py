"""The Resource Graph and Spot Placement Score clients, with real Workload Identity tokens
(azure-identity against the token emulator over TLS), over real HTTP on 127.0.0.1: paging,
batching, throttling, expired tokens, failures, and the feeds keeping their last good data."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rebalancer.azure.arm import ArmClient, AzureApiError, identity_token
from rebalancer.azure.emulators import ArmEmulator, Fault, TokenEmulator, self_signed_tls
from rebalancer.azure.placement_scores import PlacementScoreClient
from rebalancer.azure.resource_graph import ResourceGraphClient
from rebalancer.azure.risk_feeds import eviction_rate_feed, placement_score_feed
from tests.helpers import serve

A100 = "Standard_NC24ads_A100_v4"
T4 = "Standard_NC4as_T4_v3"
H100 = "Standard_NC40ads_H100_v5"


class InstantClock:
    """Sleeps return at once and move the clock; the waits asked for are recorded."""

    def __init__(self) -> None:
        self.mono = 0.0
        self.slept: list[float] = []

    def now(self) -> datetime:
        return datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=self.mono)

    def monotonic(self) -> float:
        return self.mono

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.mono += seconds
        await asyncio.sleep(0)


@dataclass
class Azure:
    tokens: TokenEmulator
    arm: ArmEmulator
    client: ArmClient
    clock: InstantClock
    failures: list[str] = field(default_factory=list)


@pytest.fixture
async def azure(tmp_path: Path) -> AsyncIterator[Azure]:
    tls, certificate = self_signed_tls(tmp_path)
    tokens = TokenEmulator()
    clock = InstantClock()
    arm = ArmEmulator(tokens=tokens, monotonic=clock.monotonic)
    federated = tmp_path / "azure-identity-token"
    federated.write_text("projected-serviceaccount-token")
    async with serve(tokens.app(), ssl_context=tls) as authority, serve(arm.app()) as base:
        source = identity_token(
            authority=authority,
            connection_verify=str(certificate),
            tenant_id=tokens.tenant_id,
            client_id=tokens.client_id,
            token_file_path=str(federated),
        )
        client = ArmClient(tokens=source, base_url=base, clock=clock, timeout_seconds=5)
        try:
            yield Azure(tokens, arm, client, clock)
        finally:
            await source.close()


EVICTION_RATES = {
    ("standard_nc24ads_a100_v4", "eastus"): "5-10",
    ("standard_nc24ads_a100_v4", "westus2"): "20+%",
    ("standard_nc4as_t4_v3", "eastus"): "0-5%",
    ("standard_nc4as_t4_v3", "westus2"): "10-15",
    ("standard_nc40ads_h100_v5", "eastus"): "15-20",
    ("standard_d4s_v4", "eastus"): "0-5",  # not asked for
}


async def test_eviction_rates_page_by_skip_token_with_a_workload_identity_token(
    azure: Azure,
) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    azure.arm.page_size = 2
    graph = ResourceGraphClient(azure.client)
    buckets = await graph.eviction_rates(["eastus", "westus2"], [A100, T4, H100])
    assert buckets == {
        ("standard_nc24ads_a100_v4", "eastus"): "5-10",
        ("standard_nc24ads_a100_v4", "westus2"): "20+",
        ("standard_nc4as_t4_v3", "eastus"): "0-5",
        ("standard_nc4as_t4_v3", "westus2"): "10-15",
        ("standard_nc40ads_h100_v5", "eastus"): "15-20",
    }
    assert graph.pages_fetched == 3  # 5 rows, 2 a page
    path, body = azure.arm.requests[0]
    assert path == "/providers/Microsoft.ResourceGraph/resources"
    assert "subscriptions" not in body  # tenant scope
    assert body["options"] == {"$top": 1000, "resultFormat": "objectArray"}
    assert "$skipToken" in azure.arm.requests[1][1]["options"]
    # One token, traded for the projected ServiceAccount token, cached across the pages.
    assert azure.tokens.assertions == ["projected-serviceaccount-token"]


async def test_placement_scores_in_batches_of_8_regions_and_5_sizes(azure: Azure) -> None:
    regions = [f"region{i}" for i in range(9)]
    skus = [A100, T4, H100, "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3", "Standard_ND96"]
    azure.arm.placement_scores = {
        ("standard_nc24ads_a100_v4", "region0", "1"): "High",
        ("standard_nc24ads_a100_v4", "region0", "2"): "Low",
        ("standard_nd96", "region8", "3"): "Medium",
    }
    client = PlacementScoreClient(azure.client, subscription_id=azure.arm.subscription_id)
    scores = await client.scores(regions, skus)
    assert client.calls == 4  # 2 batches of regions x 2 of sizes
    assert len(scores) == 9 * 6 * 3
    assert scores[("standard_nc24ads_a100_v4", "region0", "1")] == "High"
    assert scores[("standard_nc24ads_a100_v4", "region0", "2")] == "Low"
    assert scores[("standard_nd96", "region8", "3")] == "Medium"
    assert scores[("standard_nd96", "region8", "1")] == "DataNotFoundOrStale"
    path, body = azure.arm.requests[0]
    assert path == (
        f"/subscriptions/{azure.arm.subscription_id}/providers/Microsoft.Compute/locations/"
        "region0/placementScores/spot/generate"
    )
    assert body["availabilityZones"] is True and body["desiredCount"] == 1
    assert len(body["desiredLocations"]) == 8 and len(body["desiredSizes"]) == 5


async def test_a_short_retry_after_is_waited_out(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    azure.arm.faults = [Fault("status", status=429, retry_after="3")]
    buckets = await ResourceGraphClient(azure.client).eviction_rates(["eastus"], [A100])
    assert buckets == {("standard_nc24ads_a100_v4", "eastus"): "5-10"}
    assert azure.clock.slept == [3.0]


async def test_a_long_retry_after_fails_the_refresh_and_delays_the_next(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    graph = ResourceGraphClient(azure.client)
    failures: list[str] = []
    feed = eviction_rate_feed(
        graph.eviction_rates, ttl_seconds=3600, retry_seconds=300, clock=azure.clock,
        on_failure=failures.append,
    )  # fmt: skip
    assert await feed.refresh(["eastus"], [A100])
    good = feed.data
    assert good is not None and feed.next_wait == 3600
    azure.arm.faults = [Fault("status", status=429, retry_after="900")]
    assert not await feed.refresh(["eastus"], [A100])
    assert feed.data is good  # the last good data stays in use
    assert failures == ["throttled"] and feed.next_wait == 900
    assert azure.clock.slept == []  # never waited 15 minutes inside the call


async def test_a_spent_quota_is_waited_for_before_the_next_request(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    azure.arm.quota, azure.arm.quota_window_seconds = 1, 5.0
    graph = ResourceGraphClient(azure.client)
    await graph.eviction_rates(["eastus"], [A100])  # spends the quota: remaining 0, resets in 5 s
    await graph.eviction_rates(["eastus"], [T4])
    assert azure.clock.slept == [5.0]
    assert azure.client.requests == 2  # no request spent on a certain 429


async def test_a_token_azure_says_is_expired_is_replaced_once(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    graph = ResourceGraphClient(azure.client)
    await graph.eviction_rates(["eastus"], [A100])
    azure.tokens.expire_all()
    assert await graph.eviction_rates(["eastus"], [T4]) == {
        ("standard_nc4as_t4_v3", "eastus"): "0-5"
    }
    assert azure.tokens.requests == 2
    azure.arm.faults = [Fault("expired_token", count=2)]  # the new token is refused too
    with pytest.raises(AzureApiError) as refused:
        await graph.eviction_rates(["eastus"], [T4])
    assert refused.value.reason == "auth"


async def test_a_refused_federated_token_keeps_the_last_good_scores(azure: Azure) -> None:
    azure.arm.placement_scores = {("standard_nc24ads_a100_v4", "eastus", "1"): "High"}
    client = PlacementScoreClient(azure.client, subscription_id=azure.arm.subscription_id)
    failures: list[str] = []
    feed = placement_score_feed(
        client.scores, ttl_seconds=1200, clock=azure.clock, on_failure=failures.append
    )
    assert await feed.refresh(["eastus"], [A100])
    good = feed.data
    azure.tokens.expire_all()
    azure.tokens.faults = [Fault("expired_assertion", count=5)]
    assert not await feed.refresh(["eastus"], [A100])
    assert feed.data is good and failures == ["auth"]
    assert "AADSTS700024" in (feed.last_error or "")


@pytest.mark.parametrize(
    ("faults", "reason"),
    [
        ([Fault("status", status=500, count=3)], "http_error"),
        ([Fault("status", status=403)], "auth"),
        ([Fault("garbage")], "parse"),
        ([Fault("slow", seconds=2.0)], "timeout"),
    ],
)
async def test_failures_have_a_reason(azure: Azure, faults: list[Fault], reason: str) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    azure.arm.faults = faults
    azure.client.timeout_seconds = 0.3
    with pytest.raises(AzureApiError) as failed:
        await ResourceGraphClient(azure.client).eviction_rates(["eastus"], [A100])
    assert failed.value.reason == reason


async def test_a_5xx_is_tried_again(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    azure.arm.faults = [Fault("status", status=503, count=2)]
    buckets = await ResourceGraphClient(azure.client).eviction_rates(["eastus"], [A100])
    assert buckets == {("standard_nc24ads_a100_v4", "eastus"): "5-10"}
    first, second = azure.clock.slept  # the backoff's 2 s and 4 s, each +-20 % jitter
    assert 1.6 <= first <= 2.4 and 3.2 <= second <= 4.8


async def test_an_empty_answer_keeps_the_last_good_data(azure: Azure) -> None:
    azure.arm.eviction_rates = EVICTION_RATES
    failures: list[str] = []
    feed = eviction_rate_feed(
        ResourceGraphClient(azure.client).eviction_rates, ttl_seconds=3600,
        clock=azure.clock, on_failure=failures.append,
    )  # fmt: skip
    assert await feed.refresh(["eastus"], [A100])
    assert not await feed.refresh(["centralus"], [A100])
    assert feed.data is not None
    assert feed.data.buckets == {("standard_nc24ads_a100_v4", "eastus"): "5-10"}
    assert failures == ["empty"]


async def test_unreachable_arm_is_a_connection_failure(azure: Azure) -> None:
    azure.client.base_url = "http://127.0.0.1:9"
    with pytest.raises(AzureApiError) as failed:
        await ResourceGraphClient(azure.client).eviction_rates(["eastus"], [A100])
    assert failed.value.reason == "connection"

"""Client of the Spot Placement Score API (GA, api-version 2025-06-05).

`POST /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/placementScores/spot/
generate` with `{"desiredLocations", "desiredSizes": [{"sku"}], "desiredCount",
"availabilityZones": true}`; at most 8 regions and 5 sizes a call, so a larger set is asked in
batches. Microsoft asks callers to cache a score 15-30 minutes: the refresher
(`rebalancer.azure.risk_feeds`) asks no more often than that. The identity needs the "Compute
Recommendations Role" on the subscription (Reader alone gets 403). Answers are read by
`rebalancer.azure.risk_data.parse_placement_scores`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rebalancer.azure.arm import ArmClient, AzureApiError
from rebalancer.azure.risk_data import ScoreKey, parse_placement_scores

API_VERSION = "2025-06-05"
MAX_REGIONS = 8
MAX_SIZES = 5


def generate_path(subscription_id: str, location: str) -> str:
    return (
        f"/subscriptions/{subscription_id}/providers/Microsoft.Compute/locations/{location}"
        "/placementScores/spot/generate"
    )


def batches(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass
class PlacementScoreClient:
    arm: ArmClient
    subscription_id: str
    desired_count: int = 1
    calls: int = field(default=0, init=False)
    unreadable_entries: int = field(default=0, init=False)

    async def scores(self, regions: Iterable[str], skus: Iterable[str]) -> dict[ScoreKey, str]:
        """Zonal scores of every size in every region (regional ones where Azure gives no zone)."""
        if not self.subscription_id:
            raise AzureApiError("no subscription id configured", reason="auth")
        wanted_regions = sorted({r.lower() for r in regions if r})
        wanted_skus = sorted({s for s in skus if s}, key=str.lower)
        scores: dict[ScoreKey, str] = {}
        for region_batch in batches(wanted_regions, MAX_REGIONS):
            for sku_batch in batches(wanted_skus, MAX_SIZES):
                body = {
                    "desiredLocations": region_batch,
                    "desiredSizes": [{"sku": sku} for sku in sku_batch],
                    "desiredCount": self.desired_count,
                    "availabilityZones": True,
                }
                self.calls += 1
                answer = await self.arm.post(
                    generate_path(self.subscription_id, region_batch[0]),
                    body,
                    api_version=API_VERSION,
                )
                try:
                    found, unreadable = parse_placement_scores(answer)
                except ValueError as error:
                    raise AzureApiError(str(error), reason="parse") from None
                self.unreadable_entries += unreadable
                scores.update(found)
        return scores

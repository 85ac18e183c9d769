"""What Azure publishes about spot eviction risk, as plain data, and the parsers of its rows. Pure.

Two sources, both optional (`rebalancer.azure.risk_feeds` fetches them):
- Azure Resource Graph, table `SpotResources`, type
  `microsoft.compute/skuspotevictionrate/location`:
  one eviction-rate bucket per VM size and region, `0-5`, `5-10`, `10-15`, `15-20` or `20+`
  percent per hour, a trailing average over days (Microsoft's pages say 7 or 28). Whether the
  string carries a `%` is not documented, and both forms are seen: both are read.
- the Spot Placement Score API: `High`, `Medium` or `Low` per VM size, region and zone, mixing
  the chance to allocate with the expected lifetime after; `DataNotFoundOrStale` and
  `RestrictedSkuNotAvailable` say "no score", and are kept as such (never read as Low).
No I/O here: the clients hand their rows to these parsers, and the risk model reads the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Bucket -> the hourly eviction probability taken for it: the midpoint of the range, and for
# the open `20+` bucket 25 % (the step of the other buckets past its lower edge). Source of the
# buckets: MicrosoftDocs/architecture-center docs/guide/spot/spot-eviction-content.md.
BUCKET_RATES: Mapping[str, float] = {
    "0-5": 0.025,
    "5-10": 0.075,
    "10-15": 0.125,
    "15-20": 0.175,
    "20+": 0.25,
}
SCORES = ("High", "Medium", "Low")  # the documented values; anything else is "no score"

EVICTION_RATE_TYPE = "microsoft.compute/skuspotevictionrate/location"
_BUCKET = re.compile(r"^\s*(\d+)\s*%?\s*(?:-\s*(\d+)\s*%?|(\+))\s*%?\s*$")

RateKey = tuple[str, str]  # (sku, region), lower case
ScoreKey = tuple[str, str, str]  # (sku, region, zone "1".."3" or "" for regional), lower case


@dataclass(frozen=True)
class EvictionRates:
    """Resource Graph's buckets by (sku, region), and when they were fetched."""

    buckets: Mapping[RateKey, str]
    fetched_at: datetime


@dataclass(frozen=True)
class PlacementScores:
    """Spot Placement Scores by (sku, region, zone), as Azure spelled them, and when fetched."""

    scores: Mapping[ScoreKey, str]
    fetched_at: datetime


# What Azure's risk feeds hold now: (eviction-rate buckets, Placement Scores), each None until
# fetched or when disabled.
RiskData = Callable[[], "tuple[EvictionRates | None, PlacementScores | None]"]


def no_risk_data() -> tuple[EvictionRates | None, PlacementScores | None]:
    return None, None


def parse_bucket(text: str) -> str | None:
    """`0-5`, `0-5%`, `0%-5%`, `20+`, `20+%` -> the canonical bucket; anything else: None."""
    match = _BUCKET.match(text)
    if match is None:
        return None
    low, high, plus = match.group(1), match.group(2), match.group(3)
    bucket = f"{int(low)}+" if plus else f"{int(low)}-{int(high)}"
    return bucket if bucket in BUCKET_RATES else None


def eviction_rate_query(skus: Iterable[str], regions: Iterable[str]) -> str:
    """The KQL of Microsoft's sample (spot-vms.md), for some sizes and regions. Names are
    restricted to Azure's own spelling (letters, digits, `_`), so nothing can escape the quotes."""
    wanted_skus = sorted({s.lower() for s in skus if _NAME.match(s)})
    wanted_regions = sorted({r.lower() for r in regions if _NAME.match(r)})
    return "\n".join(
        [
            "SpotResources",
            f"| where type =~ '{EVICTION_RATE_TYPE}'",
            f"| where sku.name in~ ({', '.join(repr(s) for s in wanted_skus)})",
            f"| where location in~ ({', '.join(repr(r) for r in wanted_regions)})",
            "| project skuName = tostring(sku.name), location, "
            "spotEvictionRate = tostring(properties.evictionRate)",
            "| order by skuName asc, location asc",
        ]
    )


_NAME = re.compile(r"^[A-Za-z0-9_]{1,80}$")


def parse_eviction_rate_rows(rows: Iterable[Any]) -> tuple[dict[RateKey, str], int]:
    """Rows of that query (or of the raw table: `sku.name`, `properties.evictionRate`) ->
    (buckets by (sku, region), number of rows that could not be read)."""
    buckets: dict[RateKey, str] = {}
    unreadable = 0
    for row in rows:
        if not isinstance(row, Mapping):
            unreadable += 1
            continue
        sku = row.get("skuName") or _get(row, "sku", "name") or _get(row, "properties", "skuName")
        rate = row.get("spotEvictionRate") or _get(row, "properties", "evictionRate")
        region = row.get("location")
        bucket = parse_bucket(rate) if isinstance(rate, str) else None
        if not (isinstance(sku, str) and isinstance(region, str) and sku and region and bucket):
            unreadable += 1
            continue
        buckets[(sku.lower(), region.lower())] = bucket
    return buckets, unreadable


def _get(row: Mapping[str, Any], *path: str) -> Any:
    value: Any = row
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def parse_placement_scores(answer: Any) -> tuple[dict[ScoreKey, str], int]:
    """A `placementScores/spot/generate` answer -> (scores by (sku, region, zone), number of
    entries that could not be read). Unknown score words are kept verbatim: the model treats
    every word but High, Medium and Low as "no score"."""
    entries = answer.get("placementScores") if isinstance(answer, Mapping) else None
    if not isinstance(entries, list):
        raise ValueError("answer has no placementScores list")
    scores: dict[ScoreKey, str] = {}
    unreadable = 0
    for entry in entries:
        if not isinstance(entry, Mapping):
            unreadable += 1
            continue
        sku, region, score = entry.get("sku"), entry.get("region"), entry.get("score")
        zone = entry.get("availabilityZone") or ""
        if not all(isinstance(v, str) and v for v in (sku, region, score)) or not isinstance(
            zone, str
        ):
            unreadable += 1
            continue
        assert isinstance(sku, str) and isinstance(region, str) and isinstance(score, str)
        scores[(sku.lower(), region.lower(), zone.lower())] = score[:64]
    return scores, unreadable

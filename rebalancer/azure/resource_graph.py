"""Client of Azure Resource Graph: a KQL query, page by page; and the spot eviction rates.

`POST /providers/Microsoft.ResourceGraph/resources?api-version=2024-04-01` with
`{"query", "options": {"$top", "$skipToken", "resultFormat": "objectArray"}}`, following
`$skipToken` until there is none (at most 1000 rows a page, a cap on pages). No `subscriptions`:
`SpotResources` is reference data queried at tenant scope (the identity needs Reader somewhere).
Throttling and tokens: `rebalancer.azure.arm`. Rows are read by `rebalancer.azure.risk_data`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rebalancer.azure.arm import ArmClient, AzureApiError
from rebalancer.azure.risk_data import RateKey, eviction_rate_query, parse_eviction_rate_rows

PATH = "/providers/Microsoft.ResourceGraph/resources"
API_VERSION = "2024-04-01"


@dataclass
class ResourceGraphClient:
    arm: ArmClient
    page_size: int = 1000
    max_pages: int = 50
    pages_fetched: int = field(default=0, init=False)
    unreadable_rows: int = field(default=0, init=False)

    async def query(self, kql: str) -> list[Any]:
        rows: list[Any] = []
        skip_token: str | None = None
        for _ in range(self.max_pages):
            options: dict[str, Any] = {"$top": self.page_size, "resultFormat": "objectArray"}
            if skip_token:
                options["$skipToken"] = skip_token
            page = await self.arm.post(
                PATH, {"query": kql, "options": options}, api_version=API_VERSION
            )
            data = page.get("data")
            if not isinstance(data, list):
                raise AzureApiError("answer has no data list", reason="parse")
            self.pages_fetched += 1
            rows.extend(data)
            token = page.get("$skipToken")
            if not isinstance(token, str) or not token:
                return rows
            skip_token = token
        raise AzureApiError(f"more than {self.max_pages} pages; giving up", reason="parse")

    async def eviction_rates(
        self, regions: Iterable[str], skus: Iterable[str]
    ) -> dict[RateKey, str]:
        """The eviction-rate bucket of each (sku, region) that Azure has one for."""
        rows = await self.query(eviction_rate_query(skus, regions))
        buckets, unreadable = parse_eviction_rate_rows(rows)
        self.unreadable_rows += unreadable
        return buckets

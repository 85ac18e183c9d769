"""Client of the Azure Retail Prices API: one region's VM prices, page by page.

`GET <base>?$filter=...`, following `NextPageLink` until it is null (never assuming a page
size), with a cap on pages; any failure raises `RetailPricesError` so the caller keeps its last
good table. Rows are read by `rebalancer.azure.prices.parse_retail_items`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp

from rebalancer.azure.prices import Key, Price, parse_retail_items, retail_filter


class RetailPricesError(Exception):
    pass


@dataclass
class RetailPricesClient:
    """Fetch prices of some regions (and SKUs) from the Retail Prices API, page by page."""

    base_url: str = "https://prices.azure.com/api/retail/prices"
    timeout_seconds: float = 30.0
    max_pages: int = 200
    session: aiohttp.ClientSession | None = None
    pages_fetched: int = field(default=0, init=False)

    async def fetch(self, regions: Iterable[str], skus: Iterable[str] = ()) -> dict[Key, Price]:
        wanted = sorted(set(skus))
        prices: dict[Key, Price] = {}
        own = self.session is None
        session = self.session or aiohttp.ClientSession()
        try:
            for region in sorted(set(regions)):
                for sku in wanted or [""]:
                    rows = await self._rows(session, retail_filter(region, [sku] if sku else []))
                    prices.update(parse_retail_items(rows))
        finally:
            if own:
                await session.close()
        if wanted:
            prices = {k: v for k, v in prices.items() if k[0] in {s.lower() for s in wanted}}
        return prices

    async def _rows(self, session: aiohttp.ClientSession, odata_filter: str) -> list[Any]:
        url: str | None = f"{self.base_url}?{urlencode({'$filter': odata_filter})}"
        rows: list[Any] = []
        pages = 0
        while url:
            pages += 1
            if pages > self.max_pages:
                raise RetailPricesError(f"more than {self.max_pages} pages; giving up")
            try:
                async with session.get(
                    url, timeout=aiohttp.ClientTimeout(total=self.timeout_seconds)
                ) as response:
                    if response.status != 200:
                        raise RetailPricesError(f"HTTP {response.status} from the prices API")
                    page = json.loads(await response.read())
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise RetailPricesError(f"{type(exc).__name__}: {exc}") from None
            if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
                raise RetailPricesError("answer has no Items list")
            self.pages_fetched += 1
            rows.extend(page["Items"])
            url = page.get("NextPageLink") or None
        return rows

"""The price table in use: bundled figures, a file over them, the Retail Prices API over both.

`PriceBook.table` is always usable. With the API enabled, `run` refreshes the regions and SKUs
the cluster uses every `ttl_seconds`; a failed refresh keeps the last good table and says so
(`last_error`, and the caller's metric), never an empty one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from rebalancer.azure.prices import BUNDLED, PriceTable, parse_price_file
from rebalancer.azure.retail_prices import RetailPricesClient, RetailPricesError
from rebalancer.clock import Clock, SystemClock
from rebalancer.process import sleep_or_stop

InUse = Callable[[], tuple[Iterable[str], Iterable[str]]]  # -> (regions, skus)


class PriceBook:
    def __init__(
        self,
        *,
        file: str | None = None,
        api: RetailPricesClient | None = None,
        ttl_seconds: float = 3600.0,
        retry_seconds: float = 300.0,
        clock: Clock | None = None,
        log: Any = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._on_failure = on_failure or (lambda: None)
        self._log = log
        self._api = api
        self._ttl = ttl_seconds
        self._retry = retry_seconds
        self._file: PriceTable | None = None
        if file:
            # A bad file stops the controller at start: prices silently missing would be worse.
            self._file = parse_price_file(Path(file).read_text())
        self._from_api: PriceTable | None = None
        self.table = self._compose()
        self.loaded_at: datetime = self._clock.now()
        self.last_error: str | None = None
        self.refreshes = 0
        self.failures = 0

    def _compose(self) -> PriceTable:
        table = BUNDLED
        if self._from_api is not None:
            table = self._from_api.merged_over(table)
        if self._file is not None:
            table = self._file.merged_over(table)  # an operator's file wins over everything
        return table

    async def refresh(self, regions: Iterable[str], skus: Iterable[str]) -> bool:
        if self._api is None:
            return False
        try:
            prices = await self._api.fetch(regions, skus)
        except RetailPricesError as error:
            self.failures += 1
            self._on_failure()
            self.last_error = str(error)
            if self._log is not None:
                self._log.warning(
                    "price refresh failed; keeping the last good table", reason=str(error)
                )
            return False
        if not prices:
            self.failures += 1
            self._on_failure()
            self.last_error = "the prices API returned no usable rows"
            return False
        now = self._clock.now()
        self._from_api = PriceTable(prices, "retail-api", now)
        self.table = self._compose()
        self.loaded_at = now
        self.last_error = None
        self.refreshes += 1
        return True

    async def run(self, stop: asyncio.Event, in_use: InUse) -> None:
        if self._api is None:
            return
        while not stop.is_set():
            regions, skus = in_use()
            regions, skus = sorted({r for r in regions if r}), sorted({s for s in skus if s})
            ok = await self.refresh(regions, skus) if regions else False
            await sleep_or_stop(stop, self._ttl if ok else self._retry)

"""The Retail Prices client against the API emulator over real HTTP: filters, paging, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.azure.prices import Price
from rebalancer.azure.retail_prices import RetailPricesClient, RetailPricesError
from rebalancer_sim.prices import RetailPricesEmulator
from tests.helpers import serve

ROWS = json.loads((Path(__file__).parent.parent / "data" / "retail-prices-rows.json").read_text())[
    "Items"
]


async def test_fetch_follows_next_page_links() -> None:
    emulator = RetailPricesEmulator(rows=ROWS, page_size=2)
    async with serve(emulator.app()) as base:
        client = RetailPricesClient(base_url=f"{base}/api/retail/prices")
        prices = await client.fetch(["eastus"])
    assert prices[("standard_nc24ads_a100_v4", "eastus")] == Price(3.673, 0.444433)
    assert client.pages_fetched >= 3  # 7 eastus consumption rows, 2 a page


async def test_fetch_one_sku_filters_server_side() -> None:
    emulator = RetailPricesEmulator(rows=ROWS, page_size=100)
    async with serve(emulator.app()) as base:
        client = RetailPricesClient(base_url=f"{base}/api/retail/prices")
        prices = await client.fetch(["eastus"], ["Standard_NC4as_T4_v3"])
    assert prices == {("standard_nc4as_t4_v3", "eastus"): Price(0.526, 0.062699)}


@pytest.mark.parametrize("failure", [500, 429, 0])
async def test_failures_raise(failure: int) -> None:
    emulator = RetailPricesEmulator(rows=ROWS, failures=[failure])
    async with serve(emulator.app()) as base:
        client = RetailPricesClient(base_url=f"{base}/api/retail/prices")
        with pytest.raises(RetailPricesError):
            await client.fetch(["eastus"])


async def test_unreachable_api_raises() -> None:
    client = RetailPricesClient(base_url="http://127.0.0.1:9/api/retail/prices", timeout_seconds=2)
    with pytest.raises(RetailPricesError):
        await client.fetch(["eastus"])


async def test_price_book_keeps_the_last_good_table(tmp_path: Path) -> None:
    from rebalancer.azure.price_book import PriceBook

    emulator = RetailPricesEmulator(rows=ROWS)
    failures: list[int] = []
    price_file = tmp_path / "prices.yaml"
    price_file.write_text("prices: [{sku: Standard_NC4as_T4_v3, region: eastus, spot: 0.05}]\n")
    async with serve(emulator.app()) as base:
        book = PriceBook(
            file=str(price_file),
            api=RetailPricesClient(base_url=f"{base}/api/retail/prices"),
            on_failure=lambda: failures.append(1),
        )
        assert book.table.source == "file+bundled"
        assert await book.refresh(["eastus"], ["Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3"])
        assert book.table.source == "file+retail-api+bundled"
        assert book.table.price("Standard_NC24ads_A100_v4", "eastus", spot=True) == 0.444433
        assert (
            book.table.price("Standard_NC4as_T4_v3", "eastus", spot=True) == 0.05
        )  # the file wins
        good = book.table
        emulator.failures = [500, 0]
        assert not await book.refresh(["eastus"], ["Standard_NC24ads_A100_v4"])
        assert not await book.refresh(["eastus"], ["Standard_NC24ads_A100_v4"])
        assert book.table is good and book.last_error and len(failures) == 2
        emulator.rows = []
        assert not await book.refresh(["eastus"], ["Standard_NC24ads_A100_v4"])
        assert book.table is good and "no usable rows" in (book.last_error or "")
    book.__dict__["_api"] = RetailPricesClient(base_url="http://127.0.0.1:9/x", timeout_seconds=1)
    assert not await book.refresh(["eastus"], [])
    assert book.table is good and len(failures) == 4

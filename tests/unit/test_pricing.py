"""Prices: Retail Prices rows, the price file, the bundled table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.azure.prices import (
    BUNDLED,
    Price,
    PriceFileError,
    PriceTable,
    parse_price_file,
    parse_retail_items,
    retail_filter,
)

ROWS = json.loads((Path(__file__).parent.parent / "data" / "retail-prices-rows.json").read_text())[
    "Items"
]


def test_retail_rows_to_prices() -> None:
    prices = parse_retail_items(ROWS)
    # Windows, Low Priority, reservations and dev/test rows are not pay-as-you-go Linux prices.
    assert prices == {
        ("standard_nc24ads_a100_v4", "eastus"): Price(on_demand=3.673, spot=0.444433),
        ("standard_nc4as_t4_v3", "eastus"): Price(on_demand=0.526, spot=0.062699),
    }


def test_the_newest_row_of_a_meter_wins_whatever_the_order() -> None:
    assert parse_retail_items(list(reversed(ROWS))) == parse_retail_items(ROWS)


def test_odd_rows_are_skipped_not_fatal() -> None:
    odd = [{}, {"serviceName": "Virtual Machines", "retailPrice": "free"}, {"armSkuName": None}]
    assert parse_retail_items([*odd, *ROWS]) == parse_retail_items(ROWS)


def test_filter() -> None:
    assert retail_filter("eastus", ["Standard_NC24ads_A100_v4"]) == (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        "armRegionName eq 'eastus' and armSkuName eq 'Standard_NC24ads_A100_v4'"
    )


def test_price_file() -> None:
    table = parse_price_file(
        "prices:\n"
        "  - {sku: Standard_NC24ads_A100_v4, region: EastUS, onDemand: 3.5, spot: 0.4}\n"
        "  - {sku: Standard_NC4as_T4_v3, region: eastus, spot: 0.05}\n"
    )
    assert table.price("standard_nc24ads_a100_v4", "eastus", spot=True) == 0.4
    assert table.on_demand("Standard_NC4as_T4_v3", "eastus") is None
    merged = table.merged_over(BUNDLED)
    assert merged.on_demand("Standard_NC4as_T4_v3", "eastus") == 0.526  # from the bundle
    assert merged.price("Standard_NC4as_T4_v3", "eastus", spot=True) == 0.05  # from the file
    assert merged.source == "file+bundled"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "prices: 3",
        "prices: [{sku: x}]",
        "prices: [{sku: x, region: y, spot: -1}]",
        "prices: [{sku: x, region: y, onDemand: cheap}]",
        "prices: [{sku: x, region: y, spot: true}]",
        "{",
    ],
)
def test_bad_price_files_name_the_problem(text: str) -> None:
    with pytest.raises(PriceFileError):
        parse_price_file(text)


def test_bundled_table_has_the_reference_figures() -> None:
    assert BUNDLED.price("Standard_NC24ads_A100_v4", "eastus", spot=False) == 3.673
    assert BUNDLED.price("Standard_NC24ads_A100_v4", "eastus", spot=True) == 0.444433
    assert BUNDLED.price("Standard_NC24ads_A100_v4", "mars", spot=True) is None
    assert isinstance(BUNDLED, PriceTable)

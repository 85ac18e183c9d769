"""VM prices: on-demand and spot $/hour per Azure SKU and region.

Three sources, in the order a deployment usually meets them:
- bundled defaults for common GPU SKUs (`BUNDLED`, below, with where each figure comes from);
- a file (a mounted ConfigMap) in the documented format, see `parse_price_file`;
- the Azure Retail Prices API (`rebalancer.azure.retail_prices`), whose rows `parse_retail_items`
  reads.
Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

Key = tuple[str, str]  # (sku, region), both lower case


@dataclass(frozen=True)
class Price:
    on_demand: float | None = None
    spot: float | None = None


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[Key, Price]
    source: str  # "bundled", "file", "retail-api", or a combination like "retail-api+file"
    updated_at: datetime | None = None  # when the figures were obtained (None: unknown)

    def price(self, sku: str, region: str, *, spot: bool) -> float | None:
        entry = self.prices.get((sku.lower(), region.lower()))
        if entry is None:
            return None
        return entry.spot if spot else entry.on_demand

    def on_demand(self, sku: str, region: str) -> float | None:
        return self.price(sku, region, spot=False)

    def merged_over(self, base: PriceTable) -> PriceTable:
        """This table's figures, falling back to `base` for what this one lacks."""
        prices = dict(base.prices)
        for key, price in self.prices.items():
            old = prices.get(key, Price())
            prices[key] = Price(
                on_demand=price.on_demand if price.on_demand is not None else old.on_demand,
                spot=price.spot if price.spot is not None else old.spot,
            )
        return PriceTable(prices, f"{self.source}+{base.source}", self.updated_at)


# Linux, pay-as-you-go, USD/hour. Source: the skypilot-org/skypilot-catalog Azure catalog
# (catalogs/v6/azure/vms.csv, commit 098741e7; its snapshot date is not recorded), which is built
# from the Azure Retail Prices API: on-demand = the non-Spot Linux Consumption meter, spot = the
# meter whose skuName contains " Spot". Spot prices move a lot: refresh from the API or override
# them from a file for real accounting.
BUNDLED_SOURCE = "skypilot-catalog azure/vms.csv @098741e7 (Retail Prices API snapshot)"
_BUNDLED_ROWS: tuple[tuple[str, str, float, float], ...] = (
    ("Standard_NC24ads_A100_v4", "eastus", 3.673, 0.444433),
    ("Standard_NC24ads_A100_v4", "eastus2", 3.673, 0.47749),
    ("Standard_NC24ads_A100_v4", "westus2", 3.673, 0.615962),
    ("Standard_NC24ads_A100_v4", "westus3", 3.673, 0.40403),
    ("Standard_NC24ads_A100_v4", "southcentralus", 4.408, 0.57304),
    ("Standard_NC24ads_A100_v4", "westus", 4.775, 0.647968),
    ("Standard_NC24ads_A100_v4", "centralus", 4.15, 0.4565),
    ("Standard_NC4as_T4_v3", "eastus", 0.526, 0.062699),
    ("Standard_NC4as_T4_v3", "eastus2", 0.526, 0.05786),
    ("Standard_NC4as_T4_v3", "northcentralus", 0.526, 0.05786),
    ("Standard_NC4as_T4_v3", "westus3", 0.526, 0.05786),
    ("Standard_NC4as_T4_v3", "westus2", 0.526, 0.061595),
    ("Standard_NC4as_T4_v3", "southcentralus", 0.631, 0.06941),
    ("Standard_NC4as_T4_v3", "westus", 0.631, 0.06941),
    ("Standard_NC4as_T4_v3", "centralus", 0.594, 0.06534),
    ("Standard_ND96asr_v4", "eastus", 27.197, 2.99167),
    ("Standard_ND96asr_v4", "westus2", 27.197, 2.99167),
    ("Standard_ND96asr_v4", "southcentralus", 32.63, 3.5893),
    ("Standard_NC48ads_A100_v4", "eastus2", 7.346, 0.95498),
    ("Standard_NC96ads_A100_v4", "eastus2", 14.692, 1.90996),
    ("Standard_ND96amsr_A100_v4", "eastus", 32.77, 3.6047),
)
BUNDLED = PriceTable(
    prices={
        (sku.lower(), region): Price(on_demand, spot)
        for sku, region, on_demand, spot in _BUNDLED_ROWS
    },
    source="bundled",
)


class PriceFileError(ValueError):
    pass


def parse_price_file(text: str) -> PriceTable:
    """A price file (YAML or JSON):

        prices:
          - sku: Standard_NC24ads_A100_v4
            region: eastus
            onDemand: 3.673      # USD/hour; either figure may be left out
            spot: 0.444433

    Raises PriceFileError naming the first bad entry.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PriceFileError(f"not YAML or JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("prices"), list):
        raise PriceFileError("expected a mapping with a 'prices' list")
    prices: dict[Key, Price] = {}
    for index, entry in enumerate(data["prices"]):
        if not isinstance(entry, dict):
            raise PriceFileError(f"prices[{index}] is not a mapping")
        sku, region = entry.get("sku"), entry.get("region")
        if not isinstance(sku, str) or not isinstance(region, str) or not sku or not region:
            raise PriceFileError(f"prices[{index}]: sku and region are required strings")
        figures = {}
        for name in ("onDemand", "spot"):
            value = entry.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise PriceFileError(f"prices[{index}].{name}: not a price ({value!r})")
            figures[name] = None if value is None else float(value)
        prices[(sku.lower(), region.lower())] = Price(figures["onDemand"], figures["spot"])
    return PriceTable(prices, "file")


def is_spot_row(item: Mapping[str, Any]) -> bool:
    return "Spot" in str(item.get("meterName", "")) or "Spot" in str(item.get("skuName", ""))


def usable_row(item: Mapping[str, Any]) -> bool:
    """Linux pay-as-you-go VM hours: not Windows, not Low Priority, not reservations or dev/test."""
    product = str(item.get("productName", ""))
    meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
    return (
        item.get("serviceName") == "Virtual Machines"
        and item.get("type", item.get("priceType")) == "Consumption"
        and str(item.get("unitOfMeasure", "")) == "1 Hour"
        and "Windows" not in product
        and not product.endswith(" Win")
        and "Low Priority" not in meter
        and bool(item.get("armSkuName"))
        and bool(item.get("armRegionName"))
        and isinstance(item.get("retailPrice"), int | float)
    )


def parse_retail_items(items: Iterable[Mapping[str, Any]]) -> dict[Key, Price]:
    """Retail Prices API rows to prices; of several rows for one meter the newest counts."""
    newest: dict[tuple[str, str, bool], tuple[str, float]] = {}
    for item in items:
        if not usable_row(item):
            continue
        key = (
            str(item["armSkuName"]).lower(),
            str(item["armRegionName"]).lower(),
            is_spot_row(item),
        )
        started = str(item.get("effectiveStartDate", ""))
        if key not in newest or started >= newest[key][0]:
            newest[key] = (started, float(item["retailPrice"]))
    prices: dict[Key, Price] = {}
    for (sku, region, spot), (_, value) in newest.items():
        old = prices.get((sku, region), Price())
        prices[(sku, region)] = Price(old.on_demand, value) if spot else Price(value, old.spot)
    return prices


def retail_filter(region: str, skus: Iterable[str] = ()) -> str:
    """The OData `$filter` for one region's VM consumption prices (optionally some SKUs only)."""
    terms = [
        "serviceName eq 'Virtual Machines'",
        "priceType eq 'Consumption'",
        f"armRegionName eq '{region}'",
    ]
    names = sorted(set(skus))
    if len(names) == 1:
        terms.append(f"armSkuName eq '{names[0]}'")
    return " and ".join(terms)

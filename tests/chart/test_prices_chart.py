"""controller.prices: your prices reach the controller as its price file, through a ConfigMap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rebalancer.azure.prices import parse_price_file
from tests.chart.conftest import Tools, by_kind, one
from tests.chart.generated import CHART
from tests.chart.test_controller_chart import controller_settings_from

pytestmark = pytest.mark.chart

PRICES = [
    {"sku": "Standard_NC24ads_A100_v4", "region": "eastus", "onDemand": 2.95, "spot": 0.41},
    {"sku": "Standard_NC48ads_A100_v4", "region": "westeurope", "spot": 0.93},
]


def render(tools: Tools, prices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return tools.template("--set-json", f"controller.prices={json.dumps(prices)}")


def test_the_controller_reads_the_prices_it_is_given(
    tools: Tools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    objects = render(tools, PRICES)
    settings = controller_settings_from(objects, monkeypatch, tmp_path)
    assert settings.prices_file is not None
    table = parse_price_file(Path(settings.prices_file).read_text())
    # The same figures the values gave, read by the controller's own parser.
    assert {key: (price.on_demand, price.spot) for key, price in table.prices.items()} == {
        ("standard_nc24ads_a100_v4", "eastus"): (2.95, 0.41),
        ("standard_nc48ads_a100_v4", "westeurope"): (None, 0.93),
    }


def test_no_prices_no_config_map_no_file(tools: Tools) -> None:
    objects = tools.template()
    assert not [
        c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-prices")
    ]
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert "volumes" not in spec
    assert "REBALANCER_PRICES_FILE" not in {e["name"] for e in spec["containers"][0]["env"]}


def test_a_price_change_rolls_the_controller(tools: Tools) -> None:
    """The file is read at start: the pod template must change with it."""

    def checksum(prices: list[dict[str, Any]]) -> str:
        template = one(render(tools, prices), "Deployment")["spec"]["template"]
        return str(template["metadata"]["annotations"]["checksum/prices"])

    cheaper = [dict(PRICES[0], spot=0.39), PRICES[1]]
    assert checksum(PRICES) != checksum(cheaper)


@pytest.mark.parametrize(
    "prices",
    [
        [{"sku": "Standard_NC24ads_A100_v4", "onDemand": 3.0}],  # no region
        [{"sku": "Standard_NC24ads_A100_v4", "region": "eastus", "spot": -1}],
        [{"sku": "Standard_NC24ads_A100_v4", "region": "eastus", "spot": "cheap"}],
        [{"sku": "Standard_NC24ads_A100_v4", "region": "eastus", "onDmand": 3.0}],  # typo
    ],
)
def test_bad_prices_are_refused_at_install(tools: Tools, prices: list[dict[str, Any]]) -> None:
    result = tools.helm(
        "helm4",
        "template",
        "r",
        str(CHART),
        "--set-json",
        f"controller.prices={json.dumps(prices)}",
    )
    assert result.returncode != 0
    assert "controller/prices" in result.stderr, result.stderr

"""Cost metrics of the controller equal node-hours x price computed here, on virtual time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rebalancer.azure.prices import BUNDLED
from rebalancer.controller.cost import region_of
from rebalancer_sim import resources as R
from tests.e2e.rig import Rig
from tests.virtual.rig import running

pytestmark = pytest.mark.looptime


def expected_rates(rig: Rig) -> dict[str, float]:
    """Spend per hour by priority, from the emulator's nodes and the bundled price table."""
    rates = {"spot": 0.0, "regular": 0.0}
    for node in rig.cluster.store.items(R.NODES):
        labels = node["metadata"]["labels"]
        spot = labels.get("kubernetes.azure.com/scalesetpriority") == "spot"
        price = BUNDLED.price(
            labels["node.kubernetes.io/instance-type"], region_of(labels), spot=spot
        )
        if price is not None:
            rates["spot" if spot else "regular"] += price
    return rates


EVICTIONS = 'rebalancer_evictions{pool="gpuspot",sku="Standard_NC24ads_A100_v4"'


async def test_spend_is_node_hours_times_price(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        rig.start_agents()
        rig.start_controller(REBALANCER_COST_INTERVAL_SECONDS="0.5")
        await rig.until_ready()
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_cost_per_hour_dollars{pool="gpuspot",priority="spot"}',
            0.01,
            timeout=10,
        )
        # Three spot A100s and two on-demand ones in eastus; the D4s system node has no price.
        assert await rig.metric(
            "controller-0", 'rebalancer_cost_per_hour_dollars{pool="gpuspot",priority="spot"}'
        ) == pytest.approx(3 * 0.444433)
        assert await rig.metric(
            "controller-0",
            'rebalancer_cost_per_hour_dollars{pool="gpuondemand",priority="regular"}',
        ) == pytest.approx(2 * 3.673)
        assert await rig.metric(
            "controller-0", "rebalancer_savings_per_hour_dollars"
        ) == pytest.approx(3 * (3.673 - 0.444433))
        assert await rig.metric("controller-0", "rebalancer_unpriced_nodes") == 1

        # Integrate here, independently, while a spot node is evicted and its replica fails over.
        spent_before = {
            p: await rig.metric("controller-0", f'rebalancer_spend_dollars_total{{priority="{p}"}}')
            for p in ("spot", "regular")
        }
        expected = {"spot": 0.0, "regular": 0.0}
        started = last = rig.now()
        rig.cluster.preempt(rig.spot_nodes()[0], notice_seconds=8)
        while rig.now() - started < 16:
            await asyncio.sleep(0.1)
            now = rig.now()
            for priority, rate in expected_rates(rig).items():
                expected[priority] += rate * (now - last) / 3600
            last = now
        spent = {
            p: await rig.metric("controller-0", f'rebalancer_spend_dollars_total{{priority="{p}"}}')
            - spent_before[p]
            for p in ("spot", "regular")
        }
        for priority in ("spot", "regular"):
            # The controller accounts every 0.5 s: allow one interval (and a scrape) at the top rate.
            slack = 1.5 * (3 * 3.673) / 3600
            assert spent[priority] == pytest.approx(expected[priority], abs=slack), priority
        assert expected["spot"] > 0 and expected["regular"] > 0
        # The replacement runs on demand although the workload could use spot: a fallback.
        assert await rig.metric("controller-0", "rebalancer_fallback_replicas") == 1
        assert await rig.metric("controller-0", "rebalancer_fallback_replica_hours_total") > 0
        # One Preempt in this test: counted once in every window (from the eviction history).
        for window in ("1h", "6h", "24h"):
            sample = f'{EVICTIONS},window="{window}",zone="eastus-1"}}'
            assert await rig.metric("controller-0", sample) == 1
        text = await rig.metrics("controller-0")
        assert 'rebalancer_price_table_info{source="bundled"} 1.0' in text

"""Turning what the controller sees into cost metrics, over time.

`Accountant.account` is called every planning pass and does its work at most every
`interval_seconds` (it walks every node and pod): it prices the nodes, sets the rate gauges and
adds rate x elapsed time to the counters. Every replica accounts for itself, leader or not, so
a leader change neither stops nor doubles the counters of any one process (sum over one replica,
or take `max` across them, in queries).

Eviction statistics are not kept here: they come from the eviction history on the cluster
(`history.py`), which survives a change of leader.
"""

from __future__ import annotations

from collections.abc import Collection

from rebalancer.azure.price_book import PriceBook
from rebalancer.controller.cost import cost_rates, price_nodes, spot_capable
from rebalancer.controller.pools import pools_of
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.metrics import ControllerMetrics


class Accountant:
    def __init__(
        self,
        *,
        metrics: ControllerMetrics,
        book: PriceBook,
        interval_seconds: float = 10.0,
    ) -> None:
        self._metrics = metrics
        self._book = book
        self._interval = interval_seconds
        self._last: float | None = None
        self._shown_prices: set[tuple[str, str, str]] = set()
        self._shown_pools: set[tuple[str, str]] = set()

    def account(self, state: Snapshot, managed: Collection[WorkloadKey], now: float) -> None:
        """Every `interval_seconds` at most: price the nodes and integrate the cost counters.
        `managed`: the workloads the controller fails over (the fallback metrics count them)."""
        if self._last is not None and now - self._last < self._interval:
            return
        elapsed = 0.0 if self._last is None else now - self._last
        self._last = now
        table = self._book.table
        nodes = price_nodes(state.nodes.values(), table)
        candidates = [w for w in state.workloads.values() if w.key in managed]
        capable = spot_capable(candidates, pools_of(state.nodes.values()))
        rates = cost_rates(nodes, state.pods.values(), capable, state.owners)
        hours = elapsed / 3600.0
        m = self._metrics
        for gone in self._shown_pools - set(rates.by_pool):
            m.cost_per_hour.labels(*gone).set(0)  # a pool that emptied costs nothing now
        for (pool, priority), rate in rates.by_pool.items():
            m.cost_per_hour.labels(pool, priority).set(rate)
        self._shown_pools |= set(rates.by_pool)
        for priority in ("spot", "regular"):
            m.spend.labels(priority).inc(rates.spend(priority) * hours)
        m.savings_per_hour.set(rates.savings)
        m.savings.inc(rates.savings * hours)
        m.fallback_replicas.set(rates.fallback_replicas)
        m.fallback_replica_hours.inc(rates.fallback_replicas * hours)
        m.fallback_cost.inc(rates.fallback_cost * hours)
        m.unpriced_nodes.set(rates.unpriced_nodes)
        for node in nodes:
            if node.price is not None:
                sku_key = (node.sku, node.region, "spot" if node.spot else "regular")
                m.sku_price.labels(*sku_key).set(node.price)
                self._shown_prices.add(sku_key)
        m.price_table_age.set((state.now - self._book.loaded_at).total_seconds())
        m.price_table_source.labels(self._book.table.source).set(1)

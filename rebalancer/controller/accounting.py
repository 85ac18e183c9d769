"""Turning what the controller sees into cost and eviction metrics, over time.

`Accountant.account` is called every planning pass and does its work at most every
`interval_seconds` (it walks every node and pod): it prices the nodes, sets the rate gauges and
adds rate x elapsed time to the counters. Every replica accounts for itself, leader or not, so
a leader change neither stops nor doubles the counters of any one process (sum over one replica,
or take `max` across them, in queries).

Eviction statistics: each Preempt notice first seen is remembered per (pool, SKU, zone) for 24
hours; `recent` counts them over a sliding window, for the metrics and for the planner, which
lengthens a pool's cool-down when it keeps being evicted.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from typing import Any

from rebalancer.azure.price_book import PriceBook
from rebalancer.controller.cost import cost_rates, price_nodes, spot_capable
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import Snapshot, managed, workload_of
from rebalancer.controller.pools import pools_of
from rebalancer.metrics import ControllerMetrics

WINDOWS = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 24 * 3600.0}


class Accountant:
    def __init__(
        self,
        *,
        metrics: ControllerMetrics,
        book: PriceBook,
        interval_seconds: float = 10.0,
        planner_settings: Any = None,
        started: float = 0.0,
    ) -> None:
        self._metrics = metrics
        self._book = book
        self._interval = interval_seconds
        self._planner_settings = planner_settings
        self._last: float | None = None
        self._started = started
        self._evictions: dict[tuple[str, str, str], deque[float]] = defaultdict(deque)
        self._shown_prices: set[tuple[str, str, str]] = set()
        self._shown_pools: set[tuple[str, str]] = set()

    # ---- evictions ---------------------------------------------------------------------------

    def record_eviction(self, pool: str, sku: str, zone: str, now: float) -> None:
        self._evictions[(pool, sku, zone)].append(now)

    def recent(self, now: float, window: float = 3600.0) -> dict[tuple[str, str], int]:
        """Preempt notices per (pool, zone) in the last `window` seconds."""
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for (pool, _, zone), times in self._evictions.items():
            counts[(pool, zone)] += sum(1 for t in times if now - t <= window)
        return dict(counts)

    def quiet(self, nodes: Iterable[NodeInfo], now: float) -> dict[str, float]:
        """Seconds since each pool's last Preempt; never more than we have been watching."""
        watched = now - self._started
        last: dict[str, float] = {}
        for (pool, _, _), times in self._evictions.items():
            if times:
                last[pool] = max(last.get(pool, times[-1]), times[-1])
        return {
            n.pool: min(watched, now - last[n.pool]) if n.pool in last else watched for n in nodes
        }

    # ---- cost --------------------------------------------------------------------------------

    def account(self, state: Snapshot, now: float) -> None:
        if self._last is not None and now - self._last < self._interval:
            return
        elapsed = 0.0 if self._last is None else now - self._last
        self._last = now
        self._account_evictions(now)
        table = self._book.table
        nodes = price_nodes(state.nodes.values(), table)
        settings = self._planner_settings
        candidates = [
            w for w in state.workloads.values() if settings is None or managed(w, settings)
        ]
        capable = spot_capable(candidates, pools_of(state.nodes.values()))
        owners = {}
        for pod in state.pods.values():
            workload = workload_of(state, pod)
            if workload is not None:
                owners[pod.key] = workload.key
        rates = cost_rates(nodes, state.pods.values(), capable, owners)
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

    def _account_evictions(self, now: float) -> None:
        horizon = max(WINDOWS.values())
        for (pool, sku, zone), times in self._evictions.items():
            while times and now - times[0] > horizon:
                times.popleft()
            for name, window in WINDOWS.items():
                count = sum(1 for t in times if now - t <= window)
                self._metrics.evictions.labels(pool, sku, zone, name).set(count)

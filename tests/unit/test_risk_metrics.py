"""The controller's risk measurement: gauges per spot group and input, the ages of Azure's data,
refresh failures by reason, and one log line with the reasons when a level changes."""

from __future__ import annotations

from datetime import timedelta

import pytest
import structlog
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from rebalancer.azure.risk_data import EvictionRates, PlacementScores
from rebalancer.clock import ManualClock
from rebalancer.controller.history import History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import plan
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.metrics import RISK_ERROR_REASONS, RISK_SOURCES, ControllerMetrics
from tests.unit.test_risk import A100, T4, node, preempt

Labels = tuple[tuple[str, str], ...]


def samples(registry: CollectorRegistry) -> dict[tuple[str, Labels], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def group(pool: str, zone: str, sku: str, **more: str) -> Labels:
    return tuple(sorted({"pool": pool, "zone": zone, "sku": sku, **more}.items()))


def controller(clock: ManualClock, **settings: object) -> tuple[Controller, ControllerMetrics]:
    metrics = ControllerMetrics()
    built = Controller(
        settings=ControllerSettings(**settings),  # type: ignore[arg-type]
        client=None,  # type: ignore[arg-type]  # nothing is called before run()
        metrics=metrics,
        clock=clock,
        log=structlog.get_logger(),
        identity="test",
    )
    return built, metrics


def assessed(
    ctl: Controller, clock: ManualClock, nodes: list[NodeInfo], history: History
) -> Snapshot:
    """A snapshot as the controller builds it: the risks assessed by its assessor."""
    now = clock.now()
    risks = ctl.assessor.risks(nodes, history, now=now, monotonic=clock.monotonic())
    return Snapshot(
        now=now, nodes={n.name: n for n in nodes}, pods={}, workloads={}, replicaset_owners={},
        history=history, risks=risks,
    )  # fmt: skip


def test_risk_gauges_per_group_and_source_with_the_ages_of_azure_data() -> None:
    clock = ManualClock()
    now = clock.now()
    ctl, metrics = controller(
        clock,
        risk_resource_graph_enabled=True,
        risk_placement_score_enabled=True,
        azure_subscription_id="sub",
    )
    assert ctl.risk.eviction_rates is not None and ctl.risk.placement_scores is not None
    ctl.risk.eviction_rates.data = EvictionRates(
        {(A100.lower(), "eastus"): "5-10"}, now - timedelta(minutes=30)
    )
    ctl.risk.placement_scores.data = PlacementScores(
        {(A100.lower(), "eastus", "1"): "Low"}, now - timedelta(minutes=5)
    )
    nodes = [node("a0"), node("a1"), node("t0", pool="spott", zone="eastus-2", sku=T4)]
    snapshot = assessed(ctl, clock, nodes, History())
    with capture_logs() as logs:
        ctl.recorder.observe(snapshot, plan(snapshot, ctl.planner_settings), 1.0)
    found = samples(metrics.registry)
    risk = "rebalancer_pool_eviction_risk"
    a100 = ("spota", "eastus-1", A100)
    # Bucket 5-10 -> 0.075, Low in zone 1 -> x2; no record yet: the prior alone.
    assert found[(risk, group(*a100, source="estimate"))] == pytest.approx(0.15)
    assert found[(risk, group(*a100, source="resource_graph"))] == pytest.approx(0.075)
    assert (risk, group(*a100, source="prior")) not in found
    assert found[("rebalancer_pool_eviction_risk_level", group(*a100))] == 2  # high
    assert found[("rebalancer_spot_placement_score", group(*a100))] == 1  # Low
    # The T4 pool: no bucket, no score for it: the default prior, medium.
    t4 = ("spott", "eastus-2", T4)
    assert found[(risk, group(*t4, source="estimate"))] == pytest.approx(0.05)
    assert found[(risk, group(*t4, source="prior"))] == pytest.approx(0.05)
    assert found[("rebalancer_pool_eviction_risk_level", group(*t4))] == 1
    assert found[("rebalancer_spot_placement_score", group(*t4))] == 0
    age = "rebalancer_risk_source_age_seconds"
    assert found[(age, (("source", "resource_graph"),))] == 1800
    assert found[(age, (("source", "placement_score"),))] == 300
    said = [entry for entry in logs if entry["event"] == "eviction risk"]
    assert [(e["pool"], e["risk_level"]) for e in said] == [("spota", "high"), ("spott", "medium")]
    assert "bucket 5-10 % per hour" in said[0]["reasons"]
    assert "Low for Standard_NC24ads_A100_v4 in eastus zone 1 -> x2" in said[0]["reasons"]

    # The T4 pool emptied and its history is empty: its series go; a quiet day of records
    # brings the A100 pool's estimate down and its history series appears.
    clock.advance(3600)
    later = assessed(ctl, clock, nodes[:2], History(since=clock.now() - timedelta(hours=24)))
    with capture_logs() as logs:
        ctl.recorder.observe(later, plan(later, ctl.planner_settings), 1.0)
    found = samples(metrics.registry)
    assert (risk, group(*t4, source="estimate")) not in found
    assert ("rebalancer_pool_eviction_risk_level", group(*t4)) not in found
    assert found[(risk, group(*a100, source="history"))] == 0.0
    assert found[(risk, group(*a100, source="estimate"))] < 0.15
    assert found[(age, (("source", "resource_graph"),))] == 1800 + 3600
    assert [e["was"] for e in logs if e["event"] == "eviction risk"] == ["high"]


def test_the_history_feeds_the_risk_of_a_group_whose_nodes_are_gone() -> None:
    clock = ManualClock()
    ctl, metrics = controller(clock)
    assert ctl.risk.feeds == []  # both APIs off by default
    entries = (preempt(0, "x"), preempt(0, "y"))
    record = History(since=clock.now() - timedelta(hours=1), entries=entries)
    # The entries are relative to tests.unit.test_risk.NOW; move them to this clock.
    shift = clock.now() - entries[0].first_seen
    record = History(
        since=record.since,
        entries=tuple(
            type(e)(**{**e.__dict__, "first_seen": e.first_seen + shift}) for e in entries
        ),
    )
    snapshot = assessed(ctl, clock, [], record)
    ctl.recorder.observe(snapshot, plan(snapshot, ctl.planner_settings), 1.0)
    found = samples(metrics.registry)
    labels = group("spota", "eastus-1", A100, source="estimate")
    assert found[("rebalancer_pool_eviction_risk", labels)] > 0.05  # two Preempts in an hour


async def test_a_failed_refresh_counts_by_source_and_reason() -> None:
    clock = ManualClock()
    ctl, metrics = controller(clock, risk_resource_graph_enabled=True)
    found = samples(metrics.registry)
    for source in RISK_SOURCES:
        for reason in RISK_ERROR_REASONS:
            labels = (("reason", reason), ("source", source))
            assert found[("rebalancer_risk_refresh_errors_total", labels)] == 0
    assert ctl.risk.eviction_rates is not None
    # No Workload Identity environment here: the credential cannot be built.
    assert not await ctl.risk.eviction_rates.refresh(["eastus"], [A100])
    found = samples(metrics.registry)
    labels = (("reason", "auth"), ("source", "resource_graph"))
    assert found[("rebalancer_risk_refresh_errors_total", labels)] == 1
    await ctl.risk.close()


def test_the_reasons_are_the_clients_reasons() -> None:
    from rebalancer.azure.arm import REASONS

    assert tuple(REASONS) == RISK_ERROR_REASONS


def test_a_quiet_group_says_its_level_once_not_back_and_forth() -> None:
    """The assessor hands each assessment the last levels: a quiet pool read on the prior (the
    medium threshold) says medium, then low once its record pulls it clearly down, and nothing
    more, though a pass without a readable record reads exactly the prior again."""
    clock = ManualClock()
    ctl, metrics = controller(clock)
    nodes = [node(f"a{i}") for i in range(4)]
    started = clock.now()
    said: list[tuple[str, str]] = []
    for minutes, readable in [(0, False), (1, True), (60, True), (61, False), (62, True)]:
        clock.advance(minutes * 60 - (clock.now() - started).total_seconds())
        record = History(since=started) if readable else History()
        snapshot = assessed(ctl, clock, nodes, record)
        with capture_logs() as logs:
            ctl.recorder.observe(snapshot, plan(snapshot, ctl.planner_settings), 1.0)
        said += [(e["was"], e["risk_level"]) for e in logs if e["event"] == "eviction risk"]
    assert said == [("", "medium"), ("medium", "low")]
    level = samples(metrics.registry)[
        ("rebalancer_pool_eviction_risk_level", group("spota", "eastus-1", A100))
    ]
    assert level == 0

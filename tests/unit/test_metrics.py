"""Label values known in advance exist at zero from the start, so rate() sees their first event."""

from __future__ import annotations

import structlog
from prometheus_client import CollectorRegistry

from rebalancer.clock import ManualClock
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.metrics import AgentMetrics, ControllerMetrics


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def test_agent_series_exist_at_zero_before_any_event() -> None:
    found = samples(AgentMetrics().registry)
    for key in [
        ("rebalancer_agent_notice_lead_time_seconds_count", (("event_type", "Preempt"),)),
        ("rebalancer_agent_errors_total", (("kind", "imds"),)),
        (
            "rebalancer_agent_acknowledgements_total",
            (("event_type", "Preempt"), ("outcome", "error")),
        ),
        ("rebalancer_agent_node_writes_total", (("outcome", "error"),)),
        ("rebalancer_agent_imds_polls_total", (("outcome", "timeout"),)),
    ]:
        assert found[key] == 0, key


def test_controller_series_exist_at_zero_before_any_notice() -> None:
    metrics = ControllerMetrics()
    Controller(
        settings=ControllerSettings(),
        client=None,  # type: ignore[arg-type]  # nothing is called before run()
        metrics=metrics,
        clock=ManualClock(),
        log=structlog.get_logger(),
        identity="test",
    )
    found = samples(metrics.registry)
    for key in [
        ("rebalancer_controller_pods_total", (("action", "eviction_blocked"),)),
        ("rebalancer_controller_notice_lead_time_seconds_count", (("event_type", "Preempt"),)),
        (
            "rebalancer_controller_failovers_total",
            (("reason", "NoCompatibleOnDemandPool"), ("stage", "blocked")),
        ),
        ("rebalancer_controller_failovers_total", (("reason", "Notice"), ("stage", "started"))),
        ("rebalancer_controller_actions_total", (("action", "Cordon"), ("outcome", "error"))),
        ("rebalancer_controller_reconcile_errors_total", (("kind", "conflict"),)),
    ]:
        assert found[key] == 0, key
    # Dry-run outcomes only in a dry run.
    assert not [k for k in found if ("outcome", "dry_run") in k[1]]

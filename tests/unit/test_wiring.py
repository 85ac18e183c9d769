"""The reconciler runs the loop with the parts it is given (wiring.py builds them)."""

from __future__ import annotations

import structlog

from rebalancer.clock import ManualClock
from rebalancer.controller import wiring
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.metrics import ControllerMetrics


def test_the_loop_takes_its_parts_from_wire_built_on_its_own_access() -> None:
    given: list[wiring.Parts] = []

    def wire(loop: wiring.Loop) -> wiring.Parts:
        # Built on the loop's own access to the cluster: the gate, the Lease, the writer.
        assert loop.gate is not None and loop.elector is not None and loop.writer is not None
        parts = wiring.wire(loop)
        given.append(parts)
        return parts

    controller = Controller(
        settings=ControllerSettings(),
        client=None,  # type: ignore[arg-type]  # nothing is called before run()
        metrics=ControllerMetrics(),
        clock=ManualClock(),
        log=structlog.get_logger(),
        identity="test",
        wire=wire,
    )
    (parts,) = given
    assert controller.prices is parts.prices and controller.doctor is parts.doctor
    assert controller.webhook is parts.placement.webhook and controller.notifier is None
    # The snapshot's prices are the given book's table.
    assert controller.snapshot().prices is parts.prices.table


def test_by_default_the_process_wiring_is_used() -> None:
    controller = Controller(
        settings=ControllerSettings(risk_resource_graph_enabled=True),
        client=None,  # type: ignore[arg-type]
        metrics=ControllerMetrics(),
        clock=ManualClock(),
        log=structlog.get_logger(),
        identity="test",
    )
    assert controller.risk.eviction_rates is not None and controller.risk.placement_scores is None
    assert controller.risk.feeds == [controller.risk.eviction_rates]

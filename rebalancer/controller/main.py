"""`rebalancer controller`: settings, logging, metrics, probes, leader election, the loop."""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import Any

from rebalancer import __version__
from rebalancer.clock import Clock, SystemClock
from rebalancer.controller import wiring
from rebalancer.controller.owner_lookup import OwnerLookup
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.http import serving
from rebalancer.kube.client import KubeClient
from rebalancer.logging import get_logger, setup_logging
from rebalancer.metrics import ControllerMetrics
from rebalancer.process import run_until_signalled

CONTROLLER_SHUTDOWN_SECONDS = 12.0


def run_controller(settings: ControllerSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    identity = settings.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    log = get_logger(component="controller", identity=identity)

    async def main(stop: asyncio.Event) -> None:
        await serve_controller(settings, stop, identity=identity, clock=SystemClock(), log=log)

    # The last pass's writes, then the Lease's release and the queued Events: well inside the
    # chart's 30 s grace, and more than the agent's 5 s (a busy node answers slowly).
    return run_until_signalled(main, shutdown_seconds=CONTROLLER_SHUTDOWN_SECONDS)


async def serve_controller(
    settings: ControllerSettings,
    stop: asyncio.Event,
    *,
    identity: str,
    clock: Clock,
    log: Any,
    metrics: ControllerMetrics | None = None,
) -> None:
    """The controller with its probes and metrics served, until `stop`: the process's whole
    wiring, which the tests' virtual-time rig runs in-process on its own clock."""
    metrics = metrics or ControllerMetrics()
    client = await KubeClient.connect(
        settings.kubeconfig,
        timeout_seconds=settings.kube_timeout_seconds,
        user_agent=f"spot-rebalancer/{__version__} (controller; {identity})",
    )
    controller = Controller(
        settings=settings,
        client=client,
        metrics=metrics,
        clock=clock,
        log=log,
        identity=identity,
        wire=wiring.wire,  # the parts around the loop: prices, risk feeds, doctor, webhook
    )
    controller.webhook.lookup = owner_lookup(controller, clock)
    try:
        async with serving(
            registry=metrics.registry,
            liveness=controller.liveness,
            readiness=controller.readiness,
            host=settings.http_host,
            port=settings.http_port,
            log=log.bind(dry_run=settings.dry_run),
        ):
            await controller.run(stop)
    finally:
        await client.close()


def owner_lookup(controller: Controller, clock: Clock) -> OwnerLookup:
    """The webhook's lookup of workloads its view lacks: the live caches first (the watch has a
    new Deployment before the next pass), then a list of its name through the controller's
    request budget."""
    caches = {"Deployment": controller.deployments, "StatefulSet": controller.statefulsets}
    metrics = controller.metrics
    return OwnerLookup(
        controller.gate,
        live=lambda key: caches[key[0]].items.get((key[1], key[2])),
        monotonic=clock.monotonic,
        on_result=lambda result: metrics.webhook_owner_lookups.labels(result).inc(),
    )

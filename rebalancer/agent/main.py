"""`rebalancer agent`: wire settings, logging, metrics, the HTTP probes and the loop together."""

from __future__ import annotations

import asyncio
from typing import Any

from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.clock import Clock, SystemClock
from rebalancer.config import IMDS_MIN_INTERVAL_SECONDS, AgentSettings
from rebalancer.http import serving
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.logging import get_logger, setup_logging
from rebalancer.metrics import AgentMetrics
from rebalancer.process import run_until_signalled


def run_agent(settings: AgentSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    log = get_logger(component="agent")
    if not settings.node_name:
        log.error("invalid setting node_name (NODE_NAME / --node-name): not set")
        return 2

    async def main(stop: asyncio.Event) -> None:
        await serve_agent(settings, stop, clock=SystemClock(), log=log)

    return run_until_signalled(main)


async def serve_agent(
    settings: AgentSettings,
    stop: asyncio.Event,
    *,
    clock: Clock,
    log: Any,
    metrics: AgentMetrics | None = None,
) -> None:
    """The agent with its probes and metrics served, until `stop`: the process's whole wiring,
    which the tests' virtual-time rig runs in-process on its own clock."""
    metrics = metrics or AgentMetrics()
    kube = await KubeClient.connect(
        settings.kubeconfig, timeout_seconds=settings.kube_timeout_seconds
    )
    imds = ImdsClient(
        base_url=settings.imds_url,
        api_version=settings.imds_api_version,
        timeout_seconds=settings.imds_timeout_seconds,
        first_call_timeout_seconds=settings.imds_first_call_timeout_seconds,
        max_body_bytes=settings.imds_max_body_bytes,
        min_interval_seconds=IMDS_MIN_INTERVAL_SECONDS,
        clock=clock,
    )
    agent = Agent(
        settings=settings,
        imds=imds,
        nodes=NodeApi(kube),
        metrics=metrics,
        clock=clock,
        log=log,
    )
    try:
        async with serving(
            registry=metrics.registry,
            liveness=agent.liveness,
            readiness=agent.readiness,
            host=settings.http_host,
            port=settings.http_port,
            log=log.bind(node=settings.node_name),
        ):
            await agent.run(stop)
    finally:
        await imds.close()
        await kube.close()

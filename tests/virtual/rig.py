"""The emulated AKS cluster with the product's own agent and controller, in one event loop on
virtual time (looptime): minutes of cluster time pass in a second or two of wall time, and every
step happens at the instant the rules put it, on a loaded machine too.

The agents and controllers run the processes' own wiring (`serve_agent`, `serve_controller`:
clients, probes, metrics) as tasks on the rig's clock instead of subprocesses. The API server
(the emulator), IMDS and the placement webhook are still real HTTP on 127.0.0.1, so every request
is real Kubernetes JSON on the wire. What only processes prove (the command line, signals, a
stopped process fenced, a watch over a dropped connection) stays in tests/e2e.

`VirtualRig` answers what `tests.e2e.rig.Rig` does, with time from the event loop: a scenario
reads the same on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, generate_latest

from rebalancer.agent.main import serve_agent
from rebalancer.config import AgentSettings
from rebalancer.controller.main import serve_controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.logging import plain_values
from rebalancer.metrics import AgentMetrics, ControllerMetrics
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.e2e.rig import Rig, scenario
from tests.helpers import free_port
from tests.loop.rig import CLOCK

# How long a stopped component may take to finish (the controller's own bound is 12 s).
STOP_SECONDS = 20.0
TICK = 0.05  # the emulator's loops run every TICK seconds of the clock
SAMPLE = 0.02  # `sampling` reads the Ready count this often (tests/e2e/rig.py)
POLL = float(AgentSettings.model_fields["poll_interval_seconds"].default)  # the agent's IMDS poll
# What the components add, per doomed replica, to what the notice, load and provisioning make
# unavoidable: a notice is seen up to one poll late (the agent's; scenarios that signal through
# AKS's node-problem-detector run it every POLL seconds too), the emulator acts on a write at
# its next tick, and the rig samples the Ready count every SAMPLE seconds. On virtual time
# nothing else is added: a lost replica loaded again would show as a whole load.
REACTION = POLL + TICK + SAMPLE


@dataclass
class Component:
    task: asyncio.Task[None]
    stop: asyncio.Event
    registry: CollectorRegistry


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ while settings are read from it, as a process would see them."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class VirtualRig(Rig):
    components: dict[str, Component] = field(default_factory=dict)
    stopping: list[Component] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (component, JSON log line)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def wall(self) -> float:
        return self.cluster.clock.now().timestamp()

    def running_names(self) -> list[str]:
        return list(self.components)

    def check_running(self) -> None:
        for name, component in self.components.items():
            if component.task.done():
                error = None if component.task.cancelled() else component.task.exception()
                raise AssertionError(f"{name} ended ({error!r}):\n{self.log(name)[-3000:]}")

    def spawn(self, name: str, args: list[str], **env: str) -> Any:
        """Start the component `args[0]` ("agent" or "controller") as a task, its settings read
        from the environment a process of the rig would get."""
        port = free_port()
        self.ports[name] = port
        values = {
            **self.process_env(args[0]),
            "REBALANCER_HTTP_HOST": "127.0.0.1",
            "REBALANCER_HTTP_PORT": str(port),
            **env,
        }
        stop = asyncio.Event()
        log = structlog.get_logger().bind(rig=name)
        with environment(values):
            if args[0] == "agent":
                agent_settings = AgentSettings()
                agent_metrics = AgentMetrics()
                registry = agent_metrics.registry
                run = serve_agent(agent_settings, stop, clock=CLOCK, log=log, metrics=agent_metrics)
            else:
                settings = ControllerSettings()
                metrics = ControllerMetrics()
                registry = metrics.registry
                identity = settings.identity or name
                run = serve_controller(
                    settings, stop, identity=identity, clock=CLOCK, log=log, metrics=metrics
                )
        task = asyncio.create_task(run, name=name)
        self.components[name] = Component(task, stop, registry)
        return task

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        """What SIGTERM does to the process: its stop is set, it finishes on its own."""
        component = self.components.pop(name)
        component.stop.set()
        self.stopping.append(component)

    def stop_all(self) -> None:
        for name in list(self.components):
            self.stop(name)

    async def finished(self) -> None:
        """Every stopped component has finished; an error it ended with is raised here."""
        pending, self.stopping = self.stopping, []
        for component in pending:
            await asyncio.wait_for(component.task, STOP_SECONDS)

    def log(self, name: str) -> str:
        return "\n".join(line for who, line in self.lines if who == name)

    async def metrics(self, name: str) -> str:
        return generate_latest(self.components[name].registry).decode()

    def capture(
        self, _logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> Mapping[str, Any]:
        """structlog processor: each component's log lines kept, as the process would print
        them (JSON), under its name."""
        who = str(event.pop("rig", ""))
        self.lines.append((who, json.dumps(event, default=str)))
        raise structlog.DropEvent


@contextlib.contextmanager
def captured_logs(rig: VirtualRig) -> Iterator[None]:
    saved = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            plain_values,
            rig.capture,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    )
    try:
        yield
    finally:
        structlog.configure(**saved)


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    data: dict[str, Any] | None = None,
    *,
    prepare: Callable[[ClusterEmulator], None] | None = None,
) -> AsyncIterator[VirtualRig]:
    """The emulator on the event loop's virtual clock, served on 127.0.0.1; a rig to start the
    product's components on it. Use in a test marked `looptime`."""
    cluster = ClusterEmulator(parse_scenario(data or scenario()), clock=CLOCK, tick_seconds=TICK)
    cluster.imds.rate_clock = CLOCK.monotonic  # the agents poll on this clock
    if prepare is not None:
        prepare(cluster)
    await cluster.start(kubeconfig_dir=tmp_path)
    rig = VirtualRig(workdir=tmp_path, cluster=cluster)
    with captured_logs(rig):
        try:
            yield rig
        finally:
            rig.stop_all()
            try:
                await rig.finished()
            finally:
                await cluster.stop()

"""The loop tier's cluster: the emulator (rebalancer_sim), served on 127.0.0.1 in the test's
event loop on virtual time (looptime), with the real controller (`Controller`, as the process
builds it) talking to it through the real `KubeClient`.

The emulator's own controllers (ReplicaSet, scheduler, kubelets with their load time, the
autoscaler, Azure's evictions) run on the same clock, or are off (`loops=False`) where a test
plays the cluster step by step by writing to the store as those controllers would. Every
request the API server answers is in `tap` (tests/tap.py), in order, with the virtual moment
and the status; the tap also injects the faults a real server gives (409 storms, 5xx bursts,
PDB refusals).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from rebalancer import __version__
from rebalancer.controller.reconciler import Controller
from rebalancer.kube.client import KubeClient
from rebalancer.metrics import ControllerMetrics
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.scenario import parse_scenario
from tests.loop.rig import CLOCK, NAMESPACE, START, settings
from tests.tap import Tap

TICK = 0.05  # the emulator's loops run every TICK seconds of the clock


class ClusterClock:
    """The emulator's clock: the loop's, `offset` ahead of the controller's until `catch_up`
    (a cluster built `offset` ago, its nodes that old, then run up to now)."""

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self.offset = offset

    def now(self) -> Any:
        return CLOCK.now() + self.offset

    def monotonic(self) -> float:
        return CLOCK.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def catch_up(self) -> None:
        self.offset = timedelta(0)


@dataclass
class Emulated:
    cluster: ClusterEmulator
    tap: Tap

    @property
    def store(self) -> Any:
        return self.cluster.store

    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(resource, namespace, name)
        assert obj is not None, f"no {resource.plural} {namespace}/{name}"
        return obj  # type: ignore[no-any-return]

    def edit(
        self, resource: ResourceType, namespace: str, name: str, change: Callable[[Any], None]
    ) -> None:
        """Change an object as a cluster component would (not through the API: not tapped)."""
        obj = copy.deepcopy(self.get(resource, namespace, name))
        change(obj)
        self.store.update(resource, obj)

    def replicas(self, namespace: str = "ml", name: str = "llm") -> int:
        return int(self.get(R.DEPLOYMENTS, namespace, name)["spec"]["replicas"])

    def annotations(self, resource: ResourceType, namespace: str, name: str) -> dict[str, str]:
        return dict(self.get(resource, namespace, name)["metadata"].get("annotations") or {})

    def pods(self, namespace: str = "ml") -> list[dict[str, Any]]:
        """The pods of a namespace that are not being deleted."""
        return [
            p
            for p in self.store.items(R.PODS, namespace)
            if p["metadata"].get("deletionTimestamp") is None
        ]

    def ready_pods(self, namespace: str = "ml") -> list[dict[str, Any]]:
        return [p for p in self.pods(namespace) if ready(p)]

    def node(self, name: str) -> dict[str, Any] | None:
        return self.store.get(R.NODES, "", name)  # type: ignore[no-any-return]

    def leading(self, identity: str) -> bool:
        lease = self.store.get(R.LEASES, NAMESPACE, "ctl")
        return bool(lease and (lease.get("spec") or {}).get("holderIdentity") == identity)


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@contextlib.asynccontextmanager
async def emulated(
    data: dict[str, Any],
    *,
    loops: bool = True,
    aged: timedelta = timedelta(0),
    prepare: Callable[[ClusterEmulator], None] | None = None,
) -> AsyncIterator[Emulated]:
    """The scenario `data` (tests/e2e/rig.py's format) emulated and served. `aged`: the cluster
    was built that long before the test's start (its nodes are that old, its workloads have
    been serving); `prepare` changes it before it serves."""
    clock = ClusterClock(offset=-aged)
    assert CLOCK.now() - START < timedelta(seconds=1), "build the cluster before anything runs"
    cluster = ClusterEmulator(parse_scenario(data), clock=clock, tick_seconds=TICK)
    cluster.imds.rate_clock = CLOCK.monotonic
    if cluster.store.get(R.NAMESPACES, "", NAMESPACE) is None:
        cluster.store.create(R.NAMESPACES, {"metadata": {"name": NAMESPACE}})
    if prepare is not None:
        prepare(cluster)
    clock.catch_up()
    tap = Tap().install(cluster)
    await cluster.start(run_loops=loops)
    try:
        yield Emulated(cluster, tap)
    finally:
        await cluster.stop()


@contextlib.asynccontextmanager
async def controlling(
    em: Emulated, identity: str = "ctl-a", **overrides: Any
) -> AsyncIterator[Controller]:
    """The real controller, as `rebalancer controller` builds it, on the emulator."""
    client = await KubeClient.connect(
        str(em.cluster.kubeconfig_path),
        user_agent=f"spot-rebalancer/{__version__} (controller; {identity})",
    )
    controller = Controller(
        settings=settings(identity, **overrides),
        client=client,
        metrics=ControllerMetrics(),
        clock=CLOCK,
        log=structlog.get_logger().bind(identity=identity),
        identity=identity,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    try:
        yield controller
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=30)
        finally:
            await client.close()

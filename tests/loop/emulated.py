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
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from rebalancer import __version__
from rebalancer.controller.main import owner_lookup
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.kube.client import KubeClient
from rebalancer.metrics import ControllerMetrics
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.scenario import parse_scenario
from tests.tap import Request, Tap

TICK = 0.25  # the emulator's loops run every TICK seconds of the clock (the old loop world's step)
START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "spot-rebalancer"


class LoopClock:
    """Wall and monotonic time from the event loop's (virtual) clock."""

    def now(self) -> datetime:
        return START + timedelta(seconds=asyncio.get_running_loop().time())

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


CLOCK = LoopClock()


def settings(identity: str, **overrides: Any) -> ControllerSettings:
    values: dict[str, Any] = {
        "namespace": NAMESPACE,
        "lease_name": "ctl",
        "identity": identity,
        "resync_seconds": 1.0,
        "cooldown_seconds": 600.0,
        "return_quiet_seconds": 120.0,
        "cost_interval_seconds": 10.0,
        **overrides,
    }
    return ControllerSettings(**values)


def resource(plural: str | ResourceType) -> ResourceType:
    """A resource type by its plural ("pods", "poddisruptionbudgets", ...)."""
    if not isinstance(plural, str):
        return plural
    preferred = (R.NODES, R.PODS, R.DEPLOYMENTS, R.REPLICASETS, R.HPAS, R.PDBS, R.LEASES)
    for kind in (*preferred, *R.ALL):
        if kind.plural == plural:
            return kind
    raise KeyError(plural)


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

    def find(self, kind: str | ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get(resource(kind), namespace, name)  # type: ignore[no-any-return]

    def get(self, kind: str | ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.find(kind, namespace, name)
        assert obj is not None, f"no {kind} {namespace}/{name}"
        return obj

    def put(self, kind: str | ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as a cluster component would (not through the API: not tapped). An
        owner reference written by name gets its owner's uid (a made-up one if there is no
        such owner), as every reference the API server stores has one."""
        return put(self.store, kind, obj)

    def edit(
        self, kind: str | ResourceType, namespace: str, name: str, change: Callable[[Any], None]
    ) -> None:
        """Change an object as a cluster component would (not through the API: not tapped)."""
        obj = copy.deepcopy(self.get(kind, namespace, name))
        change(obj)
        self.store.update(resource(kind), obj)

    def remove(self, kind: str | ResourceType, namespace: str, name: str) -> None:
        """Gone at once (no grace), as the pod GC or a node's end removes it."""
        self.store.force_remove(resource(kind), namespace, name)

    def written(
        self, method: str = "", resource: str = "", *, ok: bool = True, who: str = ""
    ) -> list[Request]:
        """The controllers' writes the API server answered, in order (see `Tap.written`)."""
        return self.tap.written(method, resource, ok=ok, who=who)

    def replicas(self, namespace: str = "ml", name: str = "llm") -> int:
        return int(self.get(R.DEPLOYMENTS, namespace, name)["spec"]["replicas"])

    def annotations(self, kind: str | ResourceType, namespace: str, name: str) -> dict[str, str]:
        return dict(self.get(kind, namespace, name)["metadata"].get("annotations") or {})

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


def put(store: Any, kind: str | ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    namespace = obj["metadata"].get("namespace", "")
    for ref in obj["metadata"].get("ownerReferences") or []:
        if not ref.get("uid"):
            owner = store.get(resource(ref["kind"].lower() + "s"), namespace, ref["name"])
            ref["uid"] = owner["metadata"]["uid"] if owner else f"uid-{ref['name']}"
            ref.setdefault("apiVersion", "apps/v1")
    return store.create(resource(kind), obj)  # type: ignore[no-any-return]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@contextlib.asynccontextmanager
async def emulated(
    data: dict[str, Any] | None,
    *,
    controllers: set[str] | None = None,
    aged: timedelta = timedelta(0),
    prepare: Callable[[ClusterEmulator], None] | None = None,
) -> AsyncIterator[Emulated]:
    """The scenario `data` (tests/e2e/rig.py's format; None: an empty cluster) emulated and
    served; `controllers`: the emulator's control loops that run (None: all). `aged`: the
    cluster was built that long before the test's start (its nodes are that old, its workloads
    have been serving); `prepare` builds or changes it before it serves."""
    clock = ClusterClock(offset=-aged)
    assert CLOCK.now() - START < timedelta(seconds=1), "build the cluster before anything runs"
    cluster = ClusterEmulator(
        parse_scenario(data) if data is not None else None,
        clock=clock,
        tick_seconds=TICK,
        controllers=controllers,
    )
    cluster.imds.rate_clock = CLOCK.monotonic
    if cluster.store.get(R.NAMESPACES, "", NAMESPACE) is None:
        cluster.store.create(R.NAMESPACES, {"metadata": {"name": NAMESPACE}})
    if prepare is not None:
        prepare(cluster)
    clock.catch_up()
    tap = Tap().install(cluster)
    await cluster.start()
    try:
        yield Emulated(cluster, tap)
    finally:
        await cluster.stop()


@contextlib.asynccontextmanager
async def controlling(
    em: Emulated,
    identity: str = "ctl-a",
    *,
    wrap: Callable[[KubeClient], Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[Controller]:
    """The real controller, as `rebalancer controller` builds it, on the emulator; `wrap`: what
    stands between it and its client (a test's stand-in for a bug of ours)."""
    client = await connect(em, identity)
    controller = Controller(
        settings=settings(identity, **overrides),
        client=client if wrap is None else wrap(client),
        metrics=ControllerMetrics(),
        clock=CLOCK,
        log=structlog.get_logger().bind(identity=identity),
        identity=identity,
    )
    controller.webhook.lookup = owner_lookup(controller, CLOCK)  # as serve_controller wires it
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


async def connect(em: Emulated, identity: str) -> KubeClient:
    """A client of the emulator, named `identity` in its User-Agent (the tap's `who`)."""
    return await KubeClient.connect(
        str(em.cluster.kubeconfig_path),
        user_agent=f"spot-rebalancer/{__version__} (controller; {identity})",
    )

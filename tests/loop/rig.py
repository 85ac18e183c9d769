"""A small AKS GPU cluster in the fake API, and the whole controller running against it.

The controller is the real one (informers, leader election, planner, executor, recorder); only
our `KubeClient` is replaced (tests/fakes/api.py) and time is the event loop's, virtual (looptime):
a minute of model loading passes in milliseconds. The test plays the ReplicaSet, the scheduler
and Azure, one step at a time, and reads the writes the controller made, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from rebalancer import names
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.metrics import ControllerMetrics
from rebalancer.timefmt import iso
from tests.fakes.api import FakeApi

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "spot-rebalancer"
EVENT = "A123BC45-1234-5678-AB90-ABCDEF123456"
SPOT_TAINTS = [
    {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
]
TOLERATIONS = [
    {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
     "effect": "NoSchedule"},
]  # fmt: skip


class LoopClock:
    """Wall and monotonic time from the event loop's (virtual) clock."""

    def now(self) -> datetime:
        return START + timedelta(seconds=asyncio.get_running_loop().time())

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


CLOCK = LoopClock()


def node(name: str, pool: str, *, spot: bool) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                names.AKS_AGENTPOOL_LABEL: pool,
                names.AKS_SPOT_LABEL: "spot" if spot else "regular",
                names.INSTANCE_TYPE_LABEL: "Standard_NC24ads_A100_v4",
                names.ZONE_LABEL: "eastus-1",
                names.REGION_LABEL: "eastus",
            },
            "annotations": {},
        },
        "spec": {"taints": list(SPOT_TAINTS) if spot else []},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {names.GPU_RESOURCE: "1"},
        },
    }


def pod(name: str, node_name: str, *, ready: bool = True, owner: str = "llm-rs") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "annotations": {},
            "labels": {"app": "llm"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": True}],
        },
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "resources": {"limits": {names.GPU_RESOURCE: "1"}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def cluster() -> FakeApi:
    """Three spot GPU nodes and two on-demand ones; `llm` has replicas on spot-0, spot-1, od-0."""
    api = FakeApi()
    api.put_object("nodes", node("spot-0", "gpuspot", spot=True))
    api.put_object("nodes", node("spot-1", "gpuspot", spot=True))
    api.put_object("nodes", node("spot-2", "gpuspot", spot=True))
    api.put_object("nodes", node("od-0", "gpuondemand", spot=False))
    api.put_object("nodes", node("od-1", "gpuondemand", spot=False))
    api.put_object(
        "deployments",
        {
            "metadata": {"namespace": "ml", "name": "llm", "annotations": {}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "llm"}},
                "template": {
                    "spec": {
                        "tolerations": TOLERATIONS,
                        "containers": [
                            {"name": "c", "resources": {"limits": {names.GPU_RESOURCE: "1"}}}
                        ],
                    }
                },
            },
            "status": {"readyReplicas": 3},
        },
    )
    api.put_object(
        "replicasets",
        {
            "metadata": {
                "namespace": "ml",
                "name": "llm-rs",
                "ownerReferences": [{"kind": "Deployment", "name": "llm", "controller": True}],
            }
        },
    )
    for name, where in (("llm-a", "spot-0"), ("llm-b", "spot-1"), ("llm-c", "od-0")):
        api.put_object("pods", pod(name, where))
    return api


def preempt(api: FakeApi, node_name: str, *, seconds: float, event_id: str = EVENT) -> datetime:
    """Azure schedules a Preempt; the agent publishes it on the Node. Returns its NotBefore."""
    not_before = CLOCK.now() + timedelta(seconds=seconds)
    message = (
        f"EventType=Preempt EventId={event_id} EventStatus=Scheduled "
        f"NotBefore={iso(not_before)} Pending=1"
    )

    def publish(obj: dict[str, Any]) -> None:
        conditions = [c for c in obj["status"]["conditions"] if c["type"] != names.CONDITION_TYPE]
        conditions.append(
            {
                "type": names.CONDITION_TYPE,
                "status": "True",
                "reason": "EventScheduled",
                "message": message,
                "lastTransitionTime": iso(CLOCK.now()),
            }
        )
        obj["status"]["conditions"] = conditions

    api.edit("nodes", "", node_name, publish)
    return not_before


def cancel(api: FakeApi, node_name: str, event_id: str = EVENT) -> None:
    def withdraw(obj: dict[str, Any]) -> None:
        for condition in obj["status"]["conditions"]:
            if condition["type"] == names.CONDITION_TYPE:
                condition.update(
                    status="False",
                    reason="EventCancelled",
                    message=f"EventType=Preempt EventId={event_id} Outcome=cancelled",
                )

    api.edit("nodes", "", node_name, withdraw)


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


@contextlib.asynccontextmanager
async def running(api: Any, identity: str = "ctl-a", **overrides: Any) -> AsyncIterator[Controller]:
    """The real controller against `api` (the fake API, or one process's `Killable` view)."""
    controller = Controller(
        settings=settings(identity, **overrides),
        client=api,
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
        await asyncio.wait_for(task, timeout=30)


async def until(condition: Callable[[], Any], *, within: float, what: str) -> None:
    """Wait (virtual seconds) until `condition()` holds; fail with `what` if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.05)


def replicas(api: FakeApi) -> int:
    return int(api.get("deployments", "ml", "llm")["spec"]["replicas"])


def annotations(api: FakeApi, resource: str, namespace: str, name: str) -> dict[str, str]:
    return dict(api.get(resource, namespace, name)["metadata"].get("annotations") or {})


def replicaset_scales(api: FakeApi, *, new_pod: str, on: str) -> None:
    """The ReplicaSet after a surge: one new pod, scheduled, loading (not Ready)."""
    api.put_object("pods", pod(new_pod, on, ready=False))


def becomes_ready(api: FakeApi, name: str) -> None:
    def ready(obj: dict[str, Any]) -> None:
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]

    api.edit("pods", "ml", name, ready)


def replicaset_scales_down(api: FakeApi) -> str:
    """The ReplicaSet after a scale-back: the pod with the lowest deletion cost goes."""
    pods = [obj for (res, ns, _), obj in api.objects.items() if res == "pods" and ns == "ml"]
    victim = min(
        pods,
        key=lambda p: int((p["metadata"].get("annotations") or {}).get(names.DELETION_COST, "0")),
    )
    api.remove("pods", "ml", victim["metadata"]["name"])
    return str(victim["metadata"]["name"])


def azure_takes(api: FakeApi, node_name: str) -> None:
    """The VM is gone: its Node and whatever still ran there."""
    for res, ns, name in list(api.objects):
        if res == "pods" and api.objects[(res, ns, name)]["spec"].get("nodeName") == node_name:
            api.remove(res, ns, name)
    api.remove("nodes", "", node_name)

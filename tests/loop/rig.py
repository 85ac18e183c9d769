"""A small AKS GPU cluster on the emulator, and the whole controller running against it.

The controller is the real one (informers, leader election, planner, executor, recorder, its
`KubeClient`), the cluster the emulator's store served on 127.0.0.1 (tests/loop/emulated.py),
and time is the event loop's, virtual (looptime): a minute of model loading passes in
milliseconds. Of the emulator's controllers only the kubelets (pods load for their startup
time and stop after their grace) and the disruption controller (budgets counted, evictions
refused as upstream refuses them) run: the test plays the ReplicaSet, the scheduler and Azure,
one step at a time, and reads the writes the controller made, in order, from the tap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from rebalancer import names
from rebalancer.controller.reconciler import Controller
from rebalancer.timefmt import iso
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import STARTUP_ANNOTATION
from tests.loop.emulated import (  # noqa: F401  (the loop tests' vocabulary, from one place)
    CLOCK,
    NAMESPACE,
    START,
    Emulated,
    LoopClock,
    controlling,
    emulated,
    put,
    settings,
)
from tests.tap import Request

EVENT = "A123BC45-1234-5678-AB90-ABCDEF123456"
SPOT_TAINTS = [
    {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
]
TOLERATIONS = [
    {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
     "effect": "NoSchedule"},
]  # fmt: skip


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


HAND_PLAYED = {"kubelets", "disruption"}  # the emulator's controllers that run here


def cluster(**changes: Any) -> contextlib.AbstractAsyncContextManager[Emulated]:
    """Three spot GPU nodes and two on-demand ones; `llm` has replicas on spot-0, spot-1, od-0.
    `changes` go to `emulated`."""

    def build(cluster: ClusterEmulator) -> None:
        store = cluster.store
        for namespace in ("ml", "cache", "team-b"):
            store.create(R.NAMESPACES, {"metadata": {"name": namespace}})
        for name, pool, spot in (
            ("spot-0", "gpuspot", True), ("spot-1", "gpuspot", True), ("spot-2", "gpuspot", True),
            ("od-0", "gpuondemand", False), ("od-1", "gpuondemand", False),
        ):  # fmt: skip
            store.create(R.NODES, node(name, pool, spot=spot))
        deployment = store.create(
            R.DEPLOYMENTS,
            {
                "metadata": {"namespace": "ml", "name": "llm", "annotations": {}},
                "spec": {
                    "replicas": 3,
                    "selector": {"matchLabels": {"app": "llm"}},
                    "template": {
                        "metadata": {"labels": {"app": "llm"}},
                        "spec": {
                            "tolerations": TOLERATIONS,
                            "containers": [
                                {"name": "c", "resources": {"limits": {names.GPU_RESOURCE: "1"}}}
                            ],
                        },
                    },
                },
                "status": {"replicas": 3, "readyReplicas": 3},
            },
        )
        store.create(R.REPLICASETS, replicaset("llm-rs", deployment))
        for name, where in (("llm-a", "spot-0"), ("llm-b", "spot-1"), ("llm-c", "od-0")):
            put(store, "pods", pod(name, where))

    return emulated(None, controllers=HAND_PLAYED, prepare=build, **changes)


def replicaset(name: str, deployment: dict[str, Any]) -> dict[str, Any]:
    meta = deployment["metadata"]
    return {
        "metadata": {
            "namespace": meta["namespace"],
            "name": name,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                 "uid": meta["uid"], "controller": True}
            ],
        },
        "spec": {
            "replicas": deployment["spec"]["replicas"],
            "selector": deployment["spec"]["selector"],
            "template": deployment["spec"]["template"],
        },
    }  # fmt: skip


def preempt(em: Emulated, node_name: str, *, seconds: float, event_id: str = EVENT) -> datetime:
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

    em.edit("nodes", "", node_name, publish)
    return not_before


def cancel(em: Emulated, node_name: str, event_id: str = EVENT) -> None:
    def withdraw(obj: dict[str, Any]) -> None:
        for condition in obj["status"]["conditions"]:
            if condition["type"] == names.CONDITION_TYPE:
                condition.update(
                    status="False",
                    reason="EventCancelled",
                    message=f"EventType=Preempt EventId={event_id} Outcome=cancelled",
                )

    em.edit("nodes", "", node_name, withdraw)


def running(
    em: Emulated, identity: str = "ctl-a", *, client: Any = None, **overrides: Any
) -> contextlib.AbstractAsyncContextManager[Controller]:
    """The real controller on the emulator (`client`: a wrapper around its KubeClient)."""
    return controlling(em, identity, wrap=client, **overrides)


async def until(condition: Callable[[], Any], *, within: float, what: str) -> None:
    """Wait (virtual seconds) until `condition()` holds; fail with `what` if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.05)


def replicas(em: Emulated) -> int:
    return em.replicas()


def annotations(em: Emulated, resource: str, namespace: str, name: str) -> dict[str, str]:
    return em.annotations(resource, namespace, name)


def replicaset_scales(em: Emulated, *, new_pod: str, on: str, load_seconds: float) -> None:
    """The ReplicaSet after a surge: one new pod, scheduled; it loads its model for
    `load_seconds` (the kubelet makes it Ready then)."""
    new = pod(new_pod, on, ready=False)
    new["metadata"]["annotations"][STARTUP_ANNOTATION] = f"{load_seconds:g}"
    em.put("pods", new)


def replicaset_scales_down(em: Emulated) -> str:
    """The ReplicaSet after a scale-back by one: the emulator's ReplicaSet controller, asked
    once, picks the pod by upstream's rule (`rebalancer.upstream.replicaset`: unscheduled, not
    Ready, the lowest deletion cost, ...) and deletes it, gracefully (the kubelet stops it)."""
    before = {p["metadata"]["name"] for p in em.pods("ml")}
    em.edit("replicasets", "ml", "llm-rs", lambda rs: rs["spec"].update(replicas=len(before) - 1))
    em.cluster.replicasets.sync(em.get("replicasets", "ml", "llm-rs"))
    (victim,) = before - {p["metadata"]["name"] for p in em.pods("ml")}
    return victim


def azure_takes(em: Emulated, node_name: str) -> None:
    """The VM is gone: its Node, and whatever still ran there (pod GC)."""
    for gone in em.store.pods_on_node(node_name):
        em.store.force_remove(R.PODS, gone["metadata"]["namespace"], gone["metadata"]["name"])
    em.store.force_remove(R.NODES, "", node_name)


def drained(em: Emulated, node_name: str) -> bool:
    """The controller has marked the node drained for EVENT."""
    return EVENT in annotations(em, "nodes", "", node_name).get(names.DRAINED_FOR_ANNOTATION, "")


def vm_goes_at_cordon(em: Emulated, node_name: str) -> None:
    """Azure takes the VM the moment the controller's first write to its Node is applied (a
    notice too short to drain anything)."""

    def gone_at_cordon(write: Request) -> None:
        if write.ok and write.resource == "nodes" and write.name == node_name:
            em.tap.after_write = None
            azure_takes(em, node_name)

    em.tap.after_write = gone_at_cordon

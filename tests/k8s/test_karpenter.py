"""A spot eviction and the return to spot under Karpenter (AKS node auto-provisioning's engine),
on real Karpenter.

One NodePool allows spot and on-demand GPU nodes, as NAP's do; Karpenter launches spot (cheaper)
for the Deployment. Nothing is declared to the controller: it reads the NodePool's on-demand part
from the NodePool (its taints and labels; its GPUs per node from the NodePool's spot nodes). A Preempt arrives as AKS's node-problem-detector reports it (the
`PreemptionScheduled` condition; no agent: a Karpenter node has no Azure VM here). The
controller surges; the placement webhook requires the NodePool's on-demand capacity for the
replacement, so Karpenter launches an on-demand NodeClaim for it, before the spot node goes.
The test plays Azure: at NotBefore the VM's pods go at once and its NodeClaim is deleted. Once
the pool has been quiet, the replica returns to a spot node Karpenter launches for it, and
Karpenter's consolidation removes the emptied on-demand node.

With Karpenter's `nodeRepair` on (Karpenter restarted with FEATURE_GATES=NodeRepair=true; its
build carries karpenter-provider-azure's PreemptionScheduled policy), the same Preempt measures
what the repair makes unavoidable: core v1.15's repair, and the legacy one that core v1.14 (the
Azure provider's) runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rebalancer import names
from rebalancer_sim.measure import unavoidable_deficit
from tests.controlplane import ControlPlane
from tests.e2e.rig import ready, sampling
from tests.k8s.karpenter import (
    TWO_GPU_SIZE,
    ZONES,
    Karpenter,
    nodepool,
    running_karpenter,
)
from tests.k8s.rig import KubeRig
from tests.k8s.test_failover import http_date
from tests.k8s.test_webhook import PLACEMENT_LABEL, Webhook, eventually, webhook  # noqa: F401

pytestmark = pytest.mark.k8s

NODEPOOL = "gpu"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
POLICY = {names.SPREAD: "zone"}  # a placement policy (every other field at its default)
NOTICE_SECONDS = 30
QUIET_SECONDS = 45


@pytest.fixture(scope="session")
def karpenter(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Karpenter]:
    with running_karpenter(control_plane, tmp_path_factory.mktemp("karpenter")) as running:
        yield running


@contextlib.asynccontextmanager
async def nodepools_in_use(
    rig: KubeRig, karpenter: Karpenter, pools: list[dict[str, Any]]
) -> AsyncIterator[None]:
    for pool in pools:
        await rig.api.request("POST", NODEPOOLS, pool)
    try:
        yield
    finally:
        # The workloads first (a do-not-disrupt pod would hold its node), then the NodePools:
        # Karpenter removes their NodeClaims and Nodes; the rig's reset finds only its own nodes.
        deployments = "/apis/apps/v1/namespaces/inference/deployments"
        with contextlib.suppress(Exception):
            for workload in (await rig.api.request("GET", deployments))["items"]:
                await rig.api.absent(f"{deployments}/{workload['metadata']['name']}")
        for pod in rig.pods():
            await rig.api.absent(f"/api/v1/namespaces/inference/pods/{pod['metadata']['name']}")
        for pool in pools:
            await rig.api.absent(f"{NODEPOOLS}/{pool['metadata']['name']}")
        deadline = time.monotonic() + 90
        while (await rig.api.request("GET", NODECLAIMS))["items"]:
            assert time.monotonic() < deadline, f"NodeClaims left:\n{karpenter.log()[-3000:]}"
            await asyncio.sleep(0.5)


@pytest.fixture
async def gpu_nodepool(rig: KubeRig, karpenter: Karpenter) -> AsyncIterator[dict[str, Any]]:
    pool = nodepool(NODEPOOL, capacity_types=["spot", "on-demand"], taints=[GPU_TAINT])
    async with nodepools_in_use(rig, karpenter, [pool]):
        yield pool


async def start_controller(rig: KubeRig, webhook: Webhook, **env: str) -> None:  # noqa: F811
    """The controller, its webhook serving and called by the API server."""
    rig.start_controller(**webhook.controller_env, **env)
    await rig.wait_for(
        lambda: "admission webhook serving" in rig.log("controller-0"),
        timeout=15,
        what="the webhook serving",
    )
    configuration = (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
        + webhook.configuration
    )

    async def ca_injected() -> bool:
        config = await rig.api.request("GET", configuration)
        return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

    await eventually(ca_injected, timeout=10, what="the CA in the caBundle")


def karpenter_labels(rig: KubeRig, node_name: str) -> tuple[str, str]:
    node = rig.node(node_name)
    labels = {} if node is None else node["metadata"]["labels"]
    return (
        labels.get(names.KARPENTER_NODEPOOL_LABEL, ""),
        labels.get(names.KARPENTER_CAPACITY_TYPE_LABEL, ""),
    )


async def nodeclaim_of(rig: KubeRig, node_name: str) -> dict[str, Any] | None:
    claims = (await rig.api.request("GET", NODECLAIMS))["items"]
    found = [c for c in claims if (c.get("status") or {}).get("nodeName") == node_name]
    assert len(found) <= 1, found
    return found[0] if found else None


async def evict_at(rig: KubeRig, node_name: str, not_before: float) -> None:
    """Azure's side of a spot eviction at NotBefore: the VM's pods stop at once, the VM is gone
    (Karpenter deletes a NodeClaim whose instance is gone; here the test deletes it)."""
    await asyncio.sleep(max(0.0, not_before - time.time()))
    claim = await nodeclaim_of(rig, node_name)
    if claim is None:
        # Karpenter removed the node before NotBefore: we drained it, and an empty node is
        # consolidated away. The VM is gone already; nothing is left for Azure to take.
        return
    pods = await rig.api.request(
        "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node_name}"}
    )
    for pod in pods["items"]:
        meta = pod["metadata"]
        await rig.api.absent(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
    await rig.api.absent(f"{NODECLAIMS}/{claim['metadata']['name']}")


@dataclass(frozen=True)
class Notice:
    noticed: float  # time.monotonic() at the notice
    not_before: float  # time.time() of its NotBefore
    eviction: asyncio.Task[None]  # Azure's eviction at NotBefore


async def preempt(rig: KubeRig, node_name: str) -> Notice:
    """A Preempt as AKS's node-problem-detector reports it, NOTICE_SECONDS from now, and Azure's
    eviction of the VM at its NotBefore (awaited by the rig's teardown if not by the test)."""
    not_before = time.time() + NOTICE_SECONDS
    noticed = time.monotonic()
    await rig.npd_preemption(node_name, "preempt-1", http_date(not_before))
    eviction = asyncio.create_task(evict_at(rig, node_name, not_before))
    rig.evictions.append(eviction)
    return Notice(noticed, not_before, eviction)


async def test_a_preempt_fails_over_onto_an_on_demand_nodeclaim_and_returns_to_spot(
    rig: KubeRig,
    webhook: Webhook,  # noqa: F811
    gpu_nodepool: dict[str, Any],
    karpenter: Karpenter,
) -> None:
    # The Deployment before the controller: Karpenter alone places it (no webhook answers yet,
    # and the webhook's failure policy is Ignore), on spot, the cheaper offering.
    await rig.deploy(
        replicas=2,
        startup_seconds=3,
        annotations=POLICY,
        pod_labels=PLACEMENT_LABEL,
        node_selector={names.KARPENTER_NODEPOOL_LABEL: NODEPOOL},
    )
    launched = time.monotonic()
    await rig.wait_for(lambda: rig.ready_count() == 2, timeout=60, what="2 replicas on spot")
    print(
        f"Karpenter launched 2 spot nodes and the replicas were Ready in {time.monotonic() - launched:.1f} s"
    )
    spot_nodes = sorted({p["spec"]["nodeName"] for p in rig.pods()})
    assert [karpenter_labels(rig, n) for n in spot_nodes] == [(NODEPOOL, "spot")] * 2

    await start_controller(
        rig,
        webhook,
        # No REBALANCER_POOLS: the NodePool's on-demand part, without a node until Karpenter
        # launches one, is read from the NodePool.
        REBALANCER_POOLS="[]",
        # The return to spot may start 45 s after the Preempt: after the eviction at 30 s.
        REBALANCER_RETURN_QUIET_SECONDS=str(QUIET_SECONDS),
        REBALANCER_COOLDOWN_SECONDS="2",
        REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS="40",
    )
    await rig.until_ready(replicas=2)

    doomed = spot_nodes[0]
    async with sampling(rig):
        notice = await preempt(rig, doomed)

        def replacement() -> dict[str, Any] | None:
            for pod in rig.pods():
                node_name = pod["spec"].get("nodeName")
                if node_name and karpenter_labels(rig, node_name)[1] == "on-demand":
                    return pod
            return None

        await rig.wait_for(
            lambda: (
                (pod := replacement()) is not None
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in pod["status"].get("conditions") or []
                )
            ),
            timeout=NOTICE_SECONDS,
            what="the replacement Ready on an on-demand node Karpenter launched",
        )
        replaced_in = time.monotonic() - notice.noticed
        assert time.time() < notice.not_before, "the replacement was Ready only after the eviction"
        await notice.eviction
        await rig.wait_for(lambda: rig.node(doomed) is None, timeout=60, what="the spot node gone")
        await rig.wait_for(lambda: rig.ready_count() == 2, timeout=30, what="2 Ready")
    print(f"notice to replacement Ready on a new on-demand node: {replaced_in:.1f} s")
    # Nothing declared, yet never blocked: the on-demand part came from the NodePool.
    assert rig.events("SpotRebalancerFailoverBlocked") == []

    pod = replacement()
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    # The webhook required the NodePool's on-demand capacity, which made Karpenter launch it.
    assert annotations[names.PLACED] == f"{NODEPOOL}:on-demand/"
    assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"
    claim = await nodeclaim_of(rig, pod["spec"]["nodeName"])
    assert claim is not None
    assert claim["metadata"]["labels"][names.KARPENTER_CAPACITY_TYPE_LABEL] == "on-demand"
    assert claim["metadata"]["labels"][names.KARPENTER_NODEPOOL_LABEL] == NODEPOOL
    # Make-before-break: 30 s of notice against a node launch and a 3 s load, so nothing is
    # unavoidable; the same figures as on VMSS pools (tests/e2e/test_controller.py).
    unavoidable = unavoidable_deficit(
        notice_seconds=NOTICE_SECONDS, load_seconds=3, provisioning_seconds=replaced_in - 3
    )
    assert unavoidable == 0
    assert rig.min_ready[("inference", "llm")] == 2, rig.min_ready
    assert rig.deficit[("inference", "llm")].replica_seconds == unavoidable
    assert rig.deployment()["spec"]["replicas"] == 2

    # The return to spot, once the pool has been quiet: no spot node has room (Karpenter keeps
    # none idle), so the new replica, pending, makes Karpenter launch a spot node; once it is
    # Ready the on-demand replica goes, and Karpenter removes the emptied on-demand node.
    on_demand_node = pod["spec"]["nodeName"]

    def all_on_spot() -> bool:
        nodes = [p["spec"].get("nodeName") for p in rig.pods()]
        return (
            rig.ready_count() == 2
            and len(nodes) == 2
            and all(n and karpenter_labels(rig, n) == (NODEPOOL, "spot") for n in nodes)
            and rig.deployment()["spec"]["replicas"] == 2
        )

    async with sampling(rig):
        returned = time.monotonic()
        await rig.wait_for(all_on_spot, timeout=QUIET_SECONDS + 40, what="the return to spot")
        returned_in = time.monotonic() - returned
        await rig.wait_for(
            lambda: rig.node(on_demand_node) is None,
            timeout=60,
            what="Karpenter removing the emptied on-demand node",
        )
    print(f"return to spot done {returned_in:.1f} s after the fail-over's checks")
    assert len(rig.events("SpotRebalancerReturnStarted")) == 1
    new_spot = {p["spec"]["nodeName"] for p in rig.pods()} - set(spot_nodes)
    assert len(new_spot) == 1, "the returned replica is not on a node Karpenter launched for it"
    assert rig.min_ready[("inference", "llm")] == 2, "a Ready replica was lost on the way back"


# ---- consolidation leaves the spares alone ------------------------------------------------------


def pack_nodepool(name: str) -> dict[str, Any]:
    """Spot nodes of two GPUs in one zone, consolidated a second after their last pod change:
    two half-used nodes are one too many, whatever the webhook prefers for their pods."""
    return nodepool(
        name, capacity_types=["spot"], taints=[GPU_TAINT], size=TWO_GPU_SIZE, zones=ZONES[:1],
        consolidate_after="1s",
    )  # fmt: skip


def placed_on(rig: KubeRig, prefix: str) -> dict[str, str]:
    """The Ready pods named `prefix`-..., by name, with their nodes."""
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in rig.pods()
        if p["metadata"]["name"].startswith(f"{prefix}-") and ready(p)
    }


async def test_consolidation_leaves_the_nodes_of_a_workload_with_spares_alone(
    rig: KubeRig,
    webhook: Webhook,  # noqa: F811
    karpenter: Karpenter,
) -> None:
    # Two workloads alike, 1 replica and 1 spare each, on two half-used nodes of a NodePool of
    # their own: Karpenter could pack each pair onto one node. The control's pods set
    # do-not-disrupt themselves to a lapsed value ("1s": the webhook keeps a pod's own value,
    # and Karpenter reads it as protection for the pod's first second only), so they differ
    # from the spares' only by the webhook's "true".
    control, spares = "control", "spares"
    async with nodepools_in_use(rig, karpenter, [pack_nodepool(control), pack_nodepool(spares)]):
        await start_controller(rig, webhook, REBALANCER_POOLS="[]")
        # Ballast, one per node, so that each node keeps one GPU free for the workload.
        for pool in (control, spares):
            await rig.deploy(
                name=f"ballast-{pool}", replicas=2, startup_seconds=0.5, one_per_node=True,
                node_selector={names.KARPENTER_NODEPOOL_LABEL: pool},
            )  # fmt: skip
        await rig.wait_for(
            lambda: all(len(set(placed_on(rig, f"ballast-{p}").values())) == 2
                        for p in (control, spares)),
            timeout=60, what="the ballast on two nodes of each NodePool",
        )  # fmt: skip
        # The workloads created at their owner's 1 replica (the controller adds the spare):
        # their first pods reach the webhook before its view shows the new Deployment, which
        # it finds through the pod's owner (owner_lookup.py).
        deployments = "/apis/apps/v1/namespaces/inference/deployments"
        for pool, own in ((control, {names.KARPENTER_DO_NOT_DISRUPT: "1s"}), (spares, {})):
            await rig.deploy(
                name=f"llm-{pool}", replicas=1, startup_seconds=0.5,
                annotations={names.SPARE_REPLICAS: "1"}, pod_labels=PLACEMENT_LABEL,
                pod_annotations=own, node_selector={names.KARPENTER_NODEPOOL_LABEL: pool},
            )  # fmt: skip
        await rig.wait_for(
            lambda: all(len(set(placed_on(rig, f"llm-{p}").values())) == 2
                        for p in (control, spares)),
            timeout=60, what="the replica and its spare on two nodes, for each workload",
        )  # fmt: skip
        values: dict[str, list[str | None]] = {}
        for pod in rig.pods():
            if pod["metadata"]["name"].startswith("llm-"):
                values.setdefault(pod["metadata"]["name"].rsplit("-", 2)[0], []).append(
                    pod["metadata"]["annotations"].get(names.KARPENTER_DO_NOT_DISRUPT)
                )
        assert values == {f"llm-{control}": ["1s"] * 2, f"llm-{spares}": ["true"] * 2}
        control_nodes = set(placed_on(rig, f"llm-{control}").values())
        spares_pods = placed_on(rig, f"llm-{spares}")
        spares_nodes = set(spares_pods.values())

        for pool in (control, spares):
            await rig.api.absent(f"{deployments}/ballast-{pool}")
        emptied = time.monotonic()
        await rig.wait_for(
            lambda: any(rig.node(n) is None for n in control_nodes),
            timeout=120,
            what="Karpenter consolidating the control's two nodes into one",
        )
        consolidated_in = time.monotonic() - emptied
        print(f"the control's half-used node consolidated {consolidated_in:.1f} s after")

        async def spares_consolidatable() -> bool:
            claims = (await rig.api.request("GET", NODECLAIMS))["items"]
            eligible = {
                (c.get("status") or {}).get("nodeName")
                for c in claims
                if any(
                    k["type"] == "Consolidatable" and k["status"] == "True"
                    for k in (c.get("status") or {}).get("conditions") or []
                )
            }
            return spares_nodes <= eligible

        # Karpenter holds the spares' nodes consolidatable (their pods changed longer than
        # consolidateAfter ago), as it did the control's: only do-not-disrupt keeps them.
        await eventually(spares_consolidatable, timeout=30, what="the spares' nodes consolidatable")
        # Twice as long as the control took (and 10 s more), the spares' nodes and pods stay.
        until = emptied + 2 * consolidated_in + 10
        while time.monotonic() < until:
            assert all(rig.node(n) is not None for n in spares_nodes), "a spare's node went"
            assert placed_on(rig, f"llm-{spares}") == spares_pods, "a spare was moved"
            await asyncio.sleep(0.5)
        print(f"the spares' nodes stayed {time.monotonic() - emptied:.1f} s after")


# ---- what Karpenter's repair of PreemptionScheduled makes unavoidable -------------------------


@dataclass
class Preempted:
    """One Preempt on a spot NodeClaim node hosting a replica, in seconds after the notice."""

    replaced_in: float  # the first replica made after the notice Ready
    replaced_on: str  # the capacity type of its node
    lost_in: float | None  # the doomed replica no longer Ready (None: it served to the end)
    tainted_in: float | None  # Karpenter's karpenter.sh/disrupted taint seen on the node
    lowest_ready: int
    replica_seconds: float


async def one_preempt(
    rig: KubeRig,
    webhook: Webhook,  # noqa: F811
    *,
    load_seconds: float,
) -> Preempted:
    """2 replicas on spot NodeClaims, the controller with its webhook, then a Preempt as AKS's
    node-problem-detector reports it (30 s of notice) on one of their nodes; the test plays
    Azure at NotBefore. Returns once 2 replicas are Ready again and the node is gone."""
    await rig.deploy(
        replicas=2, startup_seconds=load_seconds, annotations=POLICY, pod_labels=PLACEMENT_LABEL,
        node_selector={names.KARPENTER_NODEPOOL_LABEL: NODEPOOL},
    )  # fmt: skip
    await rig.wait_for(lambda: rig.ready_count() == 2, timeout=60, what="2 replicas on spot")
    await start_controller(rig, webhook, REBALANCER_POOLS="[]", REBALANCER_RETURN_ENABLED="false")
    await rig.until_ready(replicas=2)
    doomed_pod = next(p for p in rig.pods() if p["spec"]["nodeName"])
    doomed, doomed_name = doomed_pod["spec"]["nodeName"], doomed_pod["metadata"]["name"]
    before = {p["metadata"]["name"] for p in rig.pods()}
    seen: dict[str, float] = {}
    replaced_on = ""

    def watch() -> bool:
        nonlocal replaced_on
        at = time.monotonic() - notice.noticed
        node = rig.node(doomed)
        taints = [] if node is None else node["spec"].get("taints") or []
        if any(t["key"] == names.KARPENTER_DISRUPTED_TAINT for t in taints):
            seen.setdefault("tainted", at)
        if not any(p["metadata"]["name"] == doomed_name and ready(p) for p in rig.pods()):
            seen.setdefault("lost", at)
        for pod in rig.pods():
            node_name = pod["spec"].get("nodeName")
            new = node_name and pod["metadata"]["name"] not in before and ready(pod)
            if new and "replaced" not in seen:
                seen["replaced"], replaced_on = at, karpenter_labels(rig, node_name)[1]
        return rig.node(doomed) is None and rig.ready_count() == 2 and "replaced" in seen

    async with sampling(rig):
        notice = await preempt(rig, doomed)
        await rig.wait_for(watch, timeout=NOTICE_SECONDS + 60, what="the replica replaced")
        await notice.eviction
    figures = Preempted(
        replaced_in=seen["replaced"], replaced_on=replaced_on, lost_in=seen.get("lost"),
        tainted_in=seen.get("tainted"),
        lowest_ready=rig.min_ready[("inference", "llm")],
        replica_seconds=rig.deficit[("inference", "llm")].replica_seconds,
    )  # fmt: skip
    print(f"one Preempt, 30 s of notice, {load_seconds:g} s loads: {figures}")
    return figures


async def test_with_karpenters_node_repair_the_hold_keeps_every_replica_until_its_replacement(
    rig: KubeRig,
    webhook: Webhook,  # noqa: F811
    gpu_nodepool: dict[str, Any],
    karpenter: Karpenter,
) -> None:
    # Karpenter core v1.15's repair is a disruption method: at its next pass (every 10 s) it
    # taints the node, pre-spins a node, deletes the NodeClaim with the NodeClaim's
    # terminationGracePeriod (30 s, the NodePool's; Azure's policy sets no bound of its own) as
    # the drain bound, and its drain evicts through the Eviction API, which the surge's hold
    # refuses until the replacement is Ready. Loads of 20 s, so that the drain comes while the
    # replacement loads. Unavoidable: nothing while provisioning and load fit in the notice's
    # 30 s (Azure's NotBefore), and in the drain's bound, which starts later still.
    load = 20.0
    with karpenter.restarted(FEATURE_GATES="NodeRepair=true"):
        figures = await one_preempt(rig, webhook, load_seconds=load)
    assert figures.tainted_in is not None, "Karpenter's repair did not act on the node"
    assert figures.replaced_on == "on-demand"  # the surge's replacement, failed over
    assert figures.tainted_in < figures.replaced_in, "the repair came after the replacement"
    unavoidable = unavoidable_deficit(
        notice_seconds=NOTICE_SECONDS,
        load_seconds=load,
        provisioning_seconds=figures.replaced_in - load,
    )
    assert unavoidable == 0
    assert figures.lowest_ready == 2
    assert figures.replica_seconds == unavoidable


async def test_with_the_legacy_node_repair_a_preempt_costs_the_replicas_load_not_more(
    rig: KubeRig,
    webhook: Webhook,  # noqa: F811
    gpu_nodepool: dict[str, Any],
    karpenter: Karpenter,
) -> None:
    # The legacy repair controller (karpenter-provider-azure runs core v1.14.0, whose repair is
    # this one) deletes the NodeClaim at once with a termination time of now: the drain then
    # deletes the pods, budgets and do-not-disrupt ignored. The notice shrinks to the repair's
    # reaction; the controller's surge still starts the replacement at the notice, so what is
    # lost is the doomed replica from its deletion until its replacement can be Ready, no more.
    # Which replacement serves depends on a race: when the repair deletes the doomed pod within
    # the surge's pass, the surge is scaled back at once (DoomedPodsGone) while the ReplicaSet
    # already made its own replacement, placed by the policy (spot, in a zone not under notice),
    # and the scale-down keeps one of the two loading ones: on-demand or spot, either serves.
    with karpenter.restarted(FEATURE_GATES="NodeRepair=true", LEGACY_NODE_REPAIR="true"):
        figures = await one_preempt(rig, webhook, load_seconds=3)
    assert figures.lost_in is not None and figures.lost_in < figures.replaced_in
    unavoidable = unavoidable_deficit(
        notice_seconds=figures.lost_in, load_seconds=3, provisioning_seconds=figures.replaced_in - 3
    )
    assert figures.lowest_ready == 1  # the doomed replica alone: the other one kept serving
    # Sampled every 20 ms: the Ready count may be read a sample late at each end.
    assert figures.replica_seconds == pytest.approx(unavoidable, abs=0.1)

"""A spot eviction and the return to spot under Karpenter, on the emulator's Karpenter stand-in
(sim/rebalancer_sim/karpenter.py) on virtual time: the story of tests/k8s/test_karpenter.py's
preempt test, which runs it on real Karpenter, in seconds of wall time.

One NodePool allows spot and on-demand GPU nodes, as NAP's do; the stand-in launches spot for
the Deployment. Nothing is declared to the controller (no REBALANCER_POOLS): it reads the
NodePool's on-demand part from the NodePool. The Preempt reaches it through AKS's
node-problem-detector (the emulator's, polling IMDS); the placement webhook requires the
NodePool's on-demand capacity for the surge's replacement, so an on-demand NodeClaim is launched
for it before the spot VM goes. Once the pool has been quiet the replica returns to a spot node
launched for it, and consolidation removes the emptied on-demand node.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from rebalancer import names
from rebalancer_sim import resources as R
from rebalancer_sim.measure import unavoidable_deficit
from tests.e2e.rig import BASE_SCENARIO, ready, sampling
from tests.helpers import free_port
from tests.virtual.rig import POLL, REACTION, VirtualRig, running

pytestmark = pytest.mark.looptime

NODEPOOL = "gpu"
NOTICE_SECONDS = 30
QUIET_SECONDS = 45
PROVISIONING_SECONDS = 2.0  # NodeClaim to Ready node (the k8s test's KWOK nodes: about 1 s)
LOAD_SECONDS = 3.0
CONSOLIDATE_AFTER = "5s"
DO_NOT_DISRUPT = names.KARPENTER_DO_NOT_DISRUPT


def karpenter_scenario() -> dict[str, Any]:
    """No GPU pool: the NodePool launches every GPU node (its taint, a 1-GPU size, two zones)."""
    data = copy.deepcopy(BASE_SCENARIO)
    data["pools"] = [data["pools"][0]]  # the system pool
    # AKS's node-problem-detector turns the Preempt into the condition the controller reads.
    data["settings"]["nodeProblemDetectorSeconds"] = POLL
    data["nodePools"] = [
        {"name": NODEPOOL, "capacityTypes": ["spot", "on-demand"], "taints": ["sku=gpu:NoSchedule"],
         "vmSize": "Standard_NC24ads_A100_v4", "cpu": 24, "memory": "220Gi", "gpus": 1,
         "zones": ["1", "2"], "consolidateAfter": CONSOLIDATE_AFTER,
         "provisioningSeconds": PROVISIONING_SECONDS},
    ]  # fmt: skip
    data["workloads"] = [
        {"name": "llm", "namespace": "inference", "replicas": 2,
         "labels": {"app": "llm", "spot-rebalancer.io/placement": "enabled"},
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": ["sku=gpu:NoSchedule"], "nodeSelector": {names.KARPENTER_NODEPOOL_LABEL: NODEPOOL},
         "startupSeconds": LOAD_SECONDS, "terminationGracePeriodSeconds": 10},
    ]  # fmt: skip
    return data


def karpenter_labels(rig: VirtualRig, node_name: str) -> tuple[str, str]:
    node = rig.node(node_name)
    labels = {} if node is None else node["metadata"]["labels"]
    return (
        labels.get(names.KARPENTER_NODEPOOL_LABEL, ""),
        labels.get(names.KARPENTER_CAPACITY_TYPE_LABEL, ""),
    )


def nodeclaim_of(rig: VirtualRig, node_name: str) -> dict[str, Any] | None:
    found = [
        c
        for c in rig.cluster.store.items(R.NODECLAIMS)
        if (c.get("status") or {}).get("nodeName") == node_name
    ]
    assert len(found) <= 1, found
    return found[0] if found else None


async def start_controller_with_webhook(rig: VirtualRig, **env: str) -> None:
    port = free_port()
    rig.register_webhook(port)  # the chart's configuration; the controller puts its CA in
    rig.start_controller(
        REBALANCER_WEBHOOK_ENABLED="true", REBALANCER_WEBHOOK_PORT=str(port), **env
    )

    def ca_injected() -> bool:
        configuration = rig.cluster.store.get(R.MUTATING_WEBHOOKS, "", "spot-rebalancer")
        assert configuration is not None
        return all(h["clientConfig"].get("caBundle") for h in configuration["webhooks"])

    await rig.wait_for(ca_injected, timeout=20, what="the controller's CA in the configuration")
    await rig.wait_for(
        lambda: "admission webhook serving" in rig.log("controller-0"),
        timeout=20,
        what="the controller's webhook listening",
    )


async def test_a_preempt_fails_over_onto_an_on_demand_nodeclaim_and_returns_to_spot(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, karpenter_scenario()) as rig:
        # The stand-in alone places the Deployment, on spot, the cheaper offering.
        await rig.wait_for(lambda: rig.ready_count() == 2, timeout=30, what="2 replicas on spot")
        spot_nodes = sorted({p["spec"]["nodeName"] for p in rig.pods()})
        assert [karpenter_labels(rig, n) for n in spot_nodes] == [(NODEPOOL, "spot")] * 2
        deployment = copy.deepcopy(rig.deployment())
        deployment["metadata"].setdefault("annotations", {})[names.SPREAD] = "zone"
        rig.cluster.store.update(R.DEPLOYMENTS, deployment)

        await start_controller_with_webhook(
            rig,
            # No pool declared: the NodePool's on-demand part, without a node until a NodeClaim
            # is launched for it, is read from the NodePool.
            REBALANCER_POOLS="[]",
            # The return to spot may start 45 s after the Preempt: after the eviction at 30 s.
            REBALANCER_RETURN_QUIET_SECONDS=str(QUIET_SECONDS),
            REBALANCER_COOLDOWN_SECONDS="2",
            REBALANCER_RETURN_PENDING_TIMEOUT_SECONDS="40",
        )
        await rig.until_ready(replicas=2)

        doomed = spot_nodes[0]

        def replacement() -> dict[str, Any] | None:
            for pod in rig.pods():
                node_name = pod["spec"].get("nodeName")
                if node_name and karpenter_labels(rig, node_name)[1] == "on-demand":
                    return pod
            return None

        async with sampling(rig):
            noticed = rig.now()
            event = rig.cluster.preempt(doomed, notice_seconds=NOTICE_SECONDS)
            not_before = event.not_before.timestamp()
            await rig.wait_for(
                lambda: (pod := replacement()) is not None and ready(pod),
                timeout=NOTICE_SECONDS,
                what="the replacement Ready on an on-demand node the stand-in launched",
            )
            replaced_in = rig.now() - noticed
            assert rig.wall() < not_before, "the replacement was Ready only after the eviction"
            await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
            await rig.wait_for(lambda: rig.ready_count() == 2, timeout=20, what="2 Ready")
        print(f"notice to replacement Ready on a new on-demand node: {replaced_in:.2f} s")
        # A NodeClaim's node and a load, plus what the components add (the detector's poll).
        assert replaced_in <= PROVISIONING_SECONDS + LOAD_SECONDS + REACTION
        # Nothing declared, yet never blocked: the on-demand part came from the NodePool.
        assert rig.events("SpotRebalancerFailoverBlocked") == []

        pod = replacement()
        assert pod is not None
        annotations = pod["metadata"]["annotations"]
        # The webhook required the NodePool's on-demand capacity, which made the stand-in
        # launch an on-demand NodeClaim even though spot was left.
        assert annotations[names.PLACED] == f"{NODEPOOL}:on-demand/"
        assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"
        on_demand_node = pod["spec"]["nodeName"]
        claim = nodeclaim_of(rig, on_demand_node)
        assert claim is not None
        assert claim["metadata"]["labels"][names.KARPENTER_CAPACITY_TYPE_LABEL] == "on-demand"
        assert claim["metadata"]["labels"][names.KARPENTER_NODEPOOL_LABEL] == NODEPOOL
        # Make-before-break: 30 s of notice against a node launch and a 3 s load, so nothing is
        # unavoidable, and nothing was lost: the figures of VMSS pools.
        unavoidable = unavoidable_deficit(
            notice_seconds=NOTICE_SECONDS,
            load_seconds=LOAD_SECONDS,
            provisioning_seconds=PROVISIONING_SECONDS,
        )
        assert unavoidable == 0
        assert rig.min_ready[("inference", "llm")] == 2, rig.min_ready
        assert rig.deficit[("inference", "llm")].replica_seconds == unavoidable
        assert rig.deployment()["spec"]["replicas"] == 2
        # The preempted VM's NodeClaim went with it.
        assert all(
            (c.get("status") or {}).get("nodeName") != doomed
            for c in rig.cluster.store.items(R.NODECLAIMS)
        )

        # The return to spot, once the pool has been quiet: no spot node has room (none is kept
        # idle), so the new replica, pending, makes the stand-in launch a spot node; once it is
        # Ready the on-demand replica goes, and consolidation removes the emptied node.
        def all_on_spot() -> bool:
            nodes = [p["spec"].get("nodeName") for p in rig.pods()]
            return (
                rig.ready_count() == 2
                and len(nodes) == 2
                and all(n and karpenter_labels(rig, n) == (NODEPOOL, "spot") for n in nodes)
                and rig.deployment()["spec"]["replicas"] == 2
            )

        # The return's new replica, while it loads, as Karpenter's consolidation would see it:
        # held (do-not-disrupt), or consolidation could delete its node mid-load.
        before = {p["metadata"]["name"] for p in rig.pods()}
        loading: dict[str, set[str | None]] = {}

        def returned() -> bool:
            for pod in rig.pods():
                name = pod["metadata"]["name"]
                if name not in before and pod["spec"].get("nodeName") and not ready(pod):
                    held = pod["metadata"].get("annotations", {}).get(DO_NOT_DISRUPT)
                    loading.setdefault(name, set()).add(held)
            return all_on_spot()

        async with sampling(rig):
            await rig.wait_for(returned, timeout=QUIET_SECONDS + 40, what="the return to spot")
            await rig.wait_for(
                lambda: rig.node(on_demand_node) is None,
                timeout=30,
                what="consolidation removing the emptied on-demand node",
            )
        assert len(rig.events("SpotRebalancerReturnStarted")) == 1
        new_spot = {p["spec"]["nodeName"] for p in rig.pods()} - set(spot_nodes)
        assert len(new_spot) == 1, "the returned replica is not on a node launched for it"
        assert rig.min_ready[("inference", "llm")] == 2, "a Ready replica was lost on the way back"
        assert on_demand_node in rig.cluster.karpenter.consolidated
        assert nodeclaim_of(rig, on_demand_node) is None
        # Held while it loaded, and given back once Ready and the return was over: an ordinary
        # replica again, whose node Karpenter may consolidate or drift.
        (returned_pod,) = [
            p["metadata"]["name"] for p in rig.pods() if p["spec"]["nodeName"] in new_spot
        ]
        assert loading == {returned_pod: {"true"}}, loading

        def hold_given_back() -> bool:
            pod = rig.cluster.store.get(R.PODS, "inference", returned_pod)
            assert pod is not None
            return DO_NOT_DISRUPT not in (pod["metadata"].get("annotations") or {})

        await rig.wait_for(hold_given_back, timeout=10, what="the returned replica's hold ended")


async def test_a_node_karpenter_disrupts_has_its_replica_replaced_before_the_drain_takes_it(
    tmp_path: Path,
) -> None:
    # Drift, consolidation or expiry: Karpenter taints the node `karpenter.sh/disrupted` and
    # drains it through the Eviction API (the stand-in's `disrupt`). No capacity is going away
    # and nothing forces the pod off (no terminationGracePeriod): with make-before-break, no
    # Ready replica needs to be lost, whatever the load takes.
    async with running(tmp_path, karpenter_scenario()) as rig:
        await rig.wait_for(lambda: rig.ready_count() == 2, timeout=30, what="2 replicas on spot")
        deployment = copy.deepcopy(rig.deployment())
        deployment["metadata"].setdefault("annotations", {})[names.SPREAD] = "zone"
        rig.cluster.store.update(R.DEPLOYMENTS, deployment)
        await start_controller_with_webhook(rig, REBALANCER_POOLS="[]")
        await rig.until_ready(replicas=2)
        before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in rig.pods()}
        doomed = sorted(before.values())[0]
        loading: dict[str, set[str | None]] = {}

        def drained_and_replaced() -> bool:
            for pod in rig.pods():
                name = pod["metadata"]["name"]
                if name not in before and pod["spec"].get("nodeName") and not ready(pod):
                    held = pod["metadata"].get("annotations", {}).get(DO_NOT_DISRUPT)
                    loading.setdefault(name, set()).add(held)
            return rig.node(doomed) is None and rig.ready_count() == 2

        async with sampling(rig):
            rig.cluster.karpenter.disrupt(doomed)
            await rig.wait_for(drained_and_replaced, timeout=60, what="the node drained, 2 Ready")

        # Never below 2 Ready: the surge's hold refused Karpenter's evictions of the old
        # replica until its replacement was Ready, and the scale-back then removed it.
        assert rig.min_ready[("inference", "llm")] == 2, rig.min_ready
        assert rig.deficit[("inference", "llm")].replica_seconds == 0
        assert rig.deployment()["spec"]["replicas"] == 2
        refused = {name for _, name in rig.cluster.karpenter.refused}
        assert refused <= set(before) and refused, rig.cluster.karpenter.refused
        # Placed as any new replica, not failed over: spot, as the NodePool launches for it.
        (replacement,) = [p for p in rig.pods() if p["metadata"]["name"] not in before]
        annotations = replacement["metadata"]["annotations"]
        assert annotations[names.PLACED].startswith(f"{NODEPOOL}:spot/"), annotations
        assert karpenter_labels(rig, replacement["spec"]["nodeName"]) == (NODEPOOL, "spot")
        assert rig.events("SpotRebalancerFailoverBlocked") == []
        # Held from Karpenter's consolidation while it loaded, given back once the surge ended.
        assert loading == {replacement["metadata"]["name"]: {"true"}}, loading

        def hold_given_back() -> bool:
            pod = rig.cluster.store.get(R.PODS, "inference", replacement["metadata"]["name"])
            assert pod is not None
            return DO_NOT_DISRUPT not in (pod["metadata"].get("annotations") or {})

        await rig.wait_for(hold_given_back, timeout=10, what="the replacement's hold ended")

"""The controller end to end on a real control plane: the scenarios of tests/virtual/test_controller.py
that apply here (no autoscaler: the pools are the nodes the test creates), with the same outcomes.

The agent and the controller run as processes under the chart's ServiceAccounts and RBAC; any call
the chart does not allow fails the test (tests/k8s/rig.py). Azure's side is the IMDS emulator, and
the test deletes the VM's pods and Node at the event's NotBefore, as a spot eviction ends.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time

import pytest

from rebalancer import names
from tests.e2e.rig import ready, sampling
from tests.helpers import serve
from tests.k8s.rig import RELEASE_NAMESPACE, KubeRig, render_chart
from tests.receiver import SECRET_PATH, Receiver

pytestmark = pytest.mark.k8s

DEADLINE_TAINT = f"{names.PREFIX}/evicting"
FAST_LEASE = {
    "REBALANCER_LEASE_DURATION_SECONDS": "4",
    "REBALANCER_RENEW_DEADLINE_SECONDS": "3",
    "REBALANCER_RETRY_PERIOD_SECONDS": "1",
}


def spot_node_of_a_replica(rig: KubeRig, prefix: str = "llm") -> str:
    return sorted(
        p["spec"]["nodeName"] for p in rig.pods() if p["metadata"]["name"].startswith(prefix)
    )[0]


def notify_url_as_the_kubelet_gives_it(rig: KubeRig, url: str) -> str:
    """Put `url` in a real Secret, render the chart pointing `notifications` at it, and resolve
    the Deployment's `secretKeyRef` against the API server, as the kubelet does for the pod."""
    manifest = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "notify", "namespace": RELEASE_NAMESPACE},
        "stringData": {"url": url},
    }  # fmt: skip
    rig.plane.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    objects = render_chart("notifications.webhookURLSecretName=notify")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (ref,) = [e for e in container["env"] if e["name"] == "REBALANCER_NOTIFY_WEBHOOK_URL"]
    key = ref["valueFrom"]["secretKeyRef"]
    data = rig.plane.kubectl(
        "get", "secret", key["name"], "-n", RELEASE_NAMESPACE,
        "-o", f"jsonpath={{.data.{key['key']}}}",
    )  # fmt: skip
    return base64.b64decode(data).decode()


def http_date(moment: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(moment))


async def test_single_preempt_fails_over_before_the_node_goes(rig: KubeRig) -> None:
    receiver = Receiver()
    async with serve(receiver.app()) as base:
        url = notify_url_as_the_kubelet_gives_it(rig, base + SECRET_PATH)
        await single_preempt(rig, receiver, url)


async def single_preempt(rig: KubeRig, receiver: Receiver, notify_url: str) -> None:
    await rig.deploy()
    rig.start_agents()
    rig.start_controller(REBALANCER_NOTIFY_WEBHOOK_URL=notify_url, REBALANCER_NOTIFY_TARGET="teams")
    await rig.until_ready()
    doomed = spot_node_of_a_replica(rig)
    async with sampling(rig):
        event = rig.preempt(doomed, notice_seconds=30)
        await rig.wait_for(
            lambda: (rig.node(doomed) or {"spec": {}})["spec"].get("unschedulable"),
            timeout=5,
            what="the node cordoned",
        )
        node = rig.node(doomed)
        assert node is not None
        assert DEADLINE_TAINT in {t["key"] for t in node["spec"]["taints"]}
        assert node["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"]
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=30, what="the node drained")
        assert time.time() < event.not_before.timestamp(), "drained after the deadline"
        await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
        await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready replicas")
    # Nobody lost a replica: the replacement was Ready before the doomed one went.
    assert rig.min_ready[("inference", "llm")] == 3
    assert rig.deployment()["spec"]["replicas"] == 3
    pools = sorted(rig.pool_of(p["spec"]["nodeName"]) for p in rig.pods())
    assert pools == ["gpuondemand", "gpuspot", "gpuspot"]
    # The agent acknowledged the event only after the controller said the node was drained.
    assert rig.imds.events[event.event_id].acknowledged_by
    assert rig.events("SpotRebalancerCordoned") and rig.events("SpotRebalancerSurge")
    assert rig.events("SpotRebalancerDrained")
    assert (
        await rig.metric(
            "controller-0",
            'rebalancer_controller_failovers_total{reason="ReplacementsReady",stage="completed"}',
        )
        == 1
    )
    # What a user sees: the real kubectl describe lists our Events on the Deployment (it finds
    # them by involvedObject, uid included).
    described = rig.plane.kubectl("describe", "deployment", "llm", "-n", "inference")
    assert "SpotRebalancerSurge" in described and "SpotRebalancerScaleBack" in described
    # The hold against others' evictions was taken and given back under the chart's RBAC.
    assert "spot-rebalancer-hold-llm" not in rig.plane.kubectl("get", "pdb", "-A")
    # The channel heard of it once, as a Teams card naming the node and the event.
    (card,) = [b["attachments"][0]["content"] for b in receiver.bodies]
    assert card["body"][0]["text"] == f"Preempt notice on {doomed}: acting"
    assert {"title": "event id", "value": event.event_id} in card["body"][2]["facts"]
    assert "s3cr3t" not in rig.log("controller-0")


async def test_a_wave_through_the_npd_conditions(rig: KubeRig) -> None:
    """Every spot node of the pool noticed within two seconds, by AKS's node-problem-detector
    only (no agents): all cordoned at once, all replicas moved to on-demand before the deadline."""
    await rig.add_node("gpuspot", 3)
    for index in (2, 3):
        await rig.add_node("gpuondemand", index)
    await rig.deploy(replicas=4)
    rig.start_controller()
    await rig.until_ready(replicas=4)
    doomed = rig.spot_nodes()
    assert len(doomed) == 4
    noticed_at: dict[str, float] = {}
    cordoned_at: dict[str, float] = {}
    drained_at: dict[str, float] = {}

    async def watch_nodes() -> None:
        while True:
            for node_name in doomed:
                node = rig.node(node_name)
                if node is not None and node["spec"].get("unschedulable"):
                    cordoned_at.setdefault(node_name, time.time())
                if rig.drained_for(node_name):
                    drained_at.setdefault(node_name, time.time())
            await asyncio.sleep(0.02)

    async with sampling(rig):
        watcher = asyncio.create_task(watch_nodes())
        try:
            events = {}
            for node_name in doomed:
                events[node_name] = event = rig.preempt(node_name, notice_seconds=30)
                await rig.npd_preemption(
                    node_name, event.event_id, http_date(event.not_before.timestamp())
                )
                noticed_at[node_name] = time.time()
                await asyncio.sleep(0.5)
            await rig.wait_for(lambda: len(cordoned_at) == 4, timeout=10, what="4 cordoned")
            await rig.wait_for(lambda: len(drained_at) == 4, timeout=35, what="4 drained")
        finally:
            watcher.cancel()
        await rig.wait_for(
            lambda: all(rig.node(n) is None for n in doomed), timeout=40, what="the VMs gone"
        )
        await rig.wait_for(lambda: rig.ready_count() == 4, timeout=20, what="4 Ready again")
    slowest_cordon = max(cordoned_at[n] - noticed_at[n] for n in doomed)
    assert slowest_cordon < 5.0, f"a node was cordoned {slowest_cordon:.1f}s after its notice"
    assert all(drained_at[n] < events[n].not_before.timestamp() for n in doomed)
    assert rig.deployment()["spec"]["replicas"] == 4
    assert all(rig.pool_of(p["spec"]["nodeName"]) == "gpuondemand" for p in rig.pods())
    # Unavoidable: nothing. 30 s of notice, less the controller's 5 s drain margin and a few
    # seconds of reaction, against a 3 s load on warm on-demand nodes.
    assert rig.min_ready[("inference", "llm")] == 4, rig.min_ready
    assert (
        await rig.metric("controller-0", "rebalancer_controller_drain_missed_deadline_total") == 0
    )


async def test_a_pdb_that_allows_nothing_does_not_stop_the_deadline(rig: KubeRig) -> None:
    """The real disruption controller refuses the eviction (429); at the deadline the controller
    deletes the pod anyway, since the VM goes whatever the budget says."""
    await rig.deploy()
    await rig.deploy(
        "cache",
        replicas=1,
        gpus=0,
        node_selector={names.AKS_SPOT_LABEL: "spot"},
        pdb={"minAvailable": 1},
    )
    rig.start_agents()
    rig.start_controller()
    await rig.until_ready()
    cache = await rig.wait_for(
        lambda: next(
            (p for p in rig.pods() if p["metadata"]["name"].startswith("cache") and ready(p)),
            None,
        ),
        timeout=15,
        what="the cache pod",
    )
    doomed = cache["spec"]["nodeName"]
    event = rig.preempt(doomed, notice_seconds=15)
    await rig.wait_for_metric(
        "controller-0", 'rebalancer_controller_pods_total{action="eviction_blocked"}', 1, timeout=10
    )
    await rig.wait_for(lambda: rig.drained_for(doomed), timeout=20, what="the node drained")
    assert time.time() < event.not_before.timestamp(), "the PDB held the drain past the deadline"
    assert (
        await rig.metric("controller-0", 'rebalancer_controller_pods_total{action="deleted"}') >= 1
    )


async def test_a_cancelled_event_is_undone(rig: KubeRig) -> None:
    await rig.deploy(startup_seconds=8)  # the replacement is still loading when the event ends
    rig.start_agents()
    rig.start_controller()
    await rig.until_ready()
    doomed = spot_node_of_a_replica(rig)
    doomed_pod = next(p["metadata"]["name"] for p in rig.pods() if p["spec"]["nodeName"] == doomed)
    async with sampling(rig):
        event = rig.preempt(doomed, notice_seconds=120)
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
        )
        rig.cancel(event)
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=15, what="the scale-back"
        )

        def restored() -> bool:
            node = rig.node(doomed)
            return (
                node is not None
                and not node["spec"].get("unschedulable")
                and not any(
                    k.startswith(names.PREFIX) and k != names.EVENTS_ANNOTATION
                    for k in node["metadata"].get("annotations", {})
                )
            )

        await rig.wait_for(restored, timeout=10, what="the node restored")
        await rig.wait_for(lambda: len(rig.pods()) == 3, timeout=15, what="the surge pod gone")
    node = rig.node(doomed)
    assert node is not None
    assert DEADLINE_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
    assert (
        "node.kubernetes.io/exclude-from-external-load-balancers" not in node["metadata"]["labels"]
    )
    # The old replica stayed, serving; the real ReplicaSet controller removed the replacement
    # that was still loading.
    kept = {p["metadata"]["name"]: p for p in rig.pods()}
    assert doomed_pod in kept and len(kept) == 3
    assert "controller.kubernetes.io/pod-deletion-cost" not in kept[doomed_pod]["metadata"].get(
        "annotations", {}
    )
    assert rig.min_ready[("inference", "llm")] == 3
    assert rig.events("SpotRebalancerRestored")


async def test_the_other_replica_finishes_when_the_leader_dies_mid_drain(rig: KubeRig) -> None:
    """Two controllers on a real Lease; the leader is killed (no release) during the surge."""
    await rig.deploy(startup_seconds=8)  # the surge is still loading when the leader dies
    rig.start_agents()
    rig.start_controller("controller-a", **FAST_LEASE)
    rig.start_controller("controller-b", **FAST_LEASE)
    await rig.until_ready()
    leader = await rig.wait_for_leader(["controller-a", "controller-b"])
    follower = "controller-b" if leader == "controller-a" else "controller-a"
    doomed = spot_node_of_a_replica(rig)
    async with sampling(rig):
        event = rig.preempt(doomed, notice_seconds=40)
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
        )
        rig.stop(leader, signal.SIGKILL)
        killed = time.monotonic()
        await rig.wait_for_metric(follower, "rebalancer_controller_leader", 1, timeout=10)
        takeover = time.monotonic() - killed
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=30, what="the node drained")
        assert time.time() < event.not_before.timestamp()
        await rig.wait_for(lambda: rig.node(doomed) is None, timeout=45, what="the VM gone")
        await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready")
    assert takeover < 4 + 2, f"the follower took {takeover:.1f}s to lead (lease 4 s)"
    assert rig.deployment()["spec"]["replicas"] == 3
    assert rig.max_replicas[("inference", "llm")] == 4, "surged twice"
    # The killed leader's Surge Event may be lost with it (SIGKILL: nothing is flushed).
    assert len(rig.events("SpotRebalancerSurge")) <= 1
    assert rig.min_ready[("inference", "llm")] == 3
    lease = await rig.api.request(
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/spot-rebalancer/leases/spot-rebalancer-controller",
    )
    assert lease["spec"]["holderIdentity"] == follower
    assert lease["spec"]["leaseTransitions"] >= 1


async def test_a_statefulset_replica_is_evicted_at_once_and_comes_back_elsewhere(
    rig: KubeRig,
) -> None:
    """Never surged (a StatefulSet's pods have names of their own): evicted through the real
    Eviction API at once, and the real StatefulSet controller brings db-0 back elsewhere."""
    await rig.deploy("db", replicas=1, startup_seconds=1, kind="StatefulSet")
    rig.start_agents()
    rig.start_controller()
    await rig.wait_for(lambda: rig.ready_count(prefix="db") == 1, timeout=20, what="db-0 Ready")
    await rig.until_ready(replicas=0)
    doomed = next(p for p in rig.pods() if p["metadata"]["name"] == "db-0")["spec"]["nodeName"]
    event = rig.preempt(doomed, notice_seconds=30)
    await rig.wait_for(lambda: rig.drained_for(doomed), timeout=20, what="the node drained")
    assert time.time() < event.not_before.timestamp()
    await rig.wait_for(
        lambda: any(
            p["metadata"]["name"] == "db-0" and ready(p) and p["spec"]["nodeName"] != doomed
            for p in rig.pods()
        ),
        timeout=20,
        what="db-0 Ready on another node",
    )
    assert not rig.events("SpotRebalancerSurge")
    assert [e["involvedObject"]["name"] for e in rig.events("SpotRebalancerEvicted")] == ["db-0"]


async def test_dry_run_writes_nothing(rig: KubeRig) -> None:
    """Nothing but its Lease (dry run still takes the leader's Lease; the controller lead
    decides whether it should): what the controller could write is compared before and after,
    and no Event of ours exists."""
    await rig.deploy()
    rig.start_controller(REBALANCER_DRY_RUN="true")
    await rig.until_ready()
    doomed = spot_node_of_a_replica(rig)
    before = rig.writable_state()
    event = rig.preempt(doomed, notice_seconds=60)
    await rig.npd_preemption(doomed, event.event_id, http_date(event.not_before.timestamp()))
    for action in ("Cordon", "ScaleUp"):
        await rig.wait_for_metric(
            "controller-0",
            f'rebalancer_controller_actions_total{{action="{action}",outcome="dry_run"}}',
            1,
            timeout=10,
        )
    node = rig.node(doomed)
    assert node is not None and not node["spec"].get("unschedulable")
    assert rig.writable_state() == before
    assert not [
        e
        for e in rig.namespaced["events"].items.values()
        if e["reason"].startswith("SpotRebalancer")
    ]
    assert "would act (dry run)" in rig.log("controller-0")

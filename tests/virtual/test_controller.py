"""The controller through a notice's life, on the cluster emulator on virtual time: the
product's own agents and controller (tests/virtual/rig.py), real HTTP on 127.0.0.1.

Each test asserts what a user would see: nodes, pods, replicas, Events and metrics. Moments are
on the cluster's clock, so "before the deadline" is exact, not a race with a loaded machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rebalancer import names
from rebalancer.config import setting_fields
from rebalancer.controller.settings import ControllerSettings
from rebalancer_sim import resources as R
from rebalancer_sim.measure import unavoidable_deficit
from tests.e2e.rig import SPOT_TOLERATIONS, Rig, ready, sampling, scenario
from tests.virtual.rig import REACTION, running

pytestmark = pytest.mark.looptime

DEADLINE_TAINT = f"{names.PREFIX}/evicting"
# The controller deletes what is left this long before a deadline.
MARGIN = float(setting_fields(ControllerSettings)["deadline_margin_seconds"].default)


async def test_single_preempt_fails_over_before_the_node_goes(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        async with sampling(rig):
            event = rig.cluster.preempt(doomed, notice_seconds=30)
            await rig.wait_for(
                lambda: (rig.node(doomed) or {"spec": {}})["spec"].get("unschedulable"),
                timeout=5,
                what="the node cordoned",
            )
            node = rig.node(doomed)
            assert node is not None
            assert DEADLINE_TAINT in {t["key"] for t in node["spec"]["taints"]}
            assert (
                node["metadata"]["labels"][
                    "node.kubernetes.io/exclude-from-external-load-balancers"
                ]
                == "true"
            )
            await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
            await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready replicas")
        # Nobody lost a replica: the replacement was Ready before the doomed one went.
        assert rig.min_ready[("inference", "llm")] == 3
        assert rig.deployment()["spec"]["replicas"] == 3
        pools = sorted(rig.pool_of(p["spec"]["nodeName"]) for p in rig.pods())
        assert pools == ["gpuondemand", "gpuspot", "gpuspot"]
        # The agent acknowledged the event only after the controller said the node was drained.
        assert rig.cluster.imds.events[event.event_id].acknowledged_by
        assert rig.events("SpotRebalancerCordoned") and rig.events("SpotRebalancerSurge")
        assert rig.events("SpotRebalancerDrained")
        # Series exist at zero from the start (rebalancer.metrics): check the count, not presence.
        assert (
            await rig.metric(
                "controller-0",
                'rebalancer_controller_notices_total{event_type="Preempt",pool="gpuspot",priority="spot"',
            )
            >= 1
        )
        assert (
            await rig.metric("controller-0", "rebalancer_controller_notice_to_cordon_seconds_count")
            == 1
        )
        assert (
            await rig.metric(
                "controller-0",
                'rebalancer_controller_failovers_total{reason="ReplacementsReady",stage="completed"}',
            )
            == 1
        )
        assert await rig.metric("controller-0", "rebalancer_controller_leader") == 1


def _deadline_of(rig: Rig, event_id: str) -> float:
    return rig.cluster.imds.events[event_id].not_before.timestamp()


async def test_a_wave_of_twenty_nodes_through_the_npd_conditions(tmp_path: Path) -> None:
    data = scenario()
    data["pools"][1]["count"] = 20
    data["pools"][2].update({"count": 2, "minCount": 0, "maxCount": 24, "provisioningSeconds": 2})
    data["workloads"][0]["replicas"] = 20
    async with running(tmp_path, data) as rig:
        rig.start_controller()  # no agents: AKS's node-problem-detector is the only signal
        await rig.until_ready(replicas=20)
        doomed = rig.spot_nodes()
        deadlines: dict[str, float] = {}
        noticed_at: dict[str, float] = {}
        cordoned_at: dict[str, float] = {}
        drained_at: dict[str, float] = {}

        async def watch_nodes() -> None:
            while True:
                for node_name in doomed:
                    node = rig.node(node_name)
                    if node is not None and node["spec"].get("unschedulable"):
                        cordoned_at.setdefault(node_name, rig.wall())
                    if rig.drained_for(node_name):
                        drained_at.setdefault(node_name, rig.wall())
                await asyncio.sleep(0.02)

        async with sampling(rig):
            watcher = asyncio.create_task(watch_nodes())
            try:
                for index, node_name in enumerate(doomed):
                    event = rig.cluster.preempt(node_name, notice_seconds=30)
                    not_before = event.not_before.strftime("%a, %d %b %Y %H:%M:%S GMT")
                    rig.npd_preemption(node_name, event.event_id, not_before)
                    noticed_at[node_name] = rig.wall()
                    deadlines[node_name] = event.not_before.timestamp()
                    if index % 2:
                        await asyncio.sleep(1.0)  # 20 nodes over 10 seconds
                await rig.wait_for(lambda: len(cordoned_at) == 20, timeout=15, what="20 cordoned")
                await rig.wait_for(lambda: len(drained_at) == 20, timeout=40, what="20 drained")
            finally:
                watcher.cancel()
            await rig.wait_for(
                lambda: all(rig.node(n) is None for n in doomed), timeout=45, what="the VMs gone"
            )
            await rig.wait_for(lambda: rig.ready_count() == 20, timeout=20, what="20 Ready again")
        # How fast is a benchmark's business (bench/bench_controller.py: notice to cordon); here,
        # what must hold on a loaded machine too: every node cordoned before it was drained.
        assert all(noticed_at[n] <= cordoned_at[n] <= drained_at[n] for n in doomed)
        assert all(drained_at[n] < deadlines[n] for n in doomed), (
            "a node was drained after its deadline"
        )
        assert rig.deployment()["spec"]["replicas"] == 20
        assert all(rig.pool_of(p["spec"]["nodeName"]) == "gpuondemand" for p in rig.pods())
        # Unavoidable: none. Each node's 30 s of notice, less the controller's drain margin,
        # is longer than a replacement needs (on-demand nodes in 2 s, a 3 s load, reaction).
        load = float(data["workloads"][0]["startupSeconds"])
        provisioning = float(data["pools"][2]["provisioningSeconds"])
        assert (
            unavoidable_deficit(
                notice_seconds=30 - MARGIN - REACTION,
                load_seconds=load,
                provisioning_seconds=provisioning,
                doomed_replicas=20,
            )
            == 0
        )
        assert rig.min_ready[("inference", "llm")] == 20, rig.min_ready
        assert rig.deficit[("inference", "llm")].replica_seconds == 0
        assert (
            await rig.metric("controller-0", "rebalancer_controller_drain_missed_deadline_total")
            == 0
        )


async def test_eight_seconds_of_notice_still_drains_in_time(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        event = rig.cluster.preempt(doomed, notice_seconds=8)
        deadline = _deadline_of(rig, event.event_id)
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=12, what="the node drained")
        assert rig.wall() < deadline, "drained after the deadline"
        await rig.wait_for(lambda: rig.node(doomed) is None, timeout=20, what="the VM gone")
        await rig.wait_for(lambda: rig.ready_count() == 3, timeout=15, what="3 Ready replicas")
        assert rig.deployment()["spec"]["replicas"] == 3


async def test_a_pdb_that_allows_nothing_does_not_stop_the_deadline(tmp_path: Path) -> None:
    data = scenario()
    data["workloads"].append(
        {"name": "cache", "namespace": "inference", "replicas": 1, "requests": {"cpu": "1"},
         "tolerations": SPOT_TOLERATIONS,
         "nodeSelector": {"kubernetes.azure.com/scalesetpriority": "spot"},
         "terminationGracePeriodSeconds": 30, "pdb": {"minAvailable": 1}}
    )  # fmt: skip
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        cache = await rig.wait_for(
            lambda: next(
                (p for p in rig.pods() if p["metadata"]["name"].startswith("cache") and ready(p)),
                None,
            ),
            timeout=10,
            what="the cache pod",
        )
        doomed = cache["spec"]["nodeName"]
        event = rig.cluster.preempt(doomed, notice_seconds=15)
        deadline = _deadline_of(rig, event.event_id)
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_controller_pods_total{action="eviction_blocked"}',
            1,
            timeout=10,
        )
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=20, what="the node drained")
        assert rig.wall() < deadline, "the PDB held the drain past the deadline"
        assert (
            await rig.metric("controller-0", 'rebalancer_controller_pods_total{action="deleted"}')
            >= 1
        )


async def test_a_cancelled_event_is_undone(tmp_path: Path) -> None:
    data = scenario()
    data["workloads"][0]["startupSeconds"] = 8  # the replacement is still loading when it ends
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        before = rig.node(doomed)
        assert before is not None
        doomed_pod = next(
            p["metadata"]["name"] for p in rig.pods() if p["spec"]["nodeName"] == doomed
        )
        async with sampling(rig):
            event = rig.cluster.preempt(doomed, notice_seconds=120)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
            )
            assert rig.cluster.imds.cancel(event.event_id)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=15, what="the scale-back"
            )

            def restored() -> bool:
                node = rig.node(doomed)
                return (
                    bool(node)
                    and not node["spec"].get("unschedulable")
                    and not any(
                        k.startswith(names.PREFIX) and k != names.EVENTS_ANNOTATION
                        for k in node["metadata"].get("annotations", {})
                    )
                )

            await rig.wait_for(restored, timeout=10, what="the node restored")
        node = rig.node(doomed)
        assert node is not None
        assert DEADLINE_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
        assert (
            "node.kubernetes.io/exclude-from-external-load-balancers"
            not in node["metadata"]["labels"]
        )
        # The old replica stayed, serving; the replacement that was still loading went (the
        # ReplicaSet removes it after the scale-back, in its own time).
        await rig.wait_for(
            lambda: len([p for p in rig.pods() if p["metadata"]["name"].startswith("llm")]) == 3,
            timeout=10,
            what="the ReplicaSet down to 3 pods",
        )
        names_now = {
            p["metadata"]["name"] for p in rig.pods() if p["metadata"]["name"].startswith("llm")
        }
        assert doomed_pod in names_now and len(names_now) == 3
        kept = next(p for p in rig.pods() if p["metadata"]["name"] == doomed_pod)
        assert "controller.kubernetes.io/pod-deletion-cost" not in kept["metadata"].get(
            "annotations", {}
        )
        assert rig.min_ready[("inference", "llm")] == 3
        assert rig.events("SpotRebalancerRestored")


async def test_no_compatible_on_demand_pool_is_reported_and_the_node_still_drained(
    tmp_path: Path,
) -> None:
    data = scenario()
    data["workloads"][0]["nodeSelector"] = {"kubernetes.azure.com/scalesetpriority": "spot"}
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        event = rig.cluster.preempt(doomed, notice_seconds=12)
        deadline = _deadline_of(rig, event.event_id)
        warnings = await rig.wait_for(
            lambda: rig.events("SpotRebalancerFailoverBlocked"), timeout=10, what="the warning"
        )
        assert warnings[0]["involvedObject"]["name"] == "llm"
        assert (
            "nodeSelector kubernetes.azure.com/scalesetpriority=spot not matched"
            in warnings[0]["message"]
        )
        assert warnings[0]["type"] == "Warning"
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=15, what="the node drained")
        assert rig.wall() < deadline
        assert (
            await rig.metric(
                "controller-0",
                'rebalancer_controller_failovers_total{reason="NoCompatibleOnDemandPool",stage="blocked"}',
            )
            == 1
        )
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 3,
            timeout=15,
            what="no workload left over-scaled",
        )


# The shape of the emulator's gpuondemand nodes, as an operator would declare it.
GPU_ON_DEMAND_POOL = {
    "name": "gpuondemand",
    "spot": False,
    "gpus": 1,
    "labels": {"kubernetes.azure.com/agentpool": "gpuondemand"},
    "taints": ["sku=gpu:NoSchedule"],
}


@pytest.mark.parametrize("declared", [False, True], ids=["undeclared", "declared"])
async def test_an_on_demand_pool_at_zero_nodes(tmp_path: Path, declared: bool) -> None:
    """The cluster autoscaler keeps gpuondemand at 0 nodes: only a declaration lets the
    controller know the surge has somewhere to go."""
    data = scenario()
    data["pools"][2].update({"count": 0, "minCount": 0, "maxCount": 2, "provisioningSeconds": 3})
    env = {"REBALANCER_POOLS": json.dumps([GPU_ON_DEMAND_POOL])} if declared else {}
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller(**env)
        await rig.until_ready()
        assert not rig.cluster.nodes("gpuondemand")
        doomed = rig.spot_nodes()[0]
        async with sampling(rig):
            rig.cluster.preempt(doomed, notice_seconds=30)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
            )
            # The autoscaler answers the pending replacement either way.
            await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
            await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready replicas")
        blocked = await rig.metric(
            "controller-0",
            'rebalancer_controller_failovers_total{reason="NoCompatibleOnDemandPool",stage="blocked"}',
        )
        warnings = rig.events("SpotRebalancerFailoverBlocked")
        if declared:
            assert (blocked, warnings) == (0, [])
        else:
            assert blocked == 1
            (warning,) = warnings
            # What the controller could see: the system pool, without GPUs.
            assert "pool system: needs 1 nvidia.com/gpu, nodes have 0" in warning["message"]
            assert "gpuondemand" not in warning["message"]
        (new_node,) = rig.cluster.nodes("gpuondemand")
        on_demand = [p for p in rig.pods() if p["spec"]["nodeName"] == new_node["metadata"]["name"]]
        assert len(on_demand) == 1 and ready(on_demand[0])
        assert rig.min_ready[("inference", "llm")] == 3
        assert rig.deployment()["spec"]["replicas"] == 3


async def test_aks_npd_conditions_without_our_agent(tmp_path: Path) -> None:
    async with running(tmp_path) as rig:
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        event = rig.cluster.preempt(doomed, notice_seconds=20)
        rig.npd_preemption(
            doomed, event.event_id, event.not_before.strftime("%a, %d %b %Y %H:%M:%S GMT")
        )
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=15, what="the node drained")
        assert rig.drained_for(doomed).upper() == event.event_id.upper()
        npd_notices = [
            line
            for line in (await rig.metrics("controller-0")).splitlines()
            if line.startswith("rebalancer_controller_notices_total{")
            and 'source="aks-npd"' in line
        ]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in npd_notices) >= 1


def _audit(writes: list[tuple[str, str, str]]) -> Any:
    """A `prepare` that records every write the API server receives: (method, path, agent)."""

    def prepare(cluster: Any) -> None:
        handle = cluster.api._handle

        async def recorded(request: web.Request) -> web.StreamResponse:
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                writes.append((request.method, request.path, request.headers.get("User-Agent", "")))
            return await handle(request)

        cluster.api._handle = recorded

    return prepare


async def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    """Nothing but its Lease: dry run still takes the leader's Lease (the controller lead
    decides whether it should); every other write is compared, by request and by state."""
    writes: list[tuple[str, str, str]] = []
    async with running(tmp_path, prepare=_audit(writes)) as rig:
        rig.start_controller(REBALANCER_DRY_RUN="true")
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        before = rig.writable_state()
        event = rig.cluster.preempt(doomed, notice_seconds=60)
        rig.npd_preemption(
            doomed, event.event_id, event.not_before.strftime("%a, %d %b %Y %H:%M:%S GMT")
        )
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_controller_actions_total{action="Cordon",outcome="dry_run"}',
            1,
            timeout=10,
        )
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_controller_actions_total{action="ScaleUp",outcome="dry_run"}',
            1,
            timeout=10,
        )
        after = rig.writable_state()
        assert after == before
        by_controller = [w for w in writes if w[2].endswith("; controller-0)")]
        assert by_controller, "writes are not attributed to the controller"
        assert [
            w for w in by_controller if "/leases/" not in w[1] and not w[1].endswith("/leases")
        ] == []
        assert not [e for e in rig.cluster.store.items(R.EVENTS) if e["reason"].startswith("Spot")]
        assert "would act (dry run)" in rig.log("controller-0")


async def test_a_restart_between_surge_and_scale_down_leaves_nothing_over_scaled(
    tmp_path: Path,
) -> None:
    data = scenario()
    data["workloads"][0]["startupSeconds"] = 6
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller("controller-0")
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        async with sampling(rig):
            rig.cluster.preempt(doomed, notice_seconds=40)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
            )
            rig.stop("controller-0")  # SIGTERM: releases the lease
            await rig.wait_for(
                lambda: (
                    not (
                        (
                            rig.cluster.store.get(R.LEASES, "default", "spot-rebalancer-controller")
                            or {}
                        )
                        .get("spec", {})
                        .get("holderIdentity")
                    )
                ),
                timeout=5,
                what="the lease released",
            )
            rig.start_controller("controller-1")
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 3, timeout=20, what="the scale-back"
            )
            await rig.wait_for(lambda: rig.drained_for(doomed), timeout=20, what="the node drained")
            await rig.wait_for(lambda: rig.node(doomed) is None, timeout=20, what="the VM gone")
            await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready")
        assert len(rig.events("SpotRebalancerSurge")) == 1
        assert rig.min_ready[("inference", "llm")] == 3
        assert "became leader" in rig.log("controller-1")


def _flaky_api(cluster: Any) -> None:
    """Fail a third of the writes with 500 and drop every watch now and then."""
    handle = cluster.api._handle  # the emulator's request handler, wrapped before it serves
    counter = itertools.count()

    async def flaky(request: web.Request) -> web.StreamResponse:
        if request.method in ("POST", "PUT", "PATCH", "DELETE") and next(counter) % 3 == 0:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "injected", "reason": "InternalError", "code": 500}  # fmt: skip
            return web.json_response(body, status=500)
        return await handle(request)

    cluster.api._handle = flaky


async def test_api_errors_and_watch_drops_during_a_notice(tmp_path: Path) -> None:
    async with running(tmp_path, prepare=_flaky_api) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]

        async def drop_watches() -> None:
            while True:
                await asyncio.sleep(1.5)
                for task in list(rig.cluster.api._watch_tasks):
                    task.cancel()

        dropper = asyncio.create_task(drop_watches())
        try:
            async with sampling(rig):
                event = rig.cluster.preempt(doomed, notice_seconds=30)
                deadline = _deadline_of(rig, event.event_id)
                await rig.wait_for(
                    lambda: rig.drained_for(doomed), timeout=30, what="the node drained"
                )
                assert rig.wall() < deadline
                await rig.wait_for(lambda: rig.node(doomed) is None, timeout=30, what="the VM gone")
                await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready")
        finally:
            dropper.cancel()
        assert rig.deployment()["spec"]["replicas"] == 3
        assert rig.min_ready[("inference", "llm")] == 3
        # A third of the writes failed with 500: each was tried again (rebalancer.retry).
        assert "retrying a write" in rig.log("controller-0"), "no injected error was retried"


async def test_a_statefulset_replica_is_evicted_at_once_and_comes_back_elsewhere(
    tmp_path: Path,
) -> None:
    data = scenario()
    data["workloads"] = [
        {"name": "db", "namespace": "inference", "kind": "StatefulSet", "replicas": 1,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT_TOLERATIONS, "preferSpot": 100, "startupSeconds": 1,
         "terminationGracePeriodSeconds": 5}
    ]  # fmt: skip
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller()
        await rig.wait_for(lambda: rig.ready_count(prefix="db") == 1, timeout=20, what="db-0 Ready")
        await rig.until_ready(replicas=0)
        db = next(p for p in rig.pods() if p["metadata"]["name"] == "db-0")
        doomed = db["spec"]["nodeName"]
        event = rig.cluster.preempt(doomed, notice_seconds=30)
        deadline = _deadline_of(rig, event.event_id)
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=20, what="the node drained")
        assert rig.wall() < deadline
        moved = await rig.wait_for(
            lambda: next(
                (
                    p
                    for p in rig.pods()
                    if p["metadata"]["name"] == "db-0"
                    and ready(p)
                    and p["spec"]["nodeName"] != doomed
                ),
                None,
            ),
            timeout=20,
            what="db-0 Ready on another node",
        )
        # Steering away is soft (PreferNoSchedule): a replica that prefers spot may still land on
        # another spot node; what matters is that it left the doomed one early.
        assert moved["spec"]["nodeName"] != doomed
        assert not rig.events("SpotRebalancerSurge")  # a StatefulSet is never surged
        assert [e["involvedObject"]["name"] for e in rig.events("SpotRebalancerEvicted")] == [
            "db-0"
        ]

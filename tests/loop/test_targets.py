"""Availability targets in the whole loop (issue 22): the controller, on virtual time, against
the emulator (tests/loop/emulated.py) with its own ReplicaSet, scheduler, kubelets (a model
loads for 10 s), autoscaler and Azure on the same clock. Each test is one decision of
`rebalancer/controller/target.py` / `target_plan.py`, with the expected values derived in the
comments from the scenario and the formulas of target.py at its default settings:

    T = recovery 360 s = 0.1 h; spot at 0.2 of on-demand; budget at 99.9 %: 0.001;
    priors: W0 = 0.05 waves/h weighing w = 24 h, q0 = 0.3 weighing a = 2 waves;
    half-life 6 h, so tau = 6 / ln 2 = 8.656 h; a record watched for h hours counts
    tau * (1 - exp(-h / tau)) hours of exposure.

The cluster: one zonal spot pool per zone (`gpuspot1` in eastus-1, ...: AKS's way to have the
autoscaler grow the zone a pod needs), one GPU a node, the spot nodes up for a day (capacity
that has held a day is no longer fresh: `target.aged`), an on-demand pool `gpuondemand`;
`llm` (3 replicas, target 99.9) serving from the nodes each test names. The placement webhook
is the controller's own, called over HTTPS by the emulated API server on each Pod CREATE, as
kube-apiserver does with the chart's configuration (two tests: the target's placement is half
its decisions). Not covered here: re-spreading at a constant count (a zone over its share while
another is under it gives one Ready replica up), tested on the planner alone in
tests/unit/test_target.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.azure.risk_feeds import eviction_rate_feed
from rebalancer.controller.returns import LOWEST
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import LOAD_ANNOTATION, STARTUP_ANNOTATION
from tests.e2e.rig import register_placement_webhook
from tests.helpers import free_port
from tests.loop.emulated import Emulated, controlling, emulated
from tests.loop.rig import CLOCK, NAMESPACE, until
from tests.loop.rig import preempt as published
from tests.tap import Request

pytestmark = pytest.mark.looptime

OD_POOL = "gpuondemand"
A100 = "Standard_NC24ads_A100_v4"
LOAD_SECONDS = 10
# The derivations take spot at 0.2 of on-demand: set, not the price table's (bundled A100 in
# eastus: 0.13), so that they read with round numbers.
PRICED = {"target_spot_price_share": 0.2}
DAY = timedelta(hours=24)


def gpu_pool(name: str, zone: str, count: int, *, spot: bool, grows: bool) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": name, "priority": "spot" if spot else "regular", "vmSize": A100,
        "zones": [zone], "cpu": 24, "memory": "220Gi", "gpus": 1, "gpuTaint": False,
        "count": count, "provisioningSeconds": 60, "pricePerHour": 3.67,
    }  # fmt: skip
    if grows:  # the autoscaler may add nodes (60 s each) for Pending pods, never take them
        pool["minCount"], pool["maxCount"] = count, count + 4
    return pool


def three_zones(
    spot: dict[str, int], *, on_demand: int = 2, placement: bool = False, grows: bool = False
) -> dict[str, Any]:
    """`spot`: zone ("1", "2", "3") -> its spot nodes (pool gpuspot<zone>); `on_demand` nodes
    in eastus-1. `llm` starts at 0 replicas: `serving_on` puts its 3 where a test wants them."""
    labels = {"app": "llm"}
    if placement:
        labels["spot-rebalancer.io/placement"] = "enabled"
    return {
        "name": "targets",
        "cluster": {"name": "loop", "region": "eastus"},
        "settings": {"nodeDeleteDelaySeconds": 0, "shutdownSeconds": 0.5,
                     "nodeAutoDrain": False},
        "pools": [
            *(gpu_pool(f"gpuspot{zone}", zone, n, spot=True, grows=grows)
              for zone, n in spot.items()),
            gpu_pool(OD_POOL, "1", on_demand, spot=False, grows=grows),
        ],
        "workloads": [
            {"name": "llm", "namespace": "ml", "replicas": 0, "labels": labels,
             "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
             "tolerations": ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule"],
             "preferSpot": 100, "startupSeconds": LOAD_SECONDS},
        ],
    }  # fmt: skip


def spot_nodes(cluster: ClusterEmulator, zone: str) -> list[str]:
    return sorted(n["metadata"]["name"] for n in cluster.nodes(f"gpuspot{zone}"))


def cordon(cluster: ClusterEmulator, node_name: str, unschedulable: bool) -> None:
    node = copy.deepcopy(cluster.store.get(R.NODES, "", node_name))
    node["spec"]["unschedulable"] = unschedulable
    cluster.store.update(R.NODES, node)


def serving_on(
    pick: Callable[[ClusterEmulator], list[str]], *, target: bool = True
) -> Callable[[ClusterEmulator], None]:
    """Before the test: `llm`'s 3 replicas scheduled on the nodes `pick` names (the others
    cordoned meanwhile) and Ready, as a cluster that has been serving; the target on it."""

    def prepare(cluster: ClusterEmulator) -> None:
        chosen = pick(cluster)
        others = [
            n["metadata"]["name"] for n in cluster.nodes() if n["metadata"]["name"] not in chosen
        ]
        for name in others:
            cordon(cluster, name, True)
        cluster.scale("llm", len(chosen), namespace="ml")
        cluster.kubelets.warm = True
        cluster.step()
        cluster.kubelets.warm = False
        for name in others:
            cordon(cluster, name, False)
        cluster.step()
        assert sorted(p["spec"]["nodeName"] for p in cluster.pods("ml")) == sorted(chosen)
        if target:
            set_target(cluster)

    return prepare


def set_target(cluster: ClusterEmulator) -> None:
    deployment = copy.deepcopy(cluster.store.get(R.DEPLOYMENTS, "ml", "llm"))
    deployment["metadata"].setdefault("annotations", {})[names.AVAILABILITY_TARGET] = "99.9"
    cluster.store.update(R.DEPLOYMENTS, deployment)


def first_of_each_zone(cluster: ClusterEmulator) -> list[str]:
    return [spot_nodes(cluster, zone)[0] for zone in ("1", "2", "3")]


ACCOUNT = ("seal", "watchedSince", "belowSeconds", "belowSince")


def record(em: Emulated) -> dict[str, Any]:
    """The Deployment's spare record, its seal and the target's account left out."""
    text = em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.SPARE_RECORD]
    return {k: v for k, v in json.loads(text).items() if k not in ACCOUNT}


def account(em: Emulated) -> dict[str, Any]:
    text = em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.SPARE_RECORD]
    return {k: v for k, v in json.loads(text).items() if k in ACCOUNT and k != "seal"}


def scaling_patches(em: Emulated) -> list[Request]:
    """The controller's writes of the Deployment's replica count, in order."""
    return [
        w
        for w in em.tap.written("PATCH", "deployments", who="ctl-a")
        if "replicas" in (w.body.get("spec") or {})
    ]


def events(em: Emulated, reason: str) -> list[dict[str, Any]]:
    return [w.body for w in em.tap.written("POST", "events") if w.body["reason"] == reason]


def preempt(em: Emulated, node_name: str, *, seconds: float) -> str:
    """Azure schedules a Preempt of the node's VM (it goes at NotBefore: no agent acknowledges
    it), and our agent publishes it on the Node. Returns the event's id."""
    event = em.cluster.preempt(node_name, notice_seconds=seconds)
    published(em, node_name, seconds=seconds, event_id=event.event_id)
    return event.event_id


def landed(em: Emulated) -> dict[str, str]:
    """Pod -> node, for every pod bound from now on (kept as the scheduler binds them)."""
    bound: dict[str, str] = {}

    def note(change: Any) -> None:
        if change.resource is R.PODS and change.type != "DELETED":
            where = change.new["spec"].get("nodeName")
            if where:
                bound.setdefault(change.new["metadata"]["name"], where)

    em.store.listeners.append(note)
    return bound


async def test_a_fresh_target_scales_to_the_plan_and_says_why() -> None:
    data = three_zones({"1": 1, "2": 1, "3": 1})
    async with (
        emulated(data, aged=DAY, prepare=serving_on(first_of_each_zone)) as em,
        controlling(em, **PRICED) as controller,
    ):
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await until(lambda: em.replicas() != 3, within=10, what="the plan applied")
        await asyncio.sleep(10)  # ten passes more: the plan holds, nothing else is written
    # The groups: gpuspot1..3 in eastus-1..3. The first pass plans before the history is
    # written (no record: nothing watched), so the priors alone: W = 24 * 0.05 / 24 = 0.05
    # waves/h, lambda_g = 0.05 * 0.3 = 0.015/h, lambda_gh = 0.05 * 0.09 = 0.0045/h.
    # Standing plan, cheapest within 0.001: 6 on spot (2,2,2) loses 3 below N with any pair,
    # U = 3 * (0.0045 * 0.1 + 0.015^2 * 0.01) = 0.00136; 5 (2,2,1) the same; 7 (3,2,2) only
    # with the two pairs holding the 3: U = 0.0009045, cost 1.4; with one on-demand, 2 spot
    # cost as much (1.4, found later), fewer leave fewer than 3. So 7 on spot, 0 on-demand.
    # Now: 1 Ready on spot per zone: 0 on-demand leaves 2 after a single loss, 1 leaves 2 after
    # a pair (U = 0.00136), 2 leave 3 after any pair: 2 on-demand, 7 + 2 = 9 replicas.
    # Two writes of the Deployment, once each: the policy in force and the plan (actions of
    # one step, sent together: they arrive in either order). Ten passes more write nothing:
    # the sealed records read back as what they say. (Meanwhile the ReplicaSet adds 6 pods,
    # 2 land on the on-demand nodes, 4 stay Pending: no room.)
    written = em.tap.written("PATCH", "deployments")
    assert sorted(sorted(w.body["metadata"]["annotations"]) for w in written) == [
        [names.POLICY_IN_FORCE],
        [names.SPARE_RECORD, names.TARGET_WHY],
    ]
    (scaled,) = scaling_patches(em)
    assert scaled.body["spec"]["replicas"] == 9
    assert record(em) == {"base": 3, "added": 6, "reverted": 0, "gaveUp": False, "spot": 7}
    # Watched from the first pass (the clock's start; the 3 Ready then), nothing below since.
    assert account(em) == {"watchedSince": "2026-11-30T12:00:00Z", "belowSeconds": 0}
    why = (
        "7 on spot over 3 groups in 3 zone(s) + 0 on-demand (4 spare): expected 99.910 % for a "
        "target of 99.9 % (0 waves of Preempts in 0 h, 0.050/h; riskiest gpuspot3/eastus-3: "
        "0.015/h, hit by 0); 6 on spot + 0 on-demand (one spare fewer) would expect 99.864 %, "
        "33 % of its time below from each of 3 alike, such as gpuspot1/eastus-1 and "
        "gpuspot2/eastus-2 lost together (0.0045/h: the prior alone: no wave yet); 2 more on "
        "on-demand while 3 of 7 spot are Ready; so far 100.000 % of 0.0 d all Ready: 0.0 of 0.0 "
        "min below used"
    )  # 1 - 0.0009045 = 99.910 %; the riskiest of equals is the last by name; one spare fewer,
    # 6 (2,2,2), loses 3 with each of the 3 pairs: 1 - 0.00136 = 99.864 %, a third each
    assert em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.TARGET_WHY] == why
    (event,) = events(em, "SpotRebalancerSpares")
    assert event["involvedObject"]["name"] == "llm"
    assert event["message"] == f"Availability target: scaled to 9: {why}"


async def test_azures_eviction_rate_bucket_raises_the_prior_and_the_words_say_it() -> None:
    asked: list[tuple[list[str], list[str]]] = []

    async def resource_graph(regions: list[str], skus: list[str]) -> dict[Any, str]:
        """Resource Graph's answer (the client replaced: its HTTP is tests/integration's):
        A100 in eastus in the 5-10 % bucket."""
        asked.append((regions, skus))
        return {(A100.lower(), "eastus"): "5-10"}

    data = three_zones({"1": 1, "2": 1, "3": 1})
    async with (
        emulated(data, aged=DAY, prepare=serving_on(first_of_each_zone)) as em,
        controlling(em, **PRICED) as controller,
    ):
        # The feed as wiring builds it when Resource Graph is enabled; refreshed once before the
        # controller's first pass (the fetch answers at once), then by the controller's loop.
        feed = eviction_rate_feed(resource_graph, ttl_seconds=3600, clock=CLOCK)
        controller.risk.eviction_rates = feed
        controller.risk.feeds = [feed]
        assert await feed.refresh(["eastus"], [A100])
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await until(lambda: em.replicas() != 3, within=10, what="the plan applied")
        await asyncio.sleep(10)  # ten passes more: the plan holds
    # The risk model's prior for A100 in eastus: the bucket's 0.075 per node-hour instead of
    # the settings' 0.05: x1.5 on each group's prior hit share, 0.45. No record yet: W = 0.05,
    # lambda_g = 0.0225, lambda_gh = 0.05 * 0.45^2 = 0.010125. A pair lost alone costs
    # 0.010125 * 0.1 + 0.0225^2 * 0.01 = 0.0010176, over the budget: today's plan (7 on spot,
    # losing 3 with two pairs) no longer meets it, nor does any with spot alone within the 4
    # spares (8 = (3,3,2) loses 3 with one pair). 6 on spot (2,2,2) + 1 on-demand leave 3
    # after any pair, and lose 3 only with the three zones at once, at their prior 0.05 *
    # 0.45^3 = 0.0045563/h (U = 0.00045563, 99.954 %; cost 2.2; 2 on-demand need 3 spot:
    # 2.6). Now, 1 Ready a zone: 2
    # on-demand leave 3 after any pair. 6 + 2 = 8 replicas, where the first test has 9.
    (scaled,) = scaling_patches(em)
    assert scaled.body["spec"]["replicas"] == 8
    assert record(em) == {"base": 3, "added": 5, "reverted": 0, "gaveUp": False, "spot": 6}
    why = (
        "6 on spot over 3 groups in 3 zone(s) + 1 on-demand (4 spare): expected 99.954 % for a "
        "target of 99.9 % (0 waves of Preempts in 0 h, 0.050/h; riskiest gpuspot3/eastus-3: "
        "0.022/h, hit by 0; prior x1.5 for gpuspot1/eastus-1, gpuspot2/eastus-2, "
        "gpuspot3/eastus-3: Azure's eviction rate 5-10 %); 5 on spot + 1 on-demand (one spare "
        "fewer) would expect 99.898 %, 100 % of its time below from gpuspot1/eastus-1 and "
        "gpuspot2/eastus-2 lost together (0.0101/h: the prior alone: no wave yet); 1 more on "
        "on-demand while 3 of 6 spot are Ready; so far 100.000 % of 0.0 d all Ready: 0.0 of 0.0 "
        "min below used"
    )  # 0.0225 is written 0.022 (its double is just below); one spare fewer, 5 (2,2,1) + 1,
    # loses 3 only with the pair of the 2s: 0.0010176 (99.898 %)
    assert em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.TARGET_WHY] == why
    (event,) = events(em, "SpotRebalancerSpares")
    assert event["message"] == f"Availability target: scaled to 8: {why}"
    # Asked once here, once by the controller's loop for its spot nodes' regions and sizes.
    assert asked == [(["eastus"], [A100])] * 2


SEVEN_SPOT = {"1": 3, "2": 2, "3": 2}


def slow_node(zone: str, seconds: float) -> Callable[[ClusterEmulator], None]:
    """The zone's spot node that `llm` does not run on pulls its image slowly: a pod there is
    Ready `seconds` after it starts (a slow image pull), not LOAD_SECONDS."""

    def prepare(cluster: ClusterEmulator) -> None:
        serving_on(first_of_each_zone)(cluster)
        used = {p["spec"]["nodeName"] for p in cluster.pods("ml")}
        (free,) = [n for n in spot_nodes(cluster, zone) if n not in used]
        node = copy.deepcopy(cluster.store.get(R.NODES, "", free))
        node["metadata"].setdefault("annotations", {})[STARTUP_ANNOTATION] = f"{seconds:g}"
        cluster.store.update(R.NODES, node)

    return prepare


async def test_on_demand_goes_once_spot_is_ready_lowest_cost_first() -> None:
    at_scaling: list[tuple[int, int, int]] = []  # (replicas written, Ready pods, pods)
    async with emulated(three_zones(SEVEN_SPOT), aged=DAY, prepare=slow_node("3", 120)) as em:

        def watch(write: Request) -> None:
            if (
                write.ok
                and write.resource == "deployments"
                and "replicas" in (write.body.get("spec") or {})
            ):
                at_scaling.append(
                    (write.body["spec"]["replicas"], len(em.ready_pods()), len(em.pods()))
                )

        em.tap.after_write = watch
        bound = landed(em)
        async with controlling(em, **PRICED) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            await until(lambda: em.replicas() == 7, within=200, what="scaled down to the plan")
            await asyncio.sleep(20)
        spot = [n for zone in SEVEN_SPOT for n in spot_nodes(em.cluster, zone)]
        final = sorted(p["spec"]["nodeName"] for p in em.pods())
        on_demand = sorted(name for name, where in bound.items() if where not in spot)
    # As in the test above, the plan is 7 on spot and 9 replicas while 3 spot are Ready. The
    # scheduler binds the 6 new pods at once, spot first (preferred): the 4 free spot nodes,
    # one of them eastus-3's slow one, then the 2 on-demand nodes. 10 s later all but the slow
    # node's are Ready: spot (3,2,1). Then 0 on-demand already keep U at 0.0009045 (only
    # pairs with eastus-1 leave fewer than 3), so 7 replicas are enough, but scaling down would
    # make the ReplicaSet remove the loading spot replica first. Only when it is Ready (120 s)
    # are both on-demand replicas marked with the lowest cost, and the next pass scales to 7,
    # all 9 Ready.
    assert [count for count, _, _ in at_scaling] == [9, 7]
    assert at_scaling[1][1:] == (9, 9), "scaled down before every replica was Ready"
    assert len(on_demand) == 2
    lowered = [
        (w.name, w.at)
        for w in em.tap.written("PATCH", "pods")
        if (w.body["metadata"].get("annotations") or {}).get(names.DELETION_COST) == LOWEST
    ]
    assert sorted(name for name, _ in lowered) == on_demand
    (down,) = [w for w in scaling_patches(em) if w.body["spec"]["replicas"] == 7]
    assert all(at < down.at for _, at in lowered), "scaled before the costs were lowered"
    assert down.at >= 120, "scaled while the slow node's replica loaded"
    # Nothing was evicted and the loading spot replica was never removed: the 7 left are the
    # 7 first bound to spot, one per spot node.
    assert em.tap.written("POST", "pods/eviction") == []
    assert final == sorted(spot)
    assert len(bound) == 6  # the new ones (the 3 serving were bound before)
    assert record(em) == {"base": 3, "added": 4, "reverted": 0, "gaveUp": False, "spot": 7}


@contextlib.asynccontextmanager
async def placing(em: Emulated, **overrides: Any) -> Any:
    """The controller with its placement webhook, registered with the emulated API server as
    the chart registers it; the target set once the webhook serves (a pod created before is
    admitted unplaced: failurePolicy Ignore). `overrides`: more of the controller's settings."""
    port = free_port()
    register_placement_webhook(em.cluster, port=port, namespace=NAMESPACE)
    async with controlling(
        em, webhook_enabled=True, webhook_port=port, **PRICED, **overrides
    ) as controller:
        await until(lambda: controller.elector.is_leader, within=10, what="leading")

        def ca_bundle() -> str:
            configuration = em.store.get(R.MUTATING_WEBHOOKS, "", "spot-rebalancer")
            return str(configuration["webhooks"][0]["clientConfig"].get("caBundle", ""))

        await until(ca_bundle, within=20, what="the controller's CA in the configuration")
        for _ in range(200):  # its server starts right after the certificate is loaded
            if await listening(port):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the webhook never listened")
        set_target(em.cluster)
        yield controller


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


def spread_of(em: Emulated) -> dict[str, int]:
    """Pods per node zone and on-demand (`"od"`), scheduled ones only."""
    counted: dict[str, int] = {}
    for p in em.pods():
        where = p["spec"].get("nodeName")
        if where:
            labels = em.get(R.NODES, "", where)["metadata"]["labels"]
            spot = labels.get(names.AKS_SPOT_LABEL) == "spot"
            key = labels[names.ZONE_LABEL] if spot else "od"
            counted[key] = counted.get(key, 0) + 1
    return counted


def on_demand_pods(em: Emulated) -> list[str]:
    """The pods bound to on-demand nodes."""
    on_demand = []
    for p in em.pods():
        node = em.node(p["spec"].get("nodeName") or "")
        if node is not None and node["metadata"]["labels"].get(names.AKS_SPOT_LABEL) != "spot":
            on_demand.append(p["metadata"]["name"])
    return on_demand


def noticed(em: Emulated) -> list[str]:
    return [
        node["metadata"]["name"]
        for node in em.store.items(R.NODES)
        if any(c["type"] == names.CONDITION_TYPE and c["status"] == "True"
               for c in node["status"]["conditions"])
    ]  # fmt: skip


async def test_a_wave_across_two_zones_keeps_on_demand_before_any_further_notice() -> None:
    data = three_zones(SEVEN_SPOT, on_demand=4, placement=True, grows=True)
    prepare = serving_on(first_of_each_zone, target=False)
    async with emulated(data, aged=DAY, prepare=prepare) as em, placing(em):
        await until(lambda: em.replicas() == len(em.pods()) == 7, within=60, what="the calm plan")
        calm = spread_of(em)
        # One wave: Preempts in eastus-1 (t = 60 s) and eastus-2 (t = 80 s), 20 s apart, of
        # the third node of eastus-1 and the second of eastus-2.
        doomed = {
            spot_nodes(em.cluster, "1")[2]: "eastus-1",
            spot_nodes(em.cluster, "2")[1]: "eastus-2",
        }
        first, second = doomed
        await until(lambda: CLOCK.monotonic() >= 60, within=60, what="t = 60 s")
        preempt(em, first, seconds=30)
        await until(lambda: CLOCK.monotonic() >= 80, within=30, what="t = 80 s")
        preempt(em, second, seconds=30)

        def settled() -> bool:
            return (
                not noticed(em)
                and not any(em.node(n) for n in doomed)
                and len(em.ready_pods()) == len(em.pods()) == em.replicas()
            )

        def steady() -> tuple[int, list[str]] | None:
            return (em.replicas(), sorted(on_demand_pods(em))) if settled() else None

        held = None
        while held is None or held != steady():  # the same for a minute
            await until(settled, within=600, what="the wave over, every replica Ready")
            held = steady()
            await asyncio.sleep(60)
        settled_at = CLOCK.monotonic()
        await asyncio.sleep(300)  # five quiet minutes: no notice anywhere
        assert (em.replicas(), sorted(on_demand_pods(em))) == held
        history = json.loads(em.get(R.CONFIGMAPS, NAMESPACE, "ctl-history")["data"]["history.json"])
        why = em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.TARGET_WHY]
        final = record(em)
        replicas = em.replicas()
    assert calm == {"eastus-1": 3, "eastus-2": 2, "eastus-3": 2}  # the plan before: 7 on spot
    # The history, as the controller saw the notices (the pass right after each; times kept
    # to the second): one wave (20 s apart, within 600 s) that hit eastus-1 and eastus-2.
    assert history["since"] == "2026-11-30T12:00:00Z"
    assert [(e["node"], e["zone"], e["firstSeen"]) for e in history["entries"]] == [
        (first, "eastus-1", "2026-11-30T12:01:00Z"),
        (second, "eastus-2", "2026-11-30T12:01:20Z"),
    ]
    # At a time t h after the start (t < 0.2 h from here on), the wave is t - 1/60 h old:
    # weight s = 2^(-(t - 1/60) / 6) > 0.97; exposure = tau (1 - e^(-t / tau)) ~ t < 0.2 h.
    #   W = (1.2 + s) / (24 + t) ~ 0.091/h;  lambda_1 = lambda_2 = W (0.6 + s) / (2 + s) ~ 0.048/h;
    #   lambda_3 = W * 0.6 / (2 + s) ~ 0.018/h;  lambda_12 = W (0.18 + s) / (2 + s) ~ 0.035/h;
    #   lambda_13 = lambda_23 = W * 0.18 / (2 + s) ~ 0.0055/h.
    # Standing plan: on spot alone, 7 is (3,2,2) and losing eastus-1 and -2 together leaves 2,
    # U >= 0.035 * 0.1 = 0.0035 > 0.001: no plan on spot alone. With one on-demand, 6 on spot
    # (2,2,2) leave 3 after any pair, U = 0 (cost 2.2); 5 (2,2,1) leave 2 after the pair of
    # 1 and 2, as above; two on-demand and at most 1 on spot (cost <= 2.2) leave 2 after a
    # single loss (U >= 0.0048). So 6 on spot + 1 on-demand, 7 replicas, decided before any
    # further notice: the calm plan had none on on-demand.
    assert final == {"base": 3, "added": 4, "reverted": 0, "gaveUp": False, "spot": 6}
    assert replicas == 7
    assert held is not None and len(held[1]) == 1, "not one replica kept on on-demand"
    assert why.startswith("6 on spot over 3 groups in 3 zone(s) + 1 on-demand (4 spare)"), why
    assert "1 waves of Preempts" in why and "hit by 1" in why
    assert settled_at < 720


async def test_new_spot_replicas_go_to_the_zones_below_their_share() -> None:
    # All three replicas in eastus-1, which has two nodes free besides: a scheduler left to
    # itself would fill eastus-1 first (spot first, then by name).
    data = three_zones({"1": 5, "2": 2, "3": 2}, on_demand=3, placement=True)
    prepare = serving_on(lambda cluster: spot_nodes(cluster, "1")[:3], target=False)
    async with emulated(data, aged=DAY, prepare=prepare) as em:
        serving = {p["metadata"]["name"] for p in em.pods()}
        bound = landed(em)
        async with placing(em):
            await asyncio.sleep(120)  # virtual: the plan is reached in about 10 s
        spread = spread_of(em)
        counts = (em.replicas(), len(em.ready_pods()), len(em.pods()))
        zones = {n["metadata"]["name"]: n["metadata"]["labels"] for n in em.store.items(R.NODES)}
        eastus_1 = spot_nodes(em.cluster, "1")
    # Standing plan as in the first test: 7 on spot, an even share of ceil(7 / 3) = 3 a zone.
    # Now, with 3 Ready on spot, all in eastus-1: its loss alone leaves only the on-demand
    # ones, so 3 on-demand (U = 0 then; fewer leave under 3 with eastus-1's loss, U >= 0.0015):
    # 7 + 3 = 10. The webhook sends the 4 new spot replicas to the zones below their share,
    # eastus-2 and eastus-3, two each (each to the zone with the fewest), the 3 others to
    # on-demand; once the spot ones are Ready, the on-demand ones go: (3,2,2), 7 replicas.
    assert spread == {"eastus-1": 3, "eastus-2": 2, "eastus-3": 2}
    assert counts == (7, 7, 7)
    new = {name: node for name, node in bound.items() if name not in serving}
    spot_new = sorted(n for n in new.values() if zones[n].get(names.AKS_SPOT_LABEL) == "spot")
    assert [zones[n][names.ZONE_LABEL] for n in spot_new] == [
        "eastus-2", "eastus-2", "eastus-3", "eastus-3",
    ]  # fmt: skip
    assert len(set(spot_new)) == 4  # one a node: every node of eastus-2 and eastus-3
    on_demand_new = [n for n in new.values() if zones[n].get(names.AKS_SPOT_LABEL) != "spot"]
    assert len(set(on_demand_new)) == len(on_demand_new) == 3
    assert not set(eastus_1[3:]) & set(new.values())  # eastus-1's two free nodes stay free
    assert [w.body["spec"]["replicas"] for w in scaling_patches(em)] == [10, 7]


async def test_spares_go_to_the_zones_with_capacity_once_a_replica_waited_for_one() -> None:
    # eastus-1 and eastus-2 have 3 spot nodes each; eastus-3's spot pool (declared, as the
    # README asks for a pool the autoscaler keeps at zero) has no capacity: nothing the
    # emulated autoscaler can add. `llm` serves on 2 nodes of eastus-1 and 1 of eastus-2.
    data = three_zones({"1": 3, "2": 3}, on_demand=3, placement=True)
    zone_3 = {
        "name": "gpuspot3", "spot": True, "gpus": 1,
        "labels": {names.ZONE_LABEL: "eastus-3"},
        "taints": ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule"],
    }  # fmt: skip
    chosen = lambda c: [*spot_nodes(c, "1")[:2], spot_nodes(c, "2")[0]]  # noqa: E731
    async with (
        emulated(data, aged=DAY, prepare=serving_on(chosen, target=False)) as em,
        placing(em, pools=[zone_3]),
    ):
        started = CLOCK.monotonic()

        def waiting_in_3() -> bool:
            annotations = em.annotations(R.DEPLOYMENTS, "ml", "llm")
            return names.SPARE_RECORD in annotations and "waiting" in record(em)

        await until(waiting_in_3, within=700, what="eastus-3 waiting for capacity")
        waited = CLOCK.monotonic() - started

        def settled() -> bool:
            return (
                len(em.ready_pods()) == 6 and len(em.pods()) == em.replicas() == 7
                and not on_demand_pods(em)
            )  # fmt: skip

        await until(settled, within=300, what="the spares where capacity is")
        spread = spread_of(em)
        unscheduled = [p for p in em.pods() if not p["spec"].get("nodeName")]
        why = em.annotations(R.DEPLOYMENTS, "ml", "llm")[names.TARGET_WHY]
        final = record(em)
    # Before: the plan over three zones with the priors alone (the first test): 7 on spot, a
    # share of 3 a zone, the ones sent to eastus-3 waiting there, and on-demand covering them.
    # A replica sent to eastus-3 has waited 10 minutes (REBALANCER_TARGET_CAPACITY_WAIT_SECONDS)
    # with no Ready spot node there: the plan is over eastus-1 and -2 (the unit test's
    # derivation): 6 on spot (3,3) and 0 on-demand, U = 0.0045 * 0.1 + 0.015^2 * 0.01 =
    # 0.00045, plus 1 waiting in eastus-3: 7 replicas, every node of eastus-1 and -2 used.
    assert 600 <= waited < 660
    assert final == {
        "base": 3, "added": 4, "reverted": 0, "gaveUp": False, "spot": 7,
        "waiting": ["eastus-3"],
    }  # fmt: skip
    assert spread == {"eastus-1": 3, "eastus-2": 3}
    (probe,) = unscheduled
    assert probe["metadata"]["annotations"][names.PLACED] == "gpuspot3/eastus-3"
    assert why.startswith("6 on spot over 2 groups in 2 zone(s) + 0 on-demand (3 spare)"), why
    assert "; 1 more on spot waiting for capacity in eastus-3;" in why


def hpa_spec(em: Emulated) -> tuple[int, int, str | None]:
    hpa = em.get(R.HPAS, "ml", "llm")
    saved = (hpa["metadata"].get("annotations") or {}).get(names.HPA_ORIGINAL_ANNOTATION)
    return hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"], saved


def set_load(em: Emulated, percent: int) -> None:
    em.edit(R.HPAS, "ml", "llm", lambda h: h["metadata"]["annotations"].update(
        {LOAD_ANNOTATION: str(percent)}))  # fmt: skip


def scaled_by(scaler: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Three zones, one Ready spot node each, llm scaled by `scaler` ("hpa", "keda") with the
    scenario's `spec` for it."""
    data = three_zones({"1": 1, "2": 1, "3": 1})
    data["workloads"][0][scaler] = spec
    return data


@contextlib.asynccontextmanager
async def planned_on(data: dict[str, Any]) -> AsyncIterator[Emulated]:
    """The cluster of `data`, llm serving on the first node of each zone, with the controller
    leading and its first plan for the target applied (llm's count no longer the owner's 3)."""
    async with (
        emulated(data, aged=DAY, prepare=serving_on(first_of_each_zone)) as em,
        controlling(em, **PRICED) as controller,
    ):
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await until(lambda: em.replicas() != 3, within=10, what="the plan applied")
        yield em


async def test_with_an_hpa_the_spares_ride_on_its_own_count_and_its_bounds_hold_them() -> None:
    """llm is scaled by an HPA (the emulator's, upstream's arithmetic, a sync every 15 s): 1 to
    8 replicas at 50 % CPU, a load of 150 % of one pod's request (3 pods). The target's N is
    what the HPA wants, computed from its status; the HPA's minReplicas holds N plus the plan
    (it would otherwise scale the spares back within 15 s); N follows the load up at once and
    down after the HPA's scale-down window (300 s); without the target, the bounds go back."""
    hpa = {"minReplicas": 1, "maxReplicas": 8, "targetCPUUtilization": 50, "load": 150}
    async with planned_on(scaled_by("hpa", hpa)) as em:
        rescales_before = len(em.cluster.hpas.rescales)
        await asyncio.sleep(60)  # four HPA syncs: none scales the spares back
        planned = (em.replicas(), record(em)["base"], hpa_spec(em))
        # The load doubles: 300 % over the 5 Ready (3 spot, 2 on-demand; 4 Pending, no room)
        # is 60 % each, 1.2 x 5 = 6 pods at 50 %.
        set_load(em, 300)
        await until(lambda: record(em)["base"] == 6, within=30, what="N following the HPA up")
        up = (em.replicas(), hpa_spec(em))
        set_load(em, 150)  # 30 % each: 3 pods, but only after the HPA's 300 s window
        fell = CLOCK.monotonic()
        await until(lambda: record(em)["base"] == 3, within=330, what="N following it down")
        held = CLOCK.monotonic() - fell
        kept = account(em)
        rescaled = em.cluster.hpas.rescales[rescales_before:]
        em.edit(R.DEPLOYMENTS, "ml", "llm", lambda d: d["metadata"]["annotations"].pop(
            names.AVAILABILITY_TARGET))  # fmt: skip
        await until(lambda: hpa_spec(em) == (1, 8, None), within=30, what="bounds put back")
        await until(lambda: em.replicas() == 3, within=400, what="the HPA's own count")
        gone = names.SPARE_RECORD not in em.annotations(R.DEPLOYMENTS, "ml", "llm")
    # 3 Ready at 50 %: the HPA wants 3, the first test's plan for 3 (9 replicas: 7 on spot, 2
    # on-demand while 3 of 7 are Ready), and the HPA's bounds raised to 9, its own sealed.
    count, base, (low, high, saved) = planned
    assert (count, base, low, high) == (9, 3, 9, 9)
    assert saved is not None and saved.startswith("1,8 seal=")
    assert rescaled == []  # the HPA never set the count back while the target held it
    # N = 6 with the same 3 spot Ready: the plan for 6 (its count is the planner's, checked in
    # tests/unit/test_target.py; here: more than for 3), the bounds with it.
    replicas_up, bounds_up = up
    assert replicas_up > 9 and bounds_up == (replicas_up, replicas_up, saved)
    assert 300 <= held < 330  # the scale-down window, then a pass
    # Down again straight to the plan for 3 (no stricter plan on the way: a new N, a new
    # plan), and never below the count: the 6th replica never found room, but the rise is
    # measured against the 3 before it for one recovery (360 s), longer than it lasted.
    counts = [w.body["spec"]["replicas"] for w in scaling_patches(em)]
    assert [count for count, _ in itertools.groupby(counts)] == [9, replicas_up, 9]
    assert kept == {"watchedSince": "2026-11-30T12:00:00Z", "belowSeconds": 0}
    assert gone


def keda_bounds(em: Emulated) -> tuple[int, int, str | None, int, int]:
    """The ScaledObject's bounds and our record on it, and the bounds KEDA wrote on its HPA."""
    scaled = em.get(R.SCALEDOBJECTS, "ml", "llm")
    hpa = em.get(R.HPAS, "ml", "keda-hpa-llm")
    saved = (scaled["metadata"].get("annotations") or {}).get(names.HPA_ORIGINAL_ANNOTATION)
    spec = scaled["spec"]
    return (
        spec["minReplicaCount"], spec["maxReplicaCount"], saved,
        hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"],
    )  # fmt: skip


async def test_with_keda_the_scaledobjects_bounds_hold_the_spares() -> None:
    """llm is scaled by KEDA: a ScaledObject (1 to 8 replicas, a cpu trigger at 50 %), whose
    HPA the emulator's stand-in for KEDA's operator makes, owns and sets back from the
    ScaledObject whenever it changes, as KEDA does. The controller raises the ScaledObject's
    bounds instead of the HPA's, KEDA writes them onto its HPA, and the HPA holds the spares;
    without the target, the ScaledObject's own bounds go back, and KEDA's HPA with them."""
    keda = {"minReplicaCount": 1, "maxReplicaCount": 8, "cpu": 50, "load": 150}
    async with planned_on(scaled_by("keda", keda)) as em:
        rescales_before = len(em.cluster.hpas.rescales)
        await asyncio.sleep(60)  # four HPA syncs: none scales the spares back
        planned = (em.replicas(), record(em)["base"], keda_bounds(em))
        rescaled = em.cluster.hpas.rescales[rescales_before:]
        em.edit(R.DEPLOYMENTS, "ml", "llm", lambda d: d["metadata"]["annotations"].pop(
            names.AVAILABILITY_TARGET))  # fmt: skip
        await until(
            lambda: keda_bounds(em) == (1, 8, None, 1, 8), within=30, what="bounds put back"
        )
        on_hpa = em.written("PATCH", "horizontalpodautoscalers", who="ctl-a")
        on_scaled = em.written("PATCH", "scaledobjects", who="ctl-a")
    # 3 Ready at 50 % (150 % over 3): the HPA wants 3, the plan for 3 of the HPA test above (9
    # replicas), held by the ScaledObject's bounds raised to 9, its own sealed on it, and by
    # KEDA's HPA, to which KEDA copied them.
    count, base, (low, high, saved, hpa_low, hpa_high) = planned
    assert (count, base, low, high, hpa_low, hpa_high) == (9, 3, 9, 9, 9, 9)
    assert saved is not None and saved.startswith("1,8 seal=")
    assert rescaled == []  # the HPA never set the count back while the target held it
    assert on_hpa == []  # never a write on the HPA KEDA owns
    assert len(on_scaled) == 2  # raised once, put back once

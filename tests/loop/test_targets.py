"""Availability targets in the whole loop (issue 22): the controller, on virtual time, against
the fake API and the loop world (tests/loop/world.py). Each test is one decision of
`rebalancer/controller/target.py` / `target_plan.py`, with the expected values derived in the
comments from the scenario and the formulas of target.py at its default settings:

    T = recovery 360 s = 0.1 h; spot at 0.2 of on-demand; budget at 99.9 %: 0.001;
    priors: W0 = 0.05 waves/h weighing w = 24 h, q0 = 0.3 weighing a = 2 waves;
    half-life 6 h, so tau = 6 / ln 2 = 8.656 h; a record watched for h hours counts
    tau * (1 - exp(-h / tau)) hours of exposure.

Placement is not exercised here: the loop world's ReplicaSet binds new pods to free nodes itself
(spot first, by name) and never sends them through the admission webhook, so the re-spread
decision is covered by tests/unit/test_target.py's placement tests only.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.returns import LOWEST
from tests.fakes.api import FakeApi, Write
from tests.loop.rig import (
    CLOCK,
    annotations,
    becomes_ready,
    cluster,
    node,
    pod,
    replicas,
    running,
    until,
)
from tests.loop.world import World

pytestmark = pytest.mark.looptime

SPOT_POOL, OD_POOL = "gpuspot", "gpuondemand"


def zoned(name: str, zone: str, *, spot: bool) -> dict[str, Any]:
    obj = node(name, SPOT_POOL if spot else OD_POOL, spot=spot)
    obj["metadata"]["labels"][names.ZONE_LABEL] = zone
    return obj


def three_zones(spot_nodes: dict[str, list[str]], *, on_demand: int = 2) -> FakeApi:
    """`llm` (3 replicas, target 99.9) with one Ready replica on the first spot node of each
    zone; `spot_nodes`: zone -> its spot nodes; `on_demand` on-demand nodes od-0, od-1, ..."""
    api = cluster()
    for key in [k for k in api.objects if k[0] in ("nodes", "pods")]:
        api.remove(*key)
    for zone, nodes in spot_nodes.items():
        for name in nodes:
            api.put_object("nodes", zoned(name, zone, spot=True))
    for index in range(on_demand):
        api.put_object("nodes", zoned(f"od-{index}", "eastus-1", spot=False))
    for index, nodes in enumerate(spot_nodes.values()):
        api.put_object("pods", pod(f"llm-{index}", nodes[0]))

    def target(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"][names.AVAILABILITY_TARGET] = "99.9"

    api.edit("deployments", "ml", "llm", target)
    return api


def record(api: FakeApi) -> dict[str, Any]:
    """The Deployment's spare record, its seal left out."""
    text = annotations(api, "deployments", "ml", "llm")[names.SPARE_RECORD]
    return {k: v for k, v in json.loads(text).items() if k != "seal"}


def scaling_patches(api: FakeApi) -> list[Write]:
    """The controller's writes of the Deployment's replica count, in order."""
    return [w for w in api.written("PATCH", "deployments") if "replicas" in w.body.get("spec", {})]


def events(api: FakeApi, reason: str) -> list[dict[str, Any]]:
    return [w.body for w in api.written("POST", "events") if w.body["reason"] == reason]


async def test_a_fresh_target_scales_to_the_plan_and_says_why() -> None:
    api = three_zones({"eastus-1": ["spot-1a"], "eastus-2": ["spot-2a"], "eastus-3": ["spot-3a"]})
    async with running(api) as controller:
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await until(lambda: replicas(api) != 3, within=10, what="the plan applied")
        await asyncio.sleep(10)  # ten passes more: the plan holds, nothing else is written
    # The groups: gpuspot over eastus-1..3. The first pass plans before the history is written
    # (no record: nothing watched), so the priors alone: W = 24 * 0.05 / 24 = 0.05 waves/h,
    # lambda_g = 0.05 * 0.3 = 0.015/h, lambda_gh = 0.05 * 0.09 = 0.0045/h.
    # Standing plan, cheapest within 0.001: 6 on spot (2,2,2) loses 3 below N with any pair,
    # U = 3 * (0.0045 * 0.1 + 0.015^2 * 0.01) = 0.00136; 5 (2,2,1) the same; 7 (3,2,2) only
    # with the two pairs holding the 3: U = 0.0009045, cost 1.4; with one on-demand, 2 spot
    # cost as much (1.4, found later), fewer leave fewer than 3. So 7 on spot, 0 on-demand.
    # Now: 1 Ready on spot per zone: 0 on-demand leaves 2 after a single loss, 1 leaves 2 after
    # a pair (U = 0.00136), 2 leave 3 after any pair: 2 on-demand, 7 + 2 = 9 replicas.
    (scaled,) = scaling_patches(api)
    assert scaled.body["spec"]["replicas"] == 9
    assert record(api) == {"base": 3, "added": 6, "reverted": 0, "gaveUp": False, "spot": 7}
    why = (
        "7 on spot over 3 groups in 3 zone(s) + 0 on-demand (4 spare): expected 99.910 % >= "
        "99.9 % (0 waves of Preempts in 0 h, 0.050/h; riskiest gpuspot/eastus-3: 0.015/h, "
        "hit by 0); 2 more on on-demand while 3 of 7 spot are Ready"
    )  # 1 - 0.0009045 = 99.910 %; the riskiest of equals is the last by name
    assert annotations(api, "deployments", "ml", "llm")[names.TARGET_WHY] == why
    (event,) = events(api, "SpotRebalancerSpares")
    assert event["involvedObject"]["name"] == "llm"
    assert event["message"] == f"Availability target: scaled to 9: {why}"


@dataclass
class SlowNodes(World):
    """The loop world where a pod on some nodes takes longer to be Ready (a slow image pull)."""

    slow: dict[str, float] = field(default_factory=dict)  # node -> its load seconds

    def _load(self) -> None:
        now = CLOCK.monotonic()
        for p in self.pods():
            name = p["metadata"]["name"]
            load = self.slow.get(p["spec"]["nodeName"], self.load_seconds)
            ready = any(c.get("status") == "True" for c in p["status"]["conditions"])
            if not ready and now - self._created.get(name, now) >= load:
                becomes_ready(self.api, name)


SEVEN_SPOT = {
    "eastus-1": ["spot-1a", "spot-1b", "spot-1c"],
    "eastus-2": ["spot-2a", "spot-2b"],
    "eastus-3": ["spot-3a", "spot-3b"],
}


async def test_on_demand_goes_once_spot_is_ready_lowest_cost_first() -> None:
    api = three_zones(SEVEN_SPOT)
    world = SlowNodes(api, load_seconds=10, slow={"spot-3b": 120})
    at_scaling: list[tuple[int, int, int]] = []  # (replicas written, Ready pods, pods)

    def watch(write: Write) -> None:
        if write.resource == "deployments" and "replicas" in write.body.get("spec", {}):
            at_scaling.append(
                (write.body["spec"]["replicas"], len(world.ready_pods()), len(world.pods()))
            )

    api.after_write = watch
    landed: dict[str, str] = {}  # pod -> node, as each landed
    world.after_step = lambda: landed.update(
        {p["metadata"]["name"]: p["spec"]["nodeName"] for p in world.pods()}
    )
    playing = asyncio.create_task(world.run())
    try:
        async with running(api) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            await until(lambda: replicas(api) == 7, within=200, what="scaled down to the plan")
            await asyncio.sleep(20)
    finally:
        playing.cancel()
    # As in the test above, the plan is 7 on spot and 9 replicas while 3 spot are Ready. The
    # world binds the 6 new pods at once, spot first by name: spot-1b, spot-1c, spot-2b,
    # spot-3b, then od-0, od-1. 10 s later all but spot-3b's are Ready: spot (3,2,1). Then
    # 0 on-demand already keep U at 0.0009045 (only pairs with eastus-1 leave fewer than 3),
    # so 7 replicas are enough, but scaling down would make the ReplicaSet remove the loading
    # spot replica first. Only when it is Ready (120 s) are both on-demand replicas marked with
    # the lowest cost, and the next pass scales to 7, all 9 Ready.
    assert [count for count, _, _ in at_scaling] == [9, 7]
    assert at_scaling[1][1:] == (9, 9), "scaled down before every replica was Ready"
    on_demand = sorted(name for name, where in landed.items() if where.startswith("od-"))
    assert len(on_demand) == 2
    lowered = [
        (w.name, w.at)
        for w in api.written("PATCH", "pods")
        if (w.body["metadata"].get("annotations") or {}).get(names.DELETION_COST) == LOWEST
    ]
    assert sorted(name for name, _ in lowered) == on_demand
    (down,) = [w for w in scaling_patches(api) if w.body["spec"]["replicas"] == 7]
    assert all(at < down.at for _, at in lowered), "scaled before the costs were lowered"
    assert down.at >= 120, "scaled while spot-3b's replica loaded"
    # Nothing was evicted and the loading spot replica was never removed: the 7 left are the
    # 7 first bound to spot, one per spot node.
    assert api.written("POST", "pods/eviction") == []
    assert sorted(p["spec"]["nodeName"] for p in world.pods()) == sorted(
        n for nodes in SEVEN_SPOT.values() for n in nodes
    )
    assert len(landed) == 9
    assert record(api) == {"base": 3, "added": 4, "reverted": 0, "gaveUp": False, "spot": 7}

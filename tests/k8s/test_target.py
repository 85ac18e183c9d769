"""An availability target on the real control plane: the controller scales a Deployment to its
plan, the placement webhook (called by the real API server, through the chart's Service) sends
each new replica to the spot zone or the on-demand pool the plan's record asks for, and the
on-demand fallback is given back make-before-break once the spot replicas are Ready, all under
the chart's RBAC (the rig fails the test on any refused call).

The plan, from the formulas of `rebalancer/controller/target.py` with the controller's default
settings and no eviction history (the test starts without one: the priors alone, W = 0.05
waves an hour, each hitting a zone with share 0.3; T = 0.1 h; spot at 0.2 of on-demand), for
3 replicas at 99.9 % over three spot zones (budget 0.001):

- 6 on spot (2, 2, 2) leaves 2 < 3 after any two zones go: U = 3 * (0.0045 * 0.1 + 0.015^2 *
  0.01) = 0.00136, over the budget. 7 on spot (3, 2, 2): only the two pairs with the 3 leave
  fewer than 3, U = 0.000905, within it, at 7 * 0.2 = 1.4 on-demand replicas' cost; the
  cheapest plan with on-demand in it (4 spot and 1 on-demand) costs 1.8. So 7 on spot, none on
  on-demand, once they are Ready;
- now, with the owner's 3 Ready on spot (one per zone): every pair's loss leaves 1; with 2 on
  on-demand it leaves 3 (U = 0, and 1 on-demand leaves 2 after every pair: U = 0.00136). So 2
  on on-demand while the spares are not Ready: 9 replicas, the record's `spot` 7. With 3 Ready
  on spot a zone (1, 1, 1), placement sends the 4 spot spares to the zones with fewest, ties by
  name: eastus-1, -2, -3, then -1 again: (3, 2, 2).

The cluster: start.sh's three spot nodes (one per zone, one GPU each) and two on-demand nodes.
The spot spares find no spot capacity at first: they wait, Pending on their zone, while the
on-demand fallback serves; then spot capacity arrives (four spot nodes, uncordoned at once) and
they load, each a second longer than the last, so that the controller plans while some are
Ready and others load: it must not shrink then (a ReplicaSet removes a loading replica before
any Ready one, whatever its deletion cost).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.records import Spare
from rebalancer.controller.returns import LOWEST
from tests.e2e.rig import ready, sampling
from tests.k8s.rig import KubeRig
from tests.k8s.test_webhook import (
    ON_DEMAND,
    PLACEMENT_LABEL,
    SPOT,
    Webhook,
    eventually,
    node_affinity,
    required_pools,
)

pytestmark = pytest.mark.k8s

TARGET = {names.AVAILABILITY_TARGET: "99.9"}
DEPLOYMENT = "/apis/apps/v1/namespaces/inference/deployments/llm"
MERGE = "application/merge-patch+json"
# The spot capacity that comes: start.sh numbers a pool's nodes into zones by index mod 3.
NEW_SPOT = {3: "eastus-1", 4: "eastus-2", 5: "eastus-3", 6: "eastus-1"}
KWOK_READY_DELAY = "pod-ready.stage.kwok.x-k8s.io/delay"  # tests/cluster/start.sh


def record(rig: KubeRig) -> Spare | None:
    """The spare record, the target's account left out (its stretches below follow the
    cluster's timing; the unit and loop tests check it)."""
    text = (rig.deployment()["metadata"].get("annotations") or {}).get(names.SPARE_RECORD)
    if text is None:
        return None
    kept = Spare.from_json(text)
    assert kept.watched_since is not None  # a target's record always carries its account
    return replace(kept, watched_since=None, below_seconds=0, below_since=None)


def required_zones(pod: dict[str, Any]) -> list[str]:
    required = node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [
        value
        for term in required.get("nodeSelectorTerms") or []
        for expression in term.get("matchExpressions") or []
        if expression["key"] == names.ZONE_LABEL
        for value in expression["values"]
    ]


def zone_of(rig: KubeRig, pod: dict[str, Any]) -> str:
    node = rig.node(pod["spec"]["nodeName"])
    assert node is not None
    return str(node["metadata"]["labels"][names.ZONE_LABEL])


def spot_zones(rig: KubeRig) -> Counter[str]:
    """Ready replicas on spot, per zone."""
    return Counter(
        zone_of(rig, p)
        for p in rig.pods()
        if p["spec"].get("nodeName") and rig.pool_of(p["spec"]["nodeName"]) == SPOT and ready(p)
    )


async def test_a_target_gets_its_spares_and_its_fallback_and_gives_the_fallback_back(
    rig: KubeRig, webhook: Webhook
) -> None:
    api = rig.api
    # The spot nodes here are minutes old: fresh capacity would keep one on-demand replica
    # for up to an hour (`target.aged`, checked in unit, loop and simulate tests); off here,
    # where what is tested is the fallback given back on the real control plane.
    rig.start_controller(
        **webhook.controller_env,
        REBALANCER_TARGET_FRESH_SECONDS="0",
        REBALANCER_TARGET_SPOT_PRICE_SHARE="0.2",  # the derivation's, not the price table's
    )
    configuration = (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
        + webhook.configuration
    )

    async def ca_injected() -> bool:
        config = await api.request("GET", configuration)
        return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

    await eventually(ca_injected, timeout=15, what="the CA in the caBundle")
    await rig.wait_for(
        lambda: "admission webhook serving" in rig.log("controller-0"),
        timeout=10,
        what="the webhook serving",
    )
    # The owner's 3 replicas, one on each spot node (one per zone), before any target.
    await rig.deploy(replicas=3, pod_labels=PLACEMENT_LABEL, startup_seconds=2)
    await rig.until_ready(replicas=3)
    owners = {p["metadata"]["name"] for p in rig.pods()}
    assert spot_zones(rig) == Counter({"eastus-1": 1, "eastus-2": 1, "eastus-3": 1})

    async with sampling(rig):
        # The owner asks for 99.9 %.
        await api.request(
            "PATCH", DEPLOYMENT, {"metadata": {"annotations": TARGET}}, content_type=MERGE
        )
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 9, timeout=15, what="9 replicas"
        )
        assert record(rig) == Spare(base=3, added=6, spot=7)
        why = rig.deployment()["metadata"]["annotations"][names.TARGET_WHY]
        assert why.startswith("7 on spot over 3 groups in 3 zone(s) + 0 on-demand"), why
        assert "2 more on on-demand while 3 of 7 spot are Ready" in why, why
        # What binds, as in tests/loop/test_targets.py: one spare fewer, 6 (2,2,2), loses 3
        # with any of the 3 pairs (0.00136 with the priors alone, a few seconds watched).
        assert "; 6 on spot + 0 on-demand (one spare fewer) would expect 99.86" in why, why
        assert "each of 3 alike, such as " in why, why

        # Each new replica placed by the webhook: the 4 spot spares required on their zone's
        # spot pool (no spot capacity yet: they wait), the 2 others on the on-demand pool.
        def new_pods() -> list[dict[str, Any]]:
            return [p for p in rig.pods() if p["metadata"]["name"] not in owners]

        await rig.wait_for(lambda: len(new_pods()) == 6, timeout=15, what="6 new pods")
        spares = new_pods()
        for pod in spares:
            placed = pod["metadata"]["annotations"].get(names.PLACED, "")
            assert placed, f"{pod['metadata']['name']} not placed by the webhook"
        on_spot = [p for p in spares if required_pools(p) == [[SPOT]]]
        on_demand = [p for p in spares if required_pools(p) == [[ON_DEMAND]]]
        assert (len(on_spot), len(on_demand)) == (4, 2), [required_pools(p) for p in spares]
        zones = Counter(z for p in on_spot for z in required_zones(p))
        assert zones == Counter({"eastus-1": 2, "eastus-2": 1, "eastus-3": 1})
        for pod in on_spot:
            assert (
                pod["metadata"]["annotations"][names.PLACED] == f"{SPOT}/{required_zones(pod)[0]}"
            )
        fallback = {p["metadata"]["name"] for p in on_demand}

        # The fallback serves: on the on-demand pool, Ready; the spot spares wait for capacity.
        def fallback_ready() -> bool:
            pods = [p for p in rig.pods() if p["metadata"]["name"] in fallback]
            return len(pods) == 2 and all(ready(p) for p in pods)

        await rig.wait_for(fallback_ready, timeout=20, what="the on-demand fallback Ready")
        for pod in rig.pods():
            if pod["metadata"]["name"] in fallback:
                assert rig.pool_of(pod["spec"]["nodeName"]) == ON_DEMAND
        await rig.more_passes("controller-0", 2)  # nothing to do while spot has no room
        assert rig.deployment()["spec"]["replicas"] == 9
        assert sum(1 for p in rig.pods() if not p["spec"].get("nodeName")) == 4

        # Their model loads take different times: a second apart (kwok's pod-ready delay), so
        # passes see some Ready while others load (a scale-down then would remove one loading).
        waiting = sorted(p["metadata"]["name"] for p in on_spot)
        for seconds, name in enumerate(waiting, start=3):
            await api.request(
                "PATCH", f"/api/v1/namespaces/inference/pods/{name}",
                {"metadata": {"annotations": {KWOK_READY_DELAY: f"{seconds}s"}}},
                content_type=MERGE,
            )  # fmt: skip
        # Spot capacity arrives: one node per waiting spare, in its zone.
        added = [
            await rig.add_node(SPOT, index, zone=zone, cordoned=True)
            for index, zone in NEW_SPOT.items()
        ]
        for name in added:
            await api.request(
                "PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": None}},
                content_type=MERGE,
            )  # fmt: skip

        await rig.wait_for(
            lambda: all(p["spec"].get("nodeName") for p in rig.pods()),
            timeout=10,
            what="the spot spares scheduled",
        )
        # The on-demand replicas go once the 7 on spot are Ready: lowest deletion cost first,
        # then the count back to 7.
        await rig.wait_for(
            lambda: rig.deployment()["spec"]["replicas"] == 7 and len(rig.pods()) == 7,
            timeout=30,
            what="the fallback given back",
        )
        await rig.wait_for(lambda: rig.ready_count() == 7, timeout=15, what="7 Ready")
    assert spot_zones(rig) == Counter({"eastus-1": 3, "eastus-2": 2, "eastus-3": 2})
    assert record(rig) == Spare(base=3, added=4, spot=7)
    # Removed: gone, or still terminating (the last state each was seen in).
    pods = rig.namespaced["pods"]  # the inference namespace's
    terminating = [p for p in pods.items.values() if p["metadata"].get("deletionTimestamp")]
    gone = [*pods.gone.values(), *terminating]
    assert {p["metadata"]["name"] for p in gone} == fallback, "a spot replica was removed"
    for pod in gone:
        assert pod["metadata"]["annotations"].get(names.DELETION_COST) == LOWEST
    # Make-before-break: never fewer than the owner's 3 Ready, never more than the plan's 9.
    assert rig.min_ready[("inference", "llm")] >= 3
    assert rig.max_replicas[("inference", "llm")] == 9
    await rig.more_passes("controller-0", 2)  # and it stays there
    assert rig.deployment()["spec"]["replicas"] == 7
    assert len(rig.pods()) == 7

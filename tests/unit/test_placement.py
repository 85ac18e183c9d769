"""Placement by policy: the annotations' schema, the choice for one new pod, the admission answer."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest
import structlog

from rebalancer import names
from rebalancer.controller.actions import RecordPolicy, ScaleUp, SetSpare
from rebalancer.controller.admission import Admitted, View, review
from rebalancer.controller.placement import Decision, Group, Where, affinity_patch, choose
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.policy import Policy, PolicyError, in_force, parse
from rebalancer.controller.pools import Pool
from rebalancer.controller.risk import RiskSettings, assess
from rebalancer.controller.scheduling import Taint
from rebalancer.controller.seal import Sealer
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.webhook import PlacementWebhook
from rebalancer.metrics import ControllerMetrics
from tests.unit.test_planner import (
    NOW,
    TOLERATE_BOTH,
    WATCHED,
    deployment,
    node_json,
    pod,
    snapshot,
)

# ---- the policy's schema ------------------------------------------------------------------------


def test_a_workload_without_policy_annotations_has_none() -> None:
    assert in_force({names.SURGE_ANNOTATION: "{}"}).policy is None


def test_every_field_is_read() -> None:
    policy = parse(
        {
            names.MIN_ON_DEMAND: "1",
            names.SPARE_REPLICAS: "2",
            names.POOLS: "spotb, spota,ondemand",
            names.MAX_RISK: "Medium",
            names.SPREAD: "pool",
            names.FAILOVER_TO: "spot",
        }
    )
    assert policy == Policy(1, 2, ("ondemand", "spota", "spotb"), "medium", "pool", "spot")


def test_an_invalid_policy_names_every_problem() -> None:
    with pytest.raises(PolicyError) as refused:
        parse({names.MIN_ON_DEMAND: "-1", names.MAX_RISK: "extreme", names.POOLS: " , "})
    assert len(refused.value.problems) == 3
    text = str(refused.value)
    assert names.MIN_ON_DEMAND in text and names.MAX_RISK in text and names.POOLS in text


def test_the_last_valid_policy_stays_in_force_when_the_declared_one_is_invalid() -> None:
    last = Policy(min_on_demand=2, max_risk="low")
    result = in_force({names.MIN_ON_DEMAND: "two", names.POLICY_IN_FORCE: last.to_json()})
    assert result.policy == last
    assert "min-on-demand" in result.refused


@pytest.mark.parametrize(
    "record",
    [
        "",
        "[]",
        '{"min_on_demand": 1}',
        "x" * 5000,
        json.dumps({**Policy().__dict__, "spare": True}),
    ],
)
def test_a_record_we_would_not_have_written_is_no_policy(record: str) -> None:
    assert in_force({names.MAX_RISK: "huge", names.POLICY_IN_FORCE: record}).policy is None


def test_a_policy_record_reads_back() -> None:
    policy = Policy(1, 0, ("a", "b"), "low", "none", "on-demand")
    assert Policy.from_json(policy.to_json()) == policy


def test_a_targets_policy_record_reads_back() -> None:
    # Its record says spare 0, which the annotations may not say beside a target.
    policy = parse({names.AVAILABILITY_TARGET: "99.9", names.MAX_RISK: "medium"})
    assert Policy.from_json(policy.to_json()) == policy


# ---- the choice for one pod --------------------------------------------------------------------

SPOT_A = Pool("spota", True, (Taint("kubernetes.azure.com/scalesetpriority", "spot"),), {}, ())
SPOT_B = Pool("spotb", True, (Taint("kubernetes.azure.com/scalesetpriority", "spot"),), {}, ())
ON_DEMAND = Pool("ondemand", False, (), {}, ())
GROUPS = [
    Group("spota", "eastus-1", "low", 0.02),
    Group("spota", "eastus-2", "medium", 0.08),
    Group("spotb", "eastus-3", "high", 0.3),
]


def decide(policy: Policy, counts: dict[tuple[str, str], int] | None = None, **kw: Any) -> Decision:
    counts = counts or {}
    on_demand = sum(n for (pool, _), n in counts.items() if pool == "ondemand")
    args: dict[str, Any] = {
        "fits": [SPOT_A, SPOT_B, ON_DEMAND],
        "groups": GROUPS,
        "where": Where(counts, on_demand),
        "failing_over": False,
        "evicting": set(),
    }
    args.update(kw)
    decision = choose(policy, **args)
    assert decision is not None
    return decision


def test_spot_replicas_spread_over_zones_then_by_risk() -> None:
    # Empty: every zone has 0; the lowest risk wins.
    assert decide(Policy()).placed == "spota/eastus-1"
    # One in eastus-1: eastus-2 and eastus-3 have none; eastus-2 is the lower risk of the two.
    assert decide(Policy(), {("spota", "eastus-1"): 1}).placed == "spota/eastus-2"
    # One in each of the first two zones: eastus-3 is the only empty zone.
    counts = {("spota", "eastus-1"): 1, ("spota", "eastus-2"): 1}
    assert decide(Policy(), counts).placed == "spotb/eastus-3"


def test_max_risk_keeps_replicas_off_riskier_groups_and_falls_back_to_on_demand() -> None:
    counts = {("spota", "eastus-1"): 1}
    assert decide(Policy(max_risk="medium"), counts).placed == "spota/eastus-2"
    low = decide(Policy(max_risk="low"), counts)
    assert low.placed == "spota/eastus-1"  # the only low group, although it has one already
    no_spot = decide(Policy(max_risk="low"), evicting={("spota", "eastus-1")})
    assert (no_spot.pool, no_spot.spot) == ("ondemand", False)
    assert "under notice" in no_spot.reason


def test_a_replacement_goes_to_on_demand_unless_the_policy_sends_it_to_spot() -> None:
    assert decide(Policy(), failing_over=True).pool == "ondemand"
    # To spot, it avoids the groups under notice.
    spot = decide(Policy(failover_to="spot"), failing_over=True, evicting={("spota", "eastus-1")})
    assert spot.placed == "spota/eastus-2"


def test_min_on_demand_comes_before_spot() -> None:
    assert decide(Policy(min_on_demand=1)).pool == "ondemand"
    placed = decide(Policy(min_on_demand=1), {("ondemand", ""): 1})
    assert placed.spot


def test_the_allowed_pools_limit_the_choice_and_none_allowed_means_no_decision() -> None:
    assert decide(Policy(pools=("spotb", "ondemand"))).pool == "spotb"
    assert (
        choose(
            Policy(pools=("elsewhere",)),
            fits=[SPOT_A, ON_DEMAND],
            groups=GROUPS,
            where=Where({}, 0),
            failing_over=False,
            evicting=set(),
        )
        is None
    )


def apply_adds(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 "add" on object members, the only operation the webhook sends."""
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = doc
        for part in parents:
            target = target[part]
        target[last] = op["value"]
    return doc


def test_on_demand_is_required_in_each_of_the_pods_own_terms() -> None:
    own = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    other = {"matchExpressions": [{"key": "big", "operator": "Exists"}]}
    pod_json = {
        "metadata": {},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [own, other]
                    }
                }
            }
        },
    }
    decision = Decision("ondemand", "", False, "why")
    patched = apply_adds(json.loads(json.dumps(pod_json)), affinity_patch(pod_json, decision))
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    pool = {"key": names.AKS_AGENTPOOL_LABEL, "operator": "In", "values": ["ondemand"]}
    assert terms == [
        {"matchExpressions": [own["matchExpressions"][0], pool]},
        {"matchExpressions": [other["matchExpressions"][0], pool]},
    ]
    assert patched["metadata"]["annotations"] == {names.PLACED: "ondemand/"}
    assert (
        pod_json["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"][0]
        == own
    )  # the input is not changed


def test_spot_is_a_preferred_term_for_the_pool_and_zone() -> None:
    pod_json: dict[str, Any] = {"metadata": {"annotations": {"a": "b"}}, "spec": {}}
    patched = apply_adds(
        pod_json, affinity_patch(pod_json, Decision("spota", "eastus-2", True, ""))
    )
    preferred = patched["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred == [
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [
                    {"key": names.AKS_AGENTPOOL_LABEL, "operator": "In", "values": ["spota"]},
                    {"key": names.ZONE_LABEL, "operator": "In", "values": ["eastus-2"]},
                ]
            },
        }
    ]
    assert patched["metadata"]["annotations"] == {"a": "b", names.PLACED: "spota/eastus-2"}


# ---- the admission answer ----------------------------------------------------------------------


def cluster(policy: dict[str, str] | None, **workload_kw: Any) -> Snapshot:
    nodes = [
        node_json("spot-0", pool="spota", zone="eastus-1"),
        node_json("spot-1", pool="spota", zone="eastus-2"),
        node_json("od-0", pool="ondemand", spot=False),
    ]
    pods = [pod("infer-1", "spot-0")]
    return snapshot(nodes, pods, [deployment(annotations=policy, **workload_kw)])


def view_of(state: Snapshot) -> View:
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    return View(state, risks)


def request(uid: str = "r1", *, owner: str = "infer-abc", **extra: Any) -> dict[str, Any]:
    pod_json = {
        "metadata": {
            "generateName": "infer-abc-",
            "namespace": "ml",
            "labels": {"app": "infer"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": True}],
        },
        "spec": {
            **TOLERATE_BOTH,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    body = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml",
        "object": pod_json,
    }
    body.update(extra)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["response"]["patchType"] == "JSONPatch"
    return list(json.loads(base64.b64decode(response["response"]["patch"])))


def test_a_pod_of_a_workload_with_a_policy_is_placed_in_the_empty_zone() -> None:
    view = view_of(cluster({names.SPREAD: "zone"}))
    result = review(request(), view, [])
    assert result.outcome == "placed"
    assert result.response["response"]["uid"] == "r1"
    assert result.response["response"]["allowed"] is True
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    assert patched["metadata"]["annotations"][names.PLACED] == "spota/eastus-2"
    assert "1 replicas in zone" not in patched["metadata"]["annotations"][names.PLACED_WHY]


INFER = ("Deployment", "ml", "infer")


def test_pods_placed_that_the_view_lacks_count_so_a_burst_spreads() -> None:
    view = view_of(cluster({names.SPREAD: "zone"}))
    made = Admitted(NOW, INFER, "spota", "eastus-2", True, "r0")
    result = review(request(), view, [made])
    # eastus-1 has the running pod, eastus-2 the admitted one: a tie, broken by risk (the same
    # prior in both) then by name.
    assert result.decision is not None and result.decision.placed == "spota/eastus-1"
    # Placed before the view was built, but its pod is not in it yet (the watch brings it after
    # the pass): it still counts. The real API server showed this: two pods of one burst, both
    # sent to on-demand under min-on-demand 1.
    older = Admitted(NOW.replace(year=2025), INFER, "spota", "eastus-2", True, "r0")
    assert review(request(), view, [older]).decision == result.decision


def test_a_placement_the_view_shows_counts_once() -> None:
    state = cluster({names.SPREAD: "zone"})  # infer-1 in eastus-1
    more = [
        pod("infer-2", "spot-0"),
        pod("infer-3", "spot-1", annotations={names.PLACED_REVIEW: "r0"}),  # eastus-2
    ]
    view = view_of(replace(state, pods={**state.pods, **{p.key: p for p in more}}))
    made = Admitted(NOW, INFER, "spota", "eastus-2", True, "r0")
    # Two in eastus-1, one in eastus-2 (the admitted one, counted once): eastus-2.
    result = review(request(), view, [made])
    assert result.decision is not None and result.decision.placed == "spota/eastus-2"


def test_a_placed_pod_that_came_and_went_is_not_counted_again() -> None:
    """Shown by a pass, then deleted (a scale-down, an eviction) within RECENT_SECONDS: counted
    neither by the views nor by the webhook's record (on the real control plane a deleted spot
    replica counted as kept, so a target's swap sent its replacement to on-demand again)."""
    state = cluster({names.SPREAD: "zone"})  # infer-1 in eastus-1
    views = {"now": view_of(state)}
    hook = PlacementWebhook(
        lambda: views["now"], metrics=ControllerMetrics(), now=lambda: NOW,
        log=structlog.get_logger(),
    )  # fmt: skip
    hook.answer(request("r0"))  # to the empty zone, eastus-2
    shown = pod("infer-2", "spot-1", annotations={names.PLACED_REVIEW: "r0"})
    hook.forget_shown(view_of(replace(state, pods={**state.pods, shown.key: shown})))
    assert list(hook.admitted) == []
    # The pod is gone: eastus-2 is empty again (counted, it would tie and eastus-1 come first).
    patched = apply_adds(request("r1")["request"]["object"], patch_of(hook.answer(request("r1"))))
    assert patched["metadata"]["annotations"][names.PLACED] == "spota/eastus-2"


def test_the_pod_carries_the_review_that_placed_it() -> None:
    result = review(request("r7"), view_of(cluster({names.SPREAD: "zone"})), [])
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    assert patched["metadata"]["annotations"][names.PLACED_REVIEW] == "r7"
    assert not result.dry_run


def test_a_server_side_dry_run_is_answered_but_marked() -> None:
    view = view_of(cluster({names.SPREAD: "zone"}))
    result = review(request(dryRun=True), view, [])
    assert result.outcome == "placed" and result.dry_run
    assert result.response == review(request(), view, []).response


@pytest.mark.parametrize(
    ("policy", "body", "outcome"),
    [
        (None, request(), "no_policy"),
        ({names.SPREAD: "zone"}, request(owner="someone-else"), "placed"),  # by selector
        ({names.SPREAD: "zone"}, request(operation="UPDATE"), "not_pod"),
        ({names.SPREAD: "zone"}, {"request": {"uid": 7}}, "bad_request"),
        ({names.POOLS: "nowhere"}, request(), "no_fit"),
        ({names.SPREAD: "zone", names.OPT_OUT_ANNOTATION: "true"}, request(), "no_policy"),
    ],
)
def test_everything_else_is_allowed_unchanged(
    policy: dict[str, str] | None, body: dict[str, Any], outcome: str
) -> None:
    result = review(body, view_of(cluster(policy)), [])
    assert result.outcome == outcome
    if outcome not in {"placed", "bad_request"}:
        assert result.response["response"] == {"uid": body["request"]["uid"], "allowed": True}


def test_no_view_yet_allows_unchanged() -> None:
    assert review(request(), None, []).outcome == "not_ready"


def test_a_replacement_created_by_this_pass_s_surge_goes_on_demand() -> None:
    """The ReplicaSet creates a surge's replacements within milliseconds of the write, before
    the next pass shows the surge record: the view of the pass that surged says so itself
    (seen on the emulator: both replacements of a wave were spread on spot)."""
    state = snapshot(
        [
            node_json("spot-0", pool="spota", zone="eastus-1", notice_seconds=30),
            node_json("spot-1", pool="spota", zone="eastus-2"),
            node_json("od-0", pool="ondemand", spot=False),
        ],
        [pod("infer-1", "spot-0")],
        [deployment(replicas=1, annotations={names.SPREAD: "zone"})],
    )
    decided = plan(state, Settings())
    assert [a.workload for a in decided.actions if isinstance(a, ScaleUp)] == [
        ("Deployment", "ml", "infer")
    ]
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    view = View.of_pass(state, decided.actions, risks=risks, declared={})
    result = review(request(), view, [])
    assert result.decision is not None and result.decision.pool == "ondemand", result.decision
    assert "replacement for a replica under notice" in result.decision.reason
    # Without the pass's surge, the same snapshot spreads it on spot (eastus-1 is under notice).
    before = review(request(), View(state, risks), [])
    assert before.decision is not None and before.decision.placed == "spota/eastus-2"


def test_a_new_replica_of_this_pass_s_target_plan_is_placed_by_the_plan() -> None:
    """Likewise the replicas a target's plan adds: the first one was placed as if there were no
    plan on the real control plane (tests/k8s/test_target.py), preferred on spot, not required
    on the zone the plan's spread gives it."""
    state = cluster({names.AVAILABILITY_TARGET: "99.9"}, replicas=1)
    decided = plan(state, Settings())
    (spare,) = [a for a in decided.actions if isinstance(a, SetSpare)]
    assert spare.record is not None and spare.record.spot
    risks = assess(nodes=state.nodes.values(), history=WATCHED, now=NOW, settings=RiskSettings())
    view = View.of_pass(state, decided.actions, risks=risks, declared={})
    result = review(request(), view, [])
    assert result.decision is not None, result
    assert result.decision.reason.startswith("availability target 99.9 %"), result.decision
    assert result.decision.required_pools == ("spota",)
    # Without the pass's record, the same snapshot has no plan yet: spot, only preferred.
    before = review(request(), View(state, risks), [])
    assert before.decision is not None and before.decision.required_pools == ()


# ---- the policy in force, recorded by the planner -----------------------------------------------


def recorded(state: Snapshot) -> list[RecordPolicy]:
    return [a for a in plan(state, Settings()).actions if isinstance(a, RecordPolicy)]


def test_a_valid_policy_is_recorded_once_and_an_invalid_edit_records_nothing() -> None:
    valid = {names.MIN_ON_DEMAND: "1"}
    (first,) = recorded(cluster(valid))
    assert first.policy == Policy(min_on_demand=1).to_json()
    assert recorded(cluster({**valid, names.POLICY_IN_FORCE: first.policy})) == []
    invalid = {names.MIN_ON_DEMAND: "one", names.POLICY_IN_FORCE: first.policy}
    assert recorded(cluster(invalid)) == []  # the last valid one stays


def test_the_record_as_written_with_its_seal_is_not_written_again() -> None:
    # The executor seals what it writes: the planner must see its own record in it, else it
    # writes it every pass, and each write wakes the next pass.
    (first,) = recorded(cluster({names.MIN_ON_DEMAND: "1"}))
    assert first.policy is not None
    sealed = Sealer(b"k" * 32).seal("Deployment/ml/llm/uid", names.POLICY_IN_FORCE, first.policy)
    assert sealed != first.policy
    assert recorded(cluster({names.MIN_ON_DEMAND: "1", names.POLICY_IN_FORCE: sealed})) == []


def test_the_record_goes_when_the_policy_annotations_go() -> None:
    (dropped,) = recorded(cluster({names.POLICY_IN_FORCE: Policy().to_json()}))
    assert dropped.policy is None
    assert dropped.patch() == {"metadata": {"annotations": {names.POLICY_IN_FORCE: None}}}

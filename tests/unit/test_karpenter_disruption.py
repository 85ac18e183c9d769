"""Karpenter's `karpenter.sh/disrupted:NoSchedule` taint (drift, consolidation, expiry, repair)
read as a notice: the replicas there are replaced make-before-break, while Karpenter's own drain,
which the surge's hold makes wait, takes the node; the controller evicts nothing there itself."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.actions import (
    Cordon,
    Delete,
    EndLoadHold,
    Evict,
    MarkDrained,
    RecordHistory,
    ReportBlocked,
    ScaleUp,
    StartCooldown,
)
from rebalancer.controller.admission import View, review
from rebalancer.controller.planner import Settings, plan
from rebalancer.notices import OPEN_ENDED, karpenter_only, notices_of
from rebalancer.vocabulary import KARPENTER_DISRUPTION, Source
from tests.unit.test_placement import apply_adds, patch_of, request, view_of
from tests.unit.test_planner import deployment, node_json, pod, snapshot

DISRUPTED = {"key": names.KARPENTER_DISRUPTED_TAINT, "effect": "NoSchedule"}


def disrupted(node: dict[str, Any]) -> dict[str, Any]:
    node["spec"]["taints"] = [*node["spec"]["taints"], DISRUPTED]
    return node


@pytest.mark.parametrize(
    ("taint", "notice"),
    [
        (DISRUPTED, True),
        ({**DISRUPTED, "effect": "NoExecute"}, False),  # not Karpenter's
        ({"key": "karpenter.sh/unregistered", "effect": "NoExecute"}, False),
    ],
)
def test_the_disrupted_taint_is_an_open_ended_notice(taint: dict[str, str], notice: bool) -> None:
    node = node_json("spot-0")
    node["spec"]["taints"] = [*node["spec"]["taints"], taint]
    found = notices_of(node).notices
    if not notice:
        assert found == ()
        return
    (only,) = found
    assert (only.event_type, only.source, only.event_id) == (
        KARPENTER_DISRUPTION, Source.KARPENTER, "KARPENTER-SPOT-0",
    )  # fmt: skip
    # No clock of ours: never near, never "act now"; Karpenter's drain decides.
    assert only.deadline == OPEN_ENDED and only.open_ended and not only.act_now
    assert karpenter_only([only.event_id]) and not karpenter_only([only.event_id, "A1B2"])


def test_a_preempt_on_the_same_node_is_the_one_acted_on() -> None:
    node = disrupted(node_json("spot-0", notice_seconds=30))
    notices = notices_of(node).notices
    assert [n.source for n in notices] == [Source.AGENT, Source.KARPENTER]


def state_with_one_disrupted_node() -> Any:
    # No on-demand pool at all: a fail-over would be blocked, a replacement in place is not.
    return snapshot(
        [disrupted(node_json("spot-0")), node_json("spot-1", zone="eastus-2")],
        [pod("infer-1", "spot-0"), pod("infer-2", "spot-1"), pod("other", "spot-0", owner=None)],
        [deployment(replicas=2, annotations={names.SPREAD: "zone"})],
    )


def test_karpenters_disruption_surges_and_leaves_the_drain_to_karpenter() -> None:
    actions = plan(state_with_one_disrupted_node(), Settings()).actions
    kinds = {type(a) for a in actions}
    (surge,) = [a for a in actions if isinstance(a, ScaleUp)]
    assert (surge.replicas, surge.record and surge.record.doomed_pods) == (3, ("ml/infer-1",))
    assert Cordon in kinds
    # Karpenter drains (do-not-disrupt and budgets respected); no Azure event to acknowledge;
    # no spot eviction to record or to cool the pool down for; no on-demand pool needed.
    assert not kinds & {Evict, Delete, MarkDrained, StartCooldown, ReportBlocked}
    assert not any(isinstance(a, RecordHistory) and a.history.entries for a in actions)


def test_its_replacement_is_placed_as_a_new_replica_and_held_until_ready() -> None:
    state = state_with_one_disrupted_node()
    decided = plan(state, Settings())
    view = View.of_pass(state, decided.actions, risks=view_of(state).risks, declared={})
    result = review(request(), view, [])
    assert result.decision is not None and result.decision.spot, result.decision
    patched = apply_adds(request()["request"]["object"], patch_of(result.response))
    annotations = patched["metadata"]["annotations"]
    assert annotations[names.KARPENTER_DO_NOT_DISRUPT] == "true"
    assert annotations[names.HELD_UNTIL_READY] == "true"
    # Once Ready, its hold stays until the surge is over (the doomed replica gone first).
    loaded = pod("infer-3", "spot-1", annotations=annotations)
    surged = snapshot(
        [disrupted(node_json("spot-0")), node_json("spot-1", zone="eastus-2")],
        [pod("infer-1", "spot-0"), pod("infer-2", "spot-1"), loaded],
        [deployment(replicas=3, surge=decided_surge(decided.actions))],
    )
    assert not [a for a in plan(surged, Settings()).actions if isinstance(a, EndLoadHold)]


def decided_surge(actions: Any) -> Any:
    (surge,) = [a for a in actions if isinstance(a, ScaleUp)]
    return surge.record

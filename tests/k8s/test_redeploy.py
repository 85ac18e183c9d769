"""A Redeploy end to end on the real control plane (issue 13): the scenario of
tests/virtual/test_realism.py's Reboot/Redeploy test, with Azure played by the rig.

Azure moves the VM to another host: IMDS announces the event; the controller drains the node
(the default policy for a Redeploy); the agent acknowledges once it is drained, so Azure starts
at once; the VM is off for a few seconds (its agent too; the Node NotReady, as the node lifecycle
controller marks a silent kubelet) and comes back on the new host with the same name and the
same Node, when the event leaves the IMDS document. Then our cordon and taint must go.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rebalancer import names
from rebalancer.vocabulary import DEFAULT_EVENT_POLICY, EventType, NoticePolicy
from tests.e2e.rig import sampling
from tests.k8s.rig import KubeRig, schedulable

pytestmark = pytest.mark.k8s

NOTICE_SECONDS = 20.0  # Azure gives at least 10 minutes; the drain needs a few seconds
DOWN_SECONDS = 5.0  # the VM off while it moves
LOAD_SECONDS = 3.0  # a replica's start-up (kwok's pod-ready delay)
# What the processes may add to the replacement's load: the agent's 1 s IMDS poll, a planning
# pass (resync 1 s), the eviction, the ReplicaSet controller, kube-scheduler and kwok, sampling.
REACTION_SECONDS = 4.0
OUR_TAINT = f"{names.PREFIX}/evicting"


def ours(node: dict[str, Any]) -> dict[str, Any]:
    """What of ours is on the node: cordon, taints, labels, annotations (the agent's published
    events excepted: it keeps those)."""
    meta, spec = node["metadata"], node["spec"]
    return {
        "unschedulable": bool(spec.get("unschedulable")),
        "taints": [t["key"] for t in spec.get("taints") or [] if t["key"] == OUR_TAINT],
        "labels": [
            k for k in meta.get("labels", {})
            if k == "node.kubernetes.io/exclude-from-external-load-balancers"
        ],
        "annotations": [
            k for k in meta.get("annotations", {})
            if k.startswith(names.PREFIX) and k != names.EVENTS_ANNOTATION
        ],
    }  # fmt: skip


NOTHING_OF_OURS = {"unschedulable": False, "taints": [], "labels": [], "annotations": []}


async def test_a_redeployed_node_is_drained_and_uncordoned_once_it_is_back(rig: KubeRig) -> None:
    assert DEFAULT_EVENT_POLICY[EventType.REDEPLOY] == NoticePolicy.DRAIN  # what is expected below
    await rig.deploy(startup_seconds=LOAD_SECONDS)
    rig.start_agents()
    rig.start_controller()
    await rig.until_ready()
    moved = sorted(p["spec"]["nodeName"] for p in rig.pods())[0]
    before = rig.node(moved)
    assert before is not None
    async with sampling(rig):
        event = rig.redeploy(moved, notice_seconds=NOTICE_SECONDS, down_seconds=DOWN_SECONDS)
        await rig.wait_for(
            lambda: rig.drained_for(moved) == event.event_id,
            timeout=NOTICE_SECONDS,
            what="the node drained",
        )
        drained = time.time()
        assert drained < event.not_before.timestamp(), "drained after NotBefore"
        assert not [p for p in rig.pods() if p["spec"].get("nodeName") == moved]
        # The agent acknowledges the drained node: Azure starts at once, the VM goes off.
        await rig.wait_for(lambda: not schedulable(rig.node(moved)), timeout=10, what="the VM off")
        node = rig.node(moved)
        assert node is not None and ours(node)["unschedulable"] and ours(node)["taints"]
        await rig.wait_for(
            lambda: ours(rig.node(moved) or before) == NOTHING_OF_OURS,
            timeout=DOWN_SECONDS + 20,
            what="our cordon, taint, label and annotations undone",
        )
        undone = rig.imds.clock.now()
        await rig.wait_for(lambda: rig.ready_count() == 3, timeout=15, what="3 Ready replicas")
    # Undone only once the event was over (gone from the IMDS document), on the same Node, back.
    assert event.state(undone) == "finished"
    assert event.acknowledged_by, "Azure started before NotBefore only if acknowledged"
    node = rig.node(moved)
    assert node is not None and schedulable(node)
    assert node["metadata"]["uid"] == before["metadata"]["uid"], "a new Node, not the same VM"
    # Policy drain: no surge. The replica is evicted before a replacement exists (the PDB's
    # maxUnavailable 1 allows it), so one replica is missing for its load, and no more.
    assert rig.max_replicas[("inference", "llm")] == 3
    assert rig.min_ready[("inference", "llm")] == 2
    deficit = rig.deficit[("inference", "llm")].replica_seconds
    # (Less 0.2 s below: the sampling's 20 ms and the watch's latency may shave a little off.)
    assert LOAD_SECONDS - 0.2 <= deficit < LOAD_SECONDS + REACTION_SECONDS, deficit
    assert rig.deployment()["spec"]["replicas"] == 3

    # The agent that started with the VM again says the event ran (it was acknowledged): at its
    # first poll, which on a loaded machine may come after the controller has undone its marks.
    def said() -> tuple[str, str] | None:
        back = rig.node(moved)
        conditions = (back or {}).get("status", {}).get("conditions", [])
        ours_ = [c for c in conditions if c["type"] == names.CONDITION_TYPE]
        return (ours_[0]["status"], ours_[0]["reason"]) if ours_ else None

    await rig.wait_for(
        lambda: said() == ("False", "EventCompleted"), timeout=10, what="the agent's EventCompleted"
    )
    await rig.wait_for(
        lambda: rig.events("SpotRebalancerRestored"), timeout=5, what="the Restored Event"
    )
    assert not rig.events("SpotRebalancerSurge")
    for reason in ("SpotRebalancerCordoned", "SpotRebalancerDrained", "SpotRebalancerRestored"):
        assert [e["involvedObject"]["name"] for e in rig.events(reason)] == [moved], reason

"""The drain of a node under notice: evict, delete at the deadline, mark it drained."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from rebalancer import names
from rebalancer.controller.actions import Action, Delete, Evict, MarkDrained
from rebalancer.controller.contain import Containment, on_node
from rebalancer.controller.model import PodInfo
from rebalancer.controller.planning.notices import deadline_near, grace_for
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import doomed
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.notices import Notice
from rebalancer.vocabulary import Source


def drain(
    snapshot: Snapshot,
    settings: Settings,
    active: Mapping[str, Notice],
    surged: frozenset[tuple[str, str]],
    contain: Containment,
) -> Proposal:
    """Evict everything else on a node under notice (StatefulSet replicas at once: a replacement
    with the same name can only start once the old pod is gone); delete what remains at the
    deadline minus the margin with a grace period that fits the time left; mark the node drained
    for the event once it is empty (the agent then acknowledges it to Azure). The pods a surge
    replaces (`surged`) are left to its scale-back. A node Karpenter disrupts is drained by
    Karpenter itself (PodDisruptionBudgets and do-not-disrupt respected, until its NodeClaim's
    `terminationGracePeriod`): evicting for it would only take do-not-disrupt pods early, and
    there is no Azure event to acknowledge."""
    actions: list[Action] = []
    for node_name, notice in sorted(active.items()):
        if notice.source == Source.KARPENTER:
            continue
        actions += contain.run(
            "drain",
            on_node(node_name),
            [],
            _drain_one,
            snapshot,
            settings,
            node_name,
            notice,
            surged,
        )
    return Proposal.of(actions)


def _drain_one(
    snapshot: Snapshot,
    settings: Settings,
    node_name: str,
    notice: Notice,
    surged: frozenset[tuple[str, str]],
) -> list[Action]:
    actions: list[Action] = []
    node = snapshot.nodes[node_name]
    on_node = snapshot.pods_by_node.get(node_name, [])
    remaining = [pod for pod in on_node if doomed(pod)]
    near = deadline_near(notice, snapshot.now, settings)
    for pod in remaining:
        if pod.key in surged:
            continue  # replaced make-before-break; removed by the scale-back
        grace = grace_for(pod, notice, snapshot.now, settings)
        if near:
            actions.append(Delete(pod.key, pod.uid, node_name, notice.event_id, grace))
        else:
            # A grace period longer than the time left is cut to fit: the pod must be gone
            # before Azure takes the VM, not merely terminating.
            shorter = grace if grace < pod.grace_seconds else None
            actions.append(
                Evict(pod.key, pod.uid, node_name, notice.event_id, grace_seconds=shorter)
            )
    for pod in on_node:
        if _terminates_too_late(pod, notice, snapshot.now, settings):
            # Already terminating (evicted by someone else, scaled away) with a grace period
            # that ends after the deadline: a second delete may shorten it, never lengthen it.
            grace = grace_for(pod, notice, snapshot.now, settings)
            actions.append(Delete(pod.key, pod.uid, node_name, notice.event_id, grace))
    drained_for = node.annotations.get(names.DRAINED_FOR_ANNOTATION, "")
    marked = {part.strip().upper() for part in drained_for.split(",") if part.strip()}
    # Drained means gone, not merely terminating: Azure may take the VM once we say so.
    terminating = any(pod.deleting and not pod.daemonset for pod in on_node)
    if not remaining and not terminating and notice.event_id.upper() not in marked:
        actions.append(MarkDrained(node_name, notice.event_id, basis=node.as_json(), uid=node.uid))
    return actions


def _terminates_too_late(pod: PodInfo, notice: Notice, now: datetime, settings: Settings) -> bool:
    """A terminating pod that will still run when the node must be empty: one second before the
    deadline, or, to act now, after the short grace period deletions then get (`grace_for`)."""
    if not pod.deleting or pod.daemonset or pod.mirror or pod.deletion_at is None:
        return False
    if notice.act_now or notice.deadline is None:
        return pod.deletion_at > now + timedelta(seconds=settings.act_now_grace_seconds + 1)
    return pod.deletion_at > notice.deadline - timedelta(seconds=1)

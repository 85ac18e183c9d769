"""Holds: our PodDisruptionBudget on a surged Deployment while its replacements load, so that
no one else evicts the replicas that still serve."""

from __future__ import annotations

from rebalancer import names
from rebalancer.controller.actions import Action, Hold, Release, ScaleUp
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.model import NodeInfo, WorkloadInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import managed
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.vocabulary import Reason


def holds(
    snapshot: Snapshot, settings: Settings, surge: Proposal, contain: Containment
) -> Proposal:
    return Proposal.of(
        contain.run("hold", about("holds"), [], _holds, snapshot, settings, surge.actions)
    )


def _holds(snapshot: Snapshot, settings: Settings, planned: tuple[Action, ...]) -> list[Action]:
    """While a surge's replacements load, a PodDisruptionBudget of ours (maxUnavailable 0, the
    Deployment's own selector) holds its pods: an eviction by anyone else (AKS node auto-drain
    evicts at notice time; kubectl drain; the cluster autoscaler) is refused, so the old
    replicas serve until the replacements are Ready. Our own removals are deletions, which no
    budget stops. One write per surged Deployment, none per pod: a wave's cordons come first.
    A hold whose surge is over is released."""
    held: dict[tuple[str, str], WorkloadInfo] = {}
    for workload in snapshot.workloads.values():
        surge = workload.surge
        if surge is not None and not surge.completed and workload.kind == "Deployment":
            held[(workload.namespace, workload.name)] = workload
    for action in planned:  # surges this pass starts: hold at once, AKS's drain starts now too
        if isinstance(action, ScaleUp):
            workload = snapshot.workloads[action.workload]
            held[(workload.namespace, workload.name)] = workload
    if not settings.hold_doomed_pods:
        held = {}
    standing = _held_before_notice(snapshot, settings) if settings.hold_before_notice else {}
    actions: list[Action] = []
    existing = {(h.namespace, h.workload) for h in snapshot.holds.values()}
    for (namespace, name), workload in sorted({**standing, **held}.items()):
        if (namespace, name) not in existing and workload.selector:
            reason = Reason.NOTICE if (namespace, name) in held else Reason.HOLD_BEFORE_NOTICE
            actions.append(Hold(namespace, name, workload.selector, reason=reason))
    held = {**standing, **held}
    for hold in sorted(snapshot.holds.values(), key=lambda h: h.key):
        if (hold.namespace, hold.workload) not in held:
            actions.append(Release(hold.namespace, hold.name))
    return actions


def _held_before_notice(
    snapshot: Snapshot, settings: Settings
) -> dict[tuple[str, str], WorkloadInfo]:
    """With `hold_before_notice`, every managed Deployment with a replica on spot is held all
    the time: AKS node auto-drain may evict at notice time, before our agent has seen the
    notice, and a user's PDB that allows one disruption lets it. The hold yields while one of
    its nodes is drained by someone else for another reason (cordoned, not by us, without a
    notice and without AKS auto-drain's taint: an upgrade, `kubectl drain`), which it must not
    block; the cluster autoscaler and Karpenter do not remove its nodes meanwhile (docs)."""
    nodes = snapshot.nodes
    standing: dict[tuple[str, str], WorkloadInfo] = {}
    for workload in snapshot.workloads.values():
        if workload.kind != "Deployment" or not managed(workload, settings):
            continue
        hosts = [
            nodes[p.node_name]
            for p in snapshot.pods_by_workload.get(workload.key, [])
            if p.node_name in nodes and not p.finished
        ]
        if any(n.spot for n in hosts) and not any(_drained_by_others(n) for n in hosts):
            standing[(workload.namespace, workload.name)] = workload
    return standing


def _drained_by_others(node: NodeInfo) -> bool:
    return (
        node.unschedulable
        and not node.notices
        and names.CORDONED_FOR not in node.annotations
        and not any(t.key == names.AKS_REMEDIATOR_TAINT for t in node.taints)
    )

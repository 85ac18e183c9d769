"""HorizontalPodAutoscaler bounds: raised for a surge so that the HPA does not scale it back,
held at the count our spare record keeps (the HPA's own N plus a target's spares and on-demand
cover, or `spare-replicas`), put back exactly when neither needs them."""

from __future__ import annotations

from rebalancer.controller.actions import Action, Bound, ScaleUp, SetSpare
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.model import ScalerInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.snapshot import Snapshot
from rebalancer.vocabulary import Reason


def bounds(
    snapshot: Snapshot, surged: Proposal, spared: Proposal, contain: Containment
) -> Proposal:
    """An HorizontalPodAutoscaler would scale a surged Deployment back within its sync period,
    and a ReplicaSet scaling down removes the not-ready replacements first. While a surge is on,
    the HPA's minReplicas (and maxReplicas, if lower) is raised to the surged count, its own
    values recorded on it; when the surge ends they are put back exactly. The count a spare
    record keeps (a target's or `spare-replicas`; `hpa_count.py`: N is the HPA's own wish) is
    held the same way, at exactly that count within the HPA's own bounds: it rises and falls
    with the plan."""
    surges: dict[tuple[str, str], int] = {}  # (namespace, deployment) -> replicas to keep
    spared_counts: dict[tuple[str, str], int] = {}  # what our spare records keep
    for workload in snapshot.workloads.values():
        if workload.kind != "Deployment":
            continue
        surge, spare = workload.surge, workload.spare
        if surge is not None and not surge.completed:
            surges[(workload.namespace, workload.name)] = surge.base_replicas + surge.added
        if spare is not None and not spare.gave_up:
            spared_counts[(workload.namespace, workload.name)] = spare.base + spare.added
    for action in surged.actions:
        if isinstance(action, ScaleUp):
            _, namespace, name = action.workload
            surges[(namespace, name)] = action.replicas
    for action in spared.actions:
        if isinstance(action, SetSpare):
            _, namespace, name = action.workload
            if action.record is None or action.record.gave_up:
                spared_counts.pop((namespace, name), None)
            else:
                record = action.record
                kept = record.base + record.added if action.replicas is None else action.replicas
                spared_counts[(namespace, name)] = kept
    actions: list[Action] = []
    for scaler in sorted(snapshot.scalers.values(), key=lambda s: s.key):
        kind, target = scaler.target
        where = (scaler.namespace, target)
        deployment = kind == "Deployment"
        actions += contain.run(
            "bound",
            about(f"HorizontalPodAutoscaler {scaler.namespace}/{scaler.name}"),
            [],
            _bound_one,
            scaler,
            surges.get(where) if deployment else None,
            spared_counts.get(where) if deployment else None,
        )
    return Proposal.of(actions)


def _bound_one(scaler: ScalerInfo, surge: int | None, spared: int | None) -> list[Action]:
    basis = (scaler.min_replicas, scaler.max_replicas, scaler.original)
    through = scaler.holder.name if scaler.holder is not None else ""

    def bound(low: int, high: int, original: str | None, reason: Reason) -> list[Action]:
        return [Bound(scaler.namespace, scaler.name, low, high, original, basis, reason, through)]

    if scaler.operated:
        # An operator owns it (KServe; KEDA's ScaledObject while it may scale to zero or is
        # paused) and sets its spec back from its own at once: a raise would only start a
        # fight. A surge is then not held (SurgeNotHeld), no spares are kept (spares.py); a
        # record that is ours (its seal) is put back.
        if scaler.saved is None:
            return []
        return bound(*scaler.own_bounds(), None, Reason.NOTICE)
    original = scaler.saved or f"{scaler.min_replicas},{scaler.max_replicas}"
    if spared is not None:
        # Exactly the spare record's count (and a surge's, if higher), never below the HPA's own.
        own_min, own_max = scaler.own_bounds()
        wanted = max(spared, surge or 0)
        low, high = max(own_min, wanted), max(own_max, wanted)
        if (low, high) == (scaler.min_replicas, scaler.max_replicas):
            return []
        if (low, high) == (own_min, own_max):  # nothing of ours left on it
            return bound(low, high, None, Reason.SPARE)
        return bound(low, high, original, Reason.SPARE)
    if surge is not None:
        if scaler.min_replicas < surge or scaler.max_replicas < surge:
            low, high = max(scaler.min_replicas, surge), max(scaler.max_replicas, surge)
            return bound(low, high, original, Reason.NOTICE)
        return []
    if scaler.original is None:
        return []
    return bound(*scaler.own_bounds(), None, Reason.NOTICE)

"""HorizontalPodAutoscaler bounds: raised for a surge so that the HPA does not scale it back,
put back exactly when the surge ends."""

from __future__ import annotations

from rebalancer.controller.actions import Action, Bound, ScaleUp
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.model import ScalerInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.records import MAX_RECORD_REPLICAS
from rebalancer.controller.snapshot import Snapshot
from rebalancer.strict import whole_number


def bounds(snapshot: Snapshot, surged: Proposal, contain: Containment) -> Proposal:
    """An HorizontalPodAutoscaler would scale a surged Deployment back within its sync period,
    and a ReplicaSet scaling down removes the not-ready replacements first. While a surge is on,
    the HPA's minReplicas (and maxReplicas, if lower) is raised to the surged count, its own
    values recorded on it; when the surge ends they are put back exactly."""
    need: dict[tuple[str, str], int] = {}  # (namespace, deployment) -> replicas to keep
    for workload in snapshot.workloads.values():
        surge = workload.surge
        if surge is not None and not surge.completed and workload.kind == "Deployment":
            need[(workload.namespace, workload.name)] = surge.base_replicas + surge.added
    for action in surged.actions:
        if isinstance(action, ScaleUp):
            _, namespace, name = action.workload
            need[(namespace, name)] = action.replicas
    actions: list[Action] = []
    for scaler in sorted(snapshot.scalers.values(), key=lambda s: s.key):
        kind, target = scaler.target
        wanted = need.get((scaler.namespace, target)) if kind == "Deployment" else None
        actions += contain.run(
            "bound",
            about(f"HorizontalPodAutoscaler {scaler.namespace}/{scaler.name}"),
            [],
            _bound_one,
            scaler,
            wanted,
        )
    return Proposal.of(actions)


def _bound_one(scaler: ScalerInfo, wanted: int | None) -> list[Action]:
    basis = (scaler.min_replicas, scaler.max_replicas, scaler.original)
    if wanted is not None:
        if scaler.min_replicas < wanted or scaler.max_replicas < wanted:
            original = scaler.saved or f"{scaler.min_replicas},{scaler.max_replicas}"
            low, high = max(scaler.min_replicas, wanted), max(scaler.max_replicas, wanted)
            return [Bound(scaler.namespace, scaler.name, low, high, original, basis)]
        return []
    if scaler.original is None:
        return []
    return [Bound(scaler.namespace, scaler.name, *_original_bounds(scaler), None, basis)]


def _original_bounds(scaler: ScalerInfo) -> tuple[int, int]:
    """The bounds we recorded before raising them ("min,max"), read strictly: anyone who may
    annotate the HPA could write "100000,100000" there. Unreadable or not ours (its seal, seal.py):
    today's bounds stay, only the record goes."""
    low, _, high = scaler.saved.partition(",") if scaler.saved else ("", "", "")
    try:
        bounds = (
            whole_number(low, low=1, high=MAX_RECORD_REPLICAS),
            whole_number(high, low=1, high=MAX_RECORD_REPLICAS),
        )
    except ValueError:
        return scaler.min_replicas, scaler.max_replicas
    if bounds[0] > bounds[1]:
        return scaler.min_replicas, scaler.max_replicas
    return bounds

"""Spare replicas (`spare-replicas`, SpotHedge's N + k) and availability targets
(target_plan.py): the count a workload keeps on top of its owner's."""

from __future__ import annotations

from rebalancer import names
from rebalancer.controller.actions import Action, SetSpare, WorkloadBasis
from rebalancer.controller.contain import Containment, on_workload
from rebalancer.controller.hpa_count import hpa_count, metered, scaler_of
from rebalancer.controller.model import ScalerInfo, WorkloadInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.selection import managed, targeted
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.policy import in_force
from rebalancer.controller.records import Spare
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.controller.target_plan import plan_target
from rebalancer.vocabulary import Reason


def spares_absorb(snapshot: Snapshot, workload: WorkloadInfo, doomed: tuple[str, ...]) -> bool:
    """The workload keeps spare replicas and, without the doomed ones, still has at least its
    owner's count Ready."""
    spare = workload.spare
    if spare is None or spare.gave_up or spare.added == 0:
        return False
    ready = [
        p
        for p in snapshot.pods_by_workload.get(workload.key, [])
        if p.ready and not p.deleting and f"{p.namespace}/{p.name}" not in doomed
    ]
    return len(ready) >= spare.base


def spares(
    snapshot: Snapshot, settings: Settings, busy: frozenset[WorkloadKey], contain: Containment
) -> Proposal:
    """Keep a Deployment's `spare-replicas` (its placement policy) on top of its owner's count,
    so that an eviction takes a spare instead of a needed replica (SpotHedge's N + k; the webhook
    spreads them like the others). Our record keeps the owner's count: a new count from the owner
    is a new base; a count set back to exactly the base twice is an owner that resets replicas
    (KServe, an operator), which we stop fighting and report. Not while a surge or a return is
    on it (they own the count for a while). With an HPA, its own wish is the owner's count
    (`hpa_count.py`) and its bounds hold ours (`bounds.py`), unless an operator owns the HPA."""
    actions: list[Action] = []
    for key, workload in sorted(snapshot.workloads.items()):
        actions += contain.run(
            "spares", on_workload(key), [], _spare_one, snapshot, settings, busy, workload
        )
    # A workload with an availability target is placed by its plan, never returned or moved.
    claimed = {a.workload for a in actions if isinstance(a, SetSpare)}
    claimed |= {w.key for w in snapshot.workloads.values() if targeted(w)}
    return Proposal(tuple(actions), workloads=frozenset(claimed))


def _spare_one(
    snapshot: Snapshot, settings: Settings, busy: frozenset[WorkloadKey], workload: WorkloadInfo
) -> list[Action]:
    actions: list[Action] = []
    key = workload.key
    record = workload.spare
    policy = in_force(workload.annotations).policy
    wanted = policy.spare if policy is not None and managed(workload, settings) else 0
    targeted = policy is not None and bool(policy.target)
    if record is None and (wanted == 0 or workload.replicas == 0) and not targeted:
        return actions
    if (
        workload.kind != "Deployment"
        or key in busy
        or workload.surge is not None
        or names.RETURN_ANNOTATION in workload.annotations
    ):
        return actions
    scaler = scaler_of(snapshot, workload)
    operated = scaler is not None and scaler.operated  # bounds we cannot hold (bounds.py)
    if policy is not None and policy.target and managed(workload, settings) and not operated:
        return plan_target(snapshot, workload, policy, settings.target, settings.declared_pools)
    basis = WorkloadBasis.of(workload)
    if scaler is not None:
        if wanted and not operated and not targeted:
            return _on_hpa(snapshot, workload, scaler, wanted)
        # No spares to keep, or an operator's HPA: a record of ours is dropped (its bounds go
        # back, bounds.py), the count left to the HPA.
        gone = SetSpare(key, None, None, basis=basis, why=_why_gone(record))
        return [gone] if record is not None else []
    replicas = workload.replicas
    why = _why_gone(record)
    if record is None:
        fresh = Spare(base=replicas, added=wanted)
        actions.append(SetSpare(key, replicas + wanted, fresh, basis=basis))
        return actions
    if record.gave_up:
        if wanted == 0:
            actions.append(SetSpare(key, None, None, basis=basis))
        return actions
    if replicas == record.base + record.added:
        if wanted != record.added or why is not None:
            kept = Spare(record.base, wanted, record.reverted) if wanted else None
            actions.append(SetSpare(key, record.base + wanted, kept, basis=basis, why=why))
    elif replicas == record.base and record.added > 0:
        reverted = record.reverted + 1
        if reverted >= 2:
            given_up = Spare(record.base, 0, reverted, gave_up=True)
            actions.append(SetSpare(key, None, given_up, basis=basis, reason=Reason.SPARE_NOT_HELD))
        else:
            again = Spare(record.base, wanted, reverted)
            actions.append(SetSpare(key, record.base + wanted, again, basis=basis))
    else:  # the owner chose a new count: that is the base now
        rebased = Spare(replicas, wanted, record.reverted) if wanted and replicas else None
        actions.append(
            SetSpare(key, replicas + wanted if rebased else None, rebased, basis=basis, why=why)
        )
    return actions


def _on_hpa(
    snapshot: Snapshot, workload: WorkloadInfo, scaler: ScalerInfo, wanted: int
) -> list[Action]:
    """`spare-replicas` on a Deployment an HPA scales: the spares on top of the count the HPA
    wants (`hpa_count.py`, as for a target), held by its bounds (bounds.py). The HPA is the
    owner here, so no reset to detect: the count is ours to set within its wish."""
    record = workload.spare
    pods = snapshot.pods_by_workload.get(workload.key, [])
    counted = hpa_count(
        scaler, ready=metered(pods, snapshot.now), record=record, replicas=workload.replicas,
        now=snapshot.now,
    )  # fmt: skip
    if counted.base == 0:
        return []
    kept = Spare(
        counted.base, wanted, lower_since=counted.lower_since, lower_high=counted.lower_high
    )
    total = counted.base + wanted
    if record == kept and workload.replicas == total:
        return []
    basis = WorkloadBasis.of(workload)
    return [SetSpare(workload.key, total, kept, basis=basis, why=_why_gone(record))]


def _why_gone(record: Spare | None) -> str | None:
    """A target's words ("": removed with its record), or None (no target's: left as is)."""
    return "" if record is not None and record.spot is not None else None

"""Return to spot: move replicas that failed over to on-demand back to spot, make-before-break.

Pure, like the planner it is part of. For a managed Deployment with a Ready replica on an
on-demand node, whose template fits a spot pool that has Ready room, no notice, no cool-down
and has been quiet (no Preempt) for `return_quiet_seconds`:
1. start: scale up by one, recording on the Deployment (`spot-rebalancer.io/return`) the base
   count, the on-demand pod to retire, the target pool and the pods that existed;
2. the new pod (the one not in that list) must land on a spot node and become Ready; then the
   on-demand pod gets the lowest deletion cost, and the scale-back removes it;
3. give up cleanly, scaling back so that the new pod goes, when a notice touches the pool, the
   new pod lands on demand, or it is not Ready within `return_pending_timeout_seconds`; a give-up
   backs the workload off for `return_quiet_seconds`.
One return per workload at a time (its record names one pod) and at most `max_concurrent`
cluster-wide; the quiet time (hysteresis), an optional UTC window and the back-off keep replicas
from flapping between pools. PodDisruptionBudgets are never at stake: the new replica is Ready
before the old one goes, and a degraded workload (fewer Ready replicas than desired) is never
moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rebalancer.controller.actions import (
    Action,
    FinishReturn,
    ForgetReturn,
    SetDeletionCost,
    StartReturn,
    WorkloadBasis,
)
from rebalancer.controller.model import NodeInfo, PodInfo, ReturnRecord, WorkloadInfo
from rebalancer.controller.pools import Pool, pools_of
from rebalancer.controller.scheduling import untolerated
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.names import COOLDOWN_UNTIL, RETURN_ANNOTATION, RETURN_BACKOFF_ANNOTATION
from rebalancer.timefmt import iso, parse_iso
from rebalancer.vocabulary import Reason

LOWEST = "-2147483648"  # the lowest pod-deletion-cost: the ReplicaSet's first choice


@dataclass(frozen=True)
class ReturnSettings:
    enabled: bool = True
    quiet_seconds: float = 600.0
    pending_timeout_seconds: float = 600.0
    max_concurrent: int = 1
    window: tuple[int, int] | None = None  # (start minute, end minute) of the UTC day


def in_window(window: tuple[int, int] | None, now: datetime) -> bool:
    if window is None:
        return True
    minute = now.hour * 60 + now.minute
    start, end = window
    return start <= minute < end if start <= end else minute >= start or minute < end


def lower_cost(pod: PodInfo, reason: Reason) -> SetDeletionCost:
    """Make this pod the ReplicaSet's first choice when it scales down."""
    return SetDeletionCost(pod.key, LOWEST, save_original=pod.deletion_cost or "", reason=reason)


def plan_returns(
    snapshot: Snapshot,
    *,
    managed: set[WorkloadKey],
    active_nodes: set[str],
    settings: ReturnSettings,
    busy: frozenset[WorkloadKey] = frozenset(),
) -> list[Action]:
    """Actions that move replicas back to spot, or finish and undo moves in progress. No return
    starts for a workload in `busy` (surged in this same pass: both would be planned from the
    same replica count)."""
    nodes = snapshot.nodes
    pools = pools_of(nodes.values())
    actions: list[Action] = []
    in_flight = 0
    for key, workload in sorted(snapshot.workloads.items()):
        record = read_record(workload)
        if record is None:
            continue
        pods = snapshot.pods_by_workload.get(key, [])
        if record.completed:
            if not record.leaving(pods):
                actions.append(ForgetReturn(key, basis=WorkloadBasis.of(workload)))
            continue
        in_flight += 1
        actions += _progress(snapshot.now, workload, record, pods, nodes, active_nodes, settings)
    if not settings.enabled or not in_window(settings.window, snapshot.now):
        return actions
    for key, workload in sorted(snapshot.workloads.items()):
        if in_flight >= settings.max_concurrent:
            break
        if key not in managed or workload.kind != "Deployment":
            continue
        if key in busy or RETURN_ANNOTATION in workload.annotations or workload.surge is not None:
            continue
        backoff = parse_iso(workload.annotations.get(RETURN_BACKOFF_ANNOTATION))
        if backoff is not None and snapshot.now < backoff:
            continue
        start = _start(snapshot, workload, pools, active_nodes, settings)
        if start is not None:
            actions.append(start)
            in_flight += 1
    return actions


def read_record(workload: WorkloadInfo) -> ReturnRecord | None:
    raw = workload.annotations.get(RETURN_ANNOTATION)
    if raw is None:
        return None
    try:
        return ReturnRecord.from_json(raw)
    except ValueError:
        return None


def _free_gpus(node: NodeInfo, pods_by_node: Mapping[str, list[PodInfo]]) -> int:
    used = sum(p.gpus for p in pods_by_node.get(node.name, []) if not p.finished)
    return node.allocatable_gpus - used


def _start(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    pools: Mapping[str, Pool],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> StartReturn | None:
    now, nodes = snapshot.now, snapshot.nodes
    pods = snapshot.pods_by_workload.get(workload.key, [])
    live = [p for p in pods if not p.deleting and not p.finished]
    ready = [p for p in live if p.ready]
    if len(ready) < workload.replicas or len(live) != workload.replicas:
        return None  # degraded or changing: never move a replica then
    on_demand = [p for p in ready if p.node_name in nodes and not nodes[p.node_name].spot]
    if not on_demand:
        return None
    for pool in sorted(pools.values(), key=lambda p: p.name):
        if not pool.spot or pool.problems_for(workload.template_spec, workload.gpus_per_replica):
            continue
        if snapshot.history.quiet_seconds(pool.name, now) < settings.quiet_seconds:
            continue
        members = [nodes[n] for n in pool.nodes if n in nodes]
        if any(n.name in active_nodes for n in members):
            continue
        if any((parse_iso(n.annotations.get(COOLDOWN_UNTIL)) or now) > now for n in members):
            continue
        # A node's own taints count too, not only the pool's: a new node is tainted not-ready
        # for seconds after it joins, and a replica started then lands on on-demand again.
        tolerations = workload.template_spec.get("tolerations") or []
        room = [
            n
            for n in members
            if n.ready
            and not n.unschedulable
            and not untolerated(tolerations, n.taints)
            and _free_gpus(n, snapshot.pods_by_node) >= max(1, workload.gpus_per_replica)
        ]
        if not room:
            continue
        retire = sorted(on_demand, key=lambda p: p.name)[0]
        record = ReturnRecord(
            base_replicas=workload.replicas,
            retire=f"{retire.namespace}/{retire.name}",
            pool=pool.name,
            started_at=iso(now),
            known_pods=tuple(sorted(p.name for p in pods)),
        )
        return StartReturn(
            workload.key, replicas=workload.replicas + 1, record=record,
            basis=WorkloadBasis.of(workload),
        )  # fmt: skip
    return None


def _progress(
    now: datetime,
    workload: WorkloadInfo,
    record: ReturnRecord,
    pods: list[PodInfo],
    nodes: Mapping[str, NodeInfo],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> list[Action]:
    key, basis = workload.key, WorkloadBasis.of(workload)
    done = replace(record, completed=True)
    if workload.replicas != record.base_replicas + 1:
        # Someone else owns the count now: nothing of ours is in play any more.
        return [FinishReturn(key, None, Reason.REPLICAS_CHANGED, None, basis=basis)]
    new = [p for p in pods if p.name not in record.known_pods and not p.deleting]
    retire = next((p for p in pods if p.name == record.retire_name and not p.deleting), None)
    pool_nodes = [n for n in nodes.values() if n.pool == record.pool]
    # A notice in the target pool, or on any node of this workload (its failover comes first).
    notice = any(n.name in active_nodes for n in pool_nodes) or any(
        p.node_name in active_nodes for p in pods
    )

    def give_up(reason: Reason) -> list[Action]:
        unmarked: list[Action] = [lower_cost(p, reason) for p in new if p.deletion_cost != LOWEST]
        if unmarked:
            return unmarked  # the new pod first, so the scale-back removes it
        backoff = now + timedelta(seconds=settings.quiet_seconds)
        gave_up = replace(done, gave_up=True)
        return [
            FinishReturn(
                key, record.base_replicas, reason, gave_up, backoff_until=backoff, basis=basis
            )
        ]

    if notice:
        return give_up(Reason.NOTICE_DURING_RETURN)
    landed = [p for p in new if p.node_name]
    if any(p.node_name in nodes and not nodes[p.node_name].spot for p in landed):
        return give_up(Reason.LANDED_ON_DEMAND)
    if retire is None:
        return [
            FinishReturn(key, record.base_replicas, Reason.RETIRED_POD_GONE, done, basis=basis)
        ]  # fmt: skip
    if any(p.ready for p in landed):
        if retire.deletion_cost != LOWEST:
            return [lower_cost(retire, Reason.RETURNED)]
        return [FinishReturn(key, record.base_replicas, Reason.RETURNED, done, basis=basis)]
    started = parse_iso(record.started_at) or now
    if (now - started).total_seconds() > settings.pending_timeout_seconds:
        return give_up(Reason.SPOT_NOT_READY)
    return []


def active_record(workload: WorkloadInfo) -> ReturnRecord | None:
    record = read_record(workload)
    return None if record is None or record.completed else record


def pods_in_play(workload: WorkloadInfo, pods: list[PodInfo]) -> set[tuple[str, str]]:
    """The pods a return is working on: their deletion costs are its business. A finished
    return keeps its retired pod until the ReplicaSet has removed it (restoring that pod's cost
    first would let the ReplicaSet remove another one)."""
    record = read_record(workload)
    if record is None:
        return set()
    if record.completed:
        return {p.key for p in record.leaving(pods)}
    return {p.key for p in pods if p.name == record.retire_name or p.name not in record.known_pods}

"""Return to spot, and moves off risky spot groups: make-before-break, one replica at a time.

Pure, like the planner it is part of. For a managed Deployment with a Ready replica on an
on-demand node, whose template fits a spot pool that has Ready room (or is a Karpenter NodePool's
spot part, which launches the room for the new replica), no notice, no cool-down and has been
quiet (no Preempt) for `return_quiet_seconds`:
1. start: scale up by one, recording on the Deployment (`spot-rebalancer.io/return`) the base
   count, the on-demand pod to retire, the target pool and the pods that existed;
2. the new pod (the one not in that list) must land on a spot node and become Ready; then the
   on-demand pod gets the lowest deletion cost, and the scale-back removes it;
3. give up cleanly, scaling back so that the new pod goes, when a notice touches the pool, the
   new pod lands on demand, or it is not Ready within `return_pending_timeout_seconds`; a give-up
   backs the workload off for `return_quiet_seconds`.
A move off risk is the same machinery with another trigger: a workload whose placement policy
(policy.py) has a Ready replica in a spot pool and zone whose risk is above its `max-risk`, and
somewhere better to go (an accepted spot group with room, or an on-demand pool it fits), gets one
more replica, which the admission webhook places by the policy; once it is Ready the risky one
goes. It gives up, like a return, when a notice touches the workload, the new pod lands in a
group the policy does not accept either, or it is not Ready in time. The return to spot keeps a
policy too: never below `min-on-demand`, and only to pools and zones the policy accepts.
One return or move per workload at a time (its record names one pod) and at most
`max_concurrent` cluster-wide, moves first; the quiet time (hysteresis), an optional UTC window
and the back-off keep replicas from flapping between pools. PodDisruptionBudgets are never at
stake: the new replica is Ready before the old one goes, and a degraded workload (fewer Ready
replicas than desired) is never moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from pydantic import field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from rebalancer import pool_kind
from rebalancer.controller.actions import (
    Action,
    FinishReturn,
    ForgetReturn,
    SetDeletionCost,
    StartReturn,
    WorkloadBasis,
)
from rebalancer.controller.contain import Containment, on_workload
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.policy import Policy, in_force
from rebalancer.controller.pools import Pool, pools_of
from rebalancer.controller.records import ReturnRecord
from rebalancer.controller.scheduling import untolerated
from rebalancer.controller.snapshot import Snapshot, WorkloadKey
from rebalancer.names import COOLDOWN_UNTIL, RETURN_ANNOTATION, RETURN_BACKOFF_ANNOTATION
from rebalancer.setting_groups import SETTINGS_CONFIG, setting
from rebalancer.setting_values import parse_window
from rebalancer.timefmt import iso, parse_iso
from rebalancer.vocabulary import Reason

LOWEST = "-2147483648"  # the lowest pod-deletion-cost: the ReplicaSet's first choice


@pydantic_dataclass(frozen=True, config=SETTINGS_CONFIG)
class ReturnSettings:
    """The return to spot's settings (REBALANCER_RETURN_*)."""

    enabled: bool = setting(True, description="Move replicas back to spot when it is safe.")
    quiet_seconds: float = setting(
        600.0, ge=0, description="A spot pool must be free of Preempt notices this long first."
    )
    pending_timeout_seconds: float = setting(
        600.0, gt=0, description="Give a return up when the spot replica is not Ready by then."
    )
    max_concurrent: int = setting(1, ge=0, description="Returns in progress at once.")
    window: str = setting(
        "", description="Return only inside this UTC window, HH:MM-HH:MM; empty: any time."
    )

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        parse_window(value)
        return value

    @cached_property
    def window_minutes(self) -> tuple[int, int] | None:
        """(start minute, end minute) of the UTC day; None: any time."""
        return parse_window(self.window)


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
    contain: Containment | None = None,
) -> list[Action]:
    """Actions that move replicas back to spot, or finish and undo moves in progress. No return
    starts for a workload in `busy` (surged in this same pass: both would be planned from the
    same replica count)."""
    contain = contain or Containment()
    nodes = snapshot.nodes
    pools = pools_of(nodes.values())
    actions: list[Action] = []
    in_flight = 0
    for key, workload in sorted(snapshot.workloads.items()):
        record = read_record(workload)
        if record is None:
            continue
        if not record.completed:
            in_flight += 1  # counted even if planning it fails: the budget stays honest
        actions += contain.run(
            "return",
            on_workload(key),
            [],
            _continue,
            snapshot,
            workload,
            record,
            active_nodes,
            settings,
        )
    if not settings.enabled or not in_window(settings.window_minutes, snapshot.now):
        return actions
    for key, workload in sorted(snapshot.workloads.items()):
        if in_flight >= settings.max_concurrent:
            break
        if key not in managed or workload.kind != "Deployment":
            continue
        if key in busy or RETURN_ANNOTATION in workload.annotations or workload.surge is not None:
            continue
        start = contain.run(
            "return",
            on_workload(key),
            None,
            _start_one,
            snapshot,
            workload,
            pools,
            active_nodes,
            settings,
        )
        if start is not None:
            actions.append(start)
            in_flight += 1
    return actions


def _continue(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    record: ReturnRecord,
    active_nodes: set[str],
    settings: ReturnSettings,
) -> list[Action]:
    pods = snapshot.pods_by_workload.get(workload.key, [])
    if record.completed:
        if not record.leaving(pods):
            return [ForgetReturn(workload.key, basis=WorkloadBasis.of(workload))]
        return []
    return _progress(snapshot, workload, record, pods, active_nodes, settings)


def _start_one(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    pools: Mapping[str, Pool],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> StartReturn | None:
    backoff = parse_iso(workload.annotations.get(RETURN_BACKOFF_ANNOTATION))
    if backoff is not None and snapshot.now < backoff:
        return None
    policy = in_force(workload.annotations).policy
    start = _start_move(snapshot, workload, policy, pools, active_nodes)
    if start is None:
        start = _start(snapshot, workload, policy, pools, active_nodes, settings)
    return start


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


def _settled(snapshot: Snapshot, workload: WorkloadInfo) -> list[PodInfo] | None:
    """The Ready replicas of a workload that is neither degraded nor changing, else None: a
    replica is never moved then."""
    pods = snapshot.pods_by_workload.get(workload.key, [])
    live = [p for p in pods if not p.deleting and not p.finished]
    ready = [p for p in live if p.ready]
    if len(ready) < workload.replicas or len(live) != workload.replicas:
        return None
    return ready


def _accepted(snapshot: Snapshot, policy: Policy | None, node: NodeInfo) -> bool:
    """May a replica of a workload with this policy run on this node? (No policy: anywhere.)"""
    if policy is None:
        return True
    if not policy.allows_pool(node.pool):
        return False
    if not node.spot:
        return True
    level = snapshot.level_of(node)
    return bool(level) and policy.accepts(level)


def _start_move(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    policy: Policy | None,
    pools: Mapping[str, Pool],
    active_nodes: set[str],
) -> StartReturn | None:
    if policy is None or workload.opted_out:
        return None
    ready = _settled(snapshot, workload)
    if ready is None:
        return None
    nodes = snapshot.nodes
    risky = [
        p
        for p in ready
        if p.node_name in nodes
        and nodes[p.node_name].spot
        and snapshot.level_of(nodes[p.node_name])
        and not _accepted(snapshot, policy, nodes[p.node_name])
    ]
    if not risky:
        return None
    fits = {
        pool.name
        for pool in pools.values()
        if not pool.problems_for(workload.template_spec, workload.gpus_per_replica)
    }
    tolerations = workload.template_spec.get("tolerations") or []
    better = [
        n
        for n in nodes.values()
        if n.pool in fits
        and n.name not in active_nodes
        and _accepted(snapshot, policy, n)
        and (not n.spot or _has_room(snapshot, n, tolerations, workload.gpus_per_replica))
    ]
    if not better:
        return None  # nowhere better: keep it where it is (the risk gauge and log say why)
    retire = sorted(risky, key=lambda p: p.name)[0]
    node = nodes[retire.node_name]
    record = ReturnRecord(
        base_replicas=workload.replicas,
        retire=f"{retire.namespace}/{retire.name}",
        pool="",
        started_at=iso(snapshot.now),
        known_pods=tuple(sorted(p.name for p in snapshot.pods_by_workload.get(workload.key, []))),
        purpose="risk",
        why=(
            f"{node.pool}/{node.zone} risk {snapshot.level_of(node)} is above max-risk "
            f"{policy.max_risk}"
        ),
    )
    return StartReturn(
        workload.key, replicas=workload.replicas + 1, record=record,
        basis=WorkloadBasis.of(workload), reason=Reason.RISK_MOVE,
    )  # fmt: skip


def _has_room(snapshot: Snapshot, node: NodeInfo, tolerations: Any, gpus: int) -> bool:
    # A node's own taints count too, not only the pool's: a new node is tainted not-ready
    # for seconds after it joins, and a replica started then lands on on-demand again.
    return (
        node.ready
        and not node.unschedulable
        and not untolerated(tolerations, node.taints)
        and _free_gpus(node, snapshot.pods_by_node) >= max(1, gpus)
    )


def _start(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    policy: Policy | None,
    pools: Mapping[str, Pool],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> StartReturn | None:
    now, nodes = snapshot.now, snapshot.nodes
    pods = snapshot.pods_by_workload.get(workload.key, [])
    ready = _settled(snapshot, workload)
    if ready is None:
        return None
    on_demand = [p for p in ready if p.node_name in nodes and not nodes[p.node_name].spot]
    if not on_demand or (policy is not None and len(on_demand) <= policy.min_on_demand):
        return None
    for pool in sorted(pools.values(), key=lambda p: p.name):
        if not pool.spot or pool.problems_for(workload.template_spec, workload.gpus_per_replica):
            continue
        if policy is not None and not policy.allows_pool(pool.name):
            continue
        if snapshot.history.quiet_seconds(pool.name, now) < settings.quiet_seconds:
            continue
        members = [nodes[n] for n in pool.nodes if n in nodes]
        if any(n.name in active_nodes for n in members):
            continue
        if any((parse_iso(n.annotations.get(COOLDOWN_UNTIL)) or now) > now for n in members):
            continue
        tolerations = workload.template_spec.get("tolerations") or []
        room = [
            n
            for n in members
            if _has_room(snapshot, n, tolerations, workload.gpus_per_replica)
            and _accepted(snapshot, policy, n)
        ]
        # A Karpenter NodePool's spot part keeps no idle node (consolidation removes empty ones):
        # the new replica, pending, is what makes Karpenter launch one.
        if not room and not pool_kind.is_karpenter(pool.name):
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
    snapshot: Snapshot,
    workload: WorkloadInfo,
    record: ReturnRecord,
    pods: list[PodInfo],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> list[Action]:
    now, nodes = snapshot.now, snapshot.nodes
    key, basis = workload.key, WorkloadBasis.of(workload)
    done = replace(record, completed=True)

    def finish(
        replicas: int | None,
        reason: Reason,
        kept: ReturnRecord | None,
        backoff: datetime | None = None,
    ) -> FinishReturn:
        return FinishReturn(
            key, replicas, reason, kept, backoff_until=backoff, basis=basis,
            purpose=record.purpose,
        )  # fmt: skip

    if workload.replicas != record.base_replicas + 1:
        # Someone else owns the count now: nothing of ours is in play any more.
        return [finish(None, Reason.REPLICAS_CHANGED, None)]
    new = [p for p in pods if p.name not in record.known_pods and not p.deleting]
    retire = next((p for p in pods if p.name == record.retire_name and not p.deleting), None)
    pool_nodes = [n for n in nodes.values() if record.pool and n.pool == record.pool]
    # A notice in the target pool, or on any node of this workload (its failover comes first).
    notice = any(n.name in active_nodes for n in pool_nodes) or any(
        p.node_name in active_nodes for p in pods
    )

    def give_up(reason: Reason) -> list[Action]:
        unmarked: list[Action] = [lower_cost(p, reason) for p in new if p.deletion_cost != LOWEST]
        if unmarked:
            return unmarked  # the new pod first, so the scale-back removes it
        backoff = now + timedelta(seconds=settings.quiet_seconds)
        its_pods = tuple(sorted(p.name for p in pods if p.name not in record.known_pods))
        gave_up = replace(done, gave_up=True, waits_for=its_pods)
        return [finish(record.base_replicas, reason, gave_up, backoff)]

    if notice:
        return give_up(Reason.NOTICE_DURING_RETURN)
    landed = [p for p in new if p.node_name]
    if record.purpose == "risk":
        policy = in_force(workload.annotations).policy
        if any(
            p.node_name in nodes and not _accepted(snapshot, policy, nodes[p.node_name])
            for p in landed
        ):
            return give_up(Reason.LANDED_RISKY)
    elif any(p.node_name in nodes and not nodes[p.node_name].spot for p in landed):
        return give_up(Reason.LANDED_ON_DEMAND)
    if retire is None:
        return [finish(record.base_replicas, Reason.RETIRED_POD_GONE, done)]
    if any(p.ready for p in landed):
        if retire.deletion_cost != LOWEST:
            return [lower_cost(retire, Reason.RETURNED)]
        moved = Reason.MOVED if record.purpose == "risk" else Reason.RETURNED
        return [finish(record.base_replicas, moved, done)]
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

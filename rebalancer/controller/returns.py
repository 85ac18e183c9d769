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

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from rebalancer import names
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.pools import Pool, pools_of
from rebalancer.controller.scheduling import untolerated
from rebalancer.timefmt import iso, parse_iso

RETURN_ANNOTATION = f"{names.PREFIX}/return"
RETURN_BACKOFF_ANNOTATION = f"{names.PREFIX}/return-backoff-until"
COOLDOWN_UNTIL = f"{names.PREFIX}/cooldown-until"


@dataclass(frozen=True)
class ReturnRecord:
    base_replicas: int
    retire: str  # "namespace/name" of the on-demand pod to remove
    pool: str
    started_at: str  # RFC 3339
    known_pods: tuple[str, ...]  # pod names that existed when it started
    completed: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseReplicas": self.base_replicas,
                "retire": self.retire,
                "pool": self.pool,
                "startedAt": self.started_at,
                "knownPods": list(self.known_pods),
                "completed": self.completed,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ReturnRecord:
        data = json.loads(text)
        return cls(
            base_replicas=int(data["baseReplicas"]),
            retire=str(data["retire"]),
            pool=str(data["pool"]),
            started_at=str(data["startedAt"]),
            known_pods=tuple(str(p) for p in data.get("knownPods") or []),
            completed=bool(data.get("completed", False)),
        )


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


@dataclass(frozen=True)
class StartReturn:
    workload: tuple[str, str, str]
    replicas: int
    record: ReturnRecord
    resource_version: str = ""


@dataclass(frozen=True)
class FinishReturn:
    """Scale back (None: leave replicas) and mark the record done; `backoff_until` on a give-up."""

    workload: tuple[str, str, str]
    replicas: int | None
    reason: str
    backoff_until: datetime | None = None


@dataclass(frozen=True)
class ForgetReturn:
    workload: tuple[str, str, str]


@dataclass(frozen=True)
class LowerCost:
    """Make this pod the ReplicaSet's first choice when it scales down."""

    pod: tuple[str, str]
    original: str


LOWEST = "-2147483648"


ReturnAction = StartReturn | FinishReturn | ForgetReturn | LowerCost


def plan_returns(
    *,
    now: datetime,
    nodes: Mapping[str, NodeInfo],
    pods_by_node: Mapping[str, list[PodInfo]],
    pods_by_workload: Mapping[tuple[str, str, str], list[PodInfo]],
    workloads: Mapping[tuple[str, str, str], WorkloadInfo],
    managed: set[tuple[str, str, str]],
    active_nodes: set[str],
    quiet: Mapping[str, float],
    settings: ReturnSettings,
) -> list[ReturnAction]:
    """Actions that move replicas back to spot, or finish and undo moves in progress."""
    pools = pools_of(nodes.values())
    actions: list[ReturnAction] = []
    in_flight = 0
    for key, workload in sorted(workloads.items()):
        record = _record(workload)
        if record is None:
            continue
        if record.completed:
            retire = record.retire.split("/", 1)[1]
            if not any(p.name == retire for p in pods_by_workload.get(key, [])):
                actions.append(ForgetReturn(key))
            continue
        in_flight += 1
        actions += _progress(
            now, key, workload, record, pods_by_workload.get(key, []), nodes, active_nodes, settings
        )
    if not settings.enabled or not in_window(settings.window, now):
        return actions
    for key, workload in sorted(workloads.items()):
        if in_flight >= settings.max_concurrent:
            break
        if key not in managed or workload.kind != "Deployment":
            continue
        if _record(workload) is not None or workload.surge is not None:
            continue
        backoff = parse_iso(workload.annotations.get(RETURN_BACKOFF_ANNOTATION))
        if backoff is not None and now < backoff:
            continue
        start = _start(
            now, key, workload, pods_by_workload.get(key, []), nodes, pods_by_node, pools,
            active_nodes, quiet, settings,
        )  # fmt: skip
        if start is not None:
            actions.append(start)
            in_flight += 1
    return actions


def _record(workload: WorkloadInfo) -> ReturnRecord | None:
    raw = workload.annotations.get(RETURN_ANNOTATION)
    if raw is None:
        return None
    try:
        return ReturnRecord.from_json(raw)
    except (ValueError, KeyError, TypeError):
        return None


def _free_gpus(node: NodeInfo, pods_by_node: Mapping[str, list[PodInfo]]) -> int:
    used = sum(p.gpus for p in pods_by_node.get(node.name, []) if not p.finished)
    return node.allocatable_gpus - used


def _start(
    now: datetime,
    key: tuple[str, str, str],
    workload: WorkloadInfo,
    pods: list[PodInfo],
    nodes: Mapping[str, NodeInfo],
    pods_by_node: Mapping[str, list[PodInfo]],
    pools: Mapping[str, Pool],
    active_nodes: set[str],
    quiet: Mapping[str, float],
    settings: ReturnSettings,
) -> StartReturn | None:
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
        if quiet.get(pool.name, 0.0) < settings.quiet_seconds:
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
            and _free_gpus(n, pods_by_node) >= max(1, workload.gpus_per_replica)
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
        return StartReturn(key, workload.replicas + 1, record, workload.resource_version)
    return None


def _progress(
    now: datetime,
    key: tuple[str, str, str],
    workload: WorkloadInfo,
    record: ReturnRecord,
    pods: list[PodInfo],
    nodes: Mapping[str, NodeInfo],
    active_nodes: set[str],
    settings: ReturnSettings,
) -> list[ReturnAction]:
    backoff = now + timedelta(seconds=settings.quiet_seconds)
    if workload.replicas != record.base_replicas + 1:
        return [FinishReturn(key, None, "ReplicasChangedByOthers")]
    new = [p for p in pods if p.name not in record.known_pods and not p.deleting]
    retire_name = record.retire.split("/", 1)[1]
    retire = next((p for p in pods if p.name == retire_name and not p.deleting), None)
    pool_nodes = [n for n in nodes.values() if n.pool == record.pool]
    # A notice in the target pool, or on any node of this workload (its failover comes first).
    notice = any(n.name in active_nodes for n in pool_nodes) or any(
        p.node_name in active_nodes for p in pods
    )

    def give_up(reason: str) -> list[ReturnAction]:
        unmarked: list[ReturnAction] = [
            LowerCost(p.key, p.deletion_cost or "") for p in new if p.deletion_cost != LOWEST
        ]
        if unmarked:
            return unmarked  # the new pod first, so the scale-back removes it
        return [FinishReturn(key, record.base_replicas, reason, backoff)]

    if notice:
        return give_up("NoticeDuringReturn")
    landed = [p for p in new if p.node_name]
    if any(p.node_name in nodes and not nodes[p.node_name].spot for p in landed):
        return give_up("LandedOnDemand")
    if retire is None:
        return [FinishReturn(key, record.base_replicas, "RetiredPodGone")]
    if any(p.ready for p in landed):
        if retire.deletion_cost != LOWEST:
            return [LowerCost(retire.key, retire.deletion_cost or "")]
        return [FinishReturn(key, record.base_replicas, "ReturnedToSpot")]
    started = parse_iso(record.started_at) or now
    if (now - started).total_seconds() > settings.pending_timeout_seconds:
        return give_up("SpotReplicaNotReady")
    return []


def complete(record: ReturnRecord) -> ReturnRecord:
    return replace(record, completed=True)


def active_record(workload: WorkloadInfo) -> ReturnRecord | None:
    record = _record(workload)
    return None if record is None or record.completed else record


def pods_in_play(workload: WorkloadInfo, pods: list[PodInfo]) -> set[tuple[str, str]]:
    """The pods a return is working on: their deletion costs are its business. A finished
    return keeps its retired pod until the ReplicaSet has removed it (restoring that pod's cost
    first would let the ReplicaSet remove another one)."""
    record = _record(workload)
    if record is None:
        return set()
    retire = record.retire.split("/", 1)[1]
    if record.completed:
        return {p.key for p in pods if p.name == retire}
    return {p.key for p in pods if p.name == retire or p.name not in record.known_pods}

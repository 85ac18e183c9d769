"""Applying a plan: the only place the controller writes to the API.

`Executor` performs each action (safe to repeat: node changes are read-modify-write with a
resourceVersion guard, workload changes carry the resourceVersion the plan was made from, pod
deletions a UID precondition) and records a Kubernetes Event for it. `DryRunExecutor` has the
same interface and writes nothing: it logs what it would do. Neither decides anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from rebalancer.controller import node_patches
from rebalancer.controller.model import (
    DELETION_COST,
    ORIGINAL_COST_ANNOTATION,
    SURGE_ANNOTATION,
    NodeInfo,
    WorkloadInfo,
)
from rebalancer.controller.planner import (
    Action,
    Cordon,
    Delete,
    EndCooldown,
    Evict,
    ForgetSurge,
    MarkDrained,
    Reason,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    StartCooldown,
    min_deadline,
)
from rebalancer.controller.returns import (
    RETURN_ANNOTATION,
    RETURN_BACKOFF_ANNOTATION,
    FinishReturn,
    ForgetReturn,
    ReturnRecord,
    StartReturn,
    complete,
)
from rebalancer.kube.errors import Conflict, TooManyRequests
from rebalancer.kube.events import EventRecorder
from rebalancer.kube.writes import Writer

# Reasons of the Kubernetes Events we record (documented in the README).
# Read-validate-write attempts when the object changed in between (a 409), before the next pass.
CONFLICT_ATTEMPTS = 3
_A = TypeVar("_A", ScaleUp, ScaleBack)

EVENT_REASONS = {
    Cordon: "SpotRebalancerCordoned",
    Restore: "SpotRebalancerRestored",
    ScaleUp: "SpotRebalancerSurge",
    ScaleBack: "SpotRebalancerScaleBack",
    Evict: "SpotRebalancerEvicted",
    Delete: "SpotRebalancerDeleted",
    MarkDrained: "SpotRebalancerDrained",
    StartCooldown: "SpotRebalancerCooldown",
    EndCooldown: "SpotRebalancerCooldownOver",
    ReportBlocked: "SpotRebalancerFailoverBlocked",
    StartReturn: "SpotRebalancerReturnStarted",
    FinishReturn: "SpotRebalancerReturnFinished",
}


@dataclass
class Outcome:
    """What happened: `done` False means nothing needed writing (or the object is gone)."""

    done: bool
    blocked: bool = False  # an eviction refused by a PodDisruptionBudget
    detail: str = ""


@dataclass
class Executor:
    writer: Writer
    events: EventRecorder
    workloads: Mapping[tuple[str, str, str], WorkloadInfo] = field(default_factory=dict)
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    reported: set[tuple[Any, ...]] = field(default_factory=set)

    async def _update_node(self, name: str, build: Any) -> bool:
        cached = self.nodes.get(name)
        current = cached.as_json() if cached is not None and cached.resource_version else None
        return await self.writer.update_node(name, build, current=current)

    async def apply(self, action: Action, now: datetime) -> Outcome:
        match action:
            case Cordon():
                done = await self._update_node(
                    action.node, node_patches.cordon(action.event_id, action.event_type)
                )
                if done:
                    await self._event_on_node(
                        action, f"Cordoned for {action.event_type} event {action.event_id}", now
                    )
                return Outcome(done)
            case Restore():
                done = await self._update_node(action.node, node_patches.restore)
                if done:
                    await self._event_on_node(
                        action, f"Notice {action.event_id} gone: cordon and taint undone", now
                    )
                return Outcome(done)
            case MarkDrained():
                done = await self._update_node(
                    action.node, node_patches.mark_drained(action.event_id)
                )
                if done:
                    await self._event_on_node(action, f"Drained for {action.event_id}", now)
                return Outcome(done)
            case StartCooldown():
                done = await self._update_node(
                    action.node, node_patches.start_cooldown(action.until)
                )
                if done:
                    await self._event_on_node(
                        action,
                        f"Its pool is being evicted: PreferNoSchedule until {action.until}",
                        now,
                    )
                return Outcome(done)
            case EndCooldown():
                done = await self._update_node(action.node, node_patches.end_cooldown)
                if done:
                    await self._event_on_node(
                        action, "Cool-down over: PreferNoSchedule removed", now
                    )
                return Outcome(done)
            case ScaleUp():
                return await self._on_conflict_read_again(self._scale_up, action, now)
            case ScaleBack():
                return await self._on_conflict_read_again(self._scale_back, action, now)
            case ForgetSurge():
                kind, namespace, name = action.workload
                patch = {"metadata": {"annotations": {SURGE_ANNOTATION: None}}}
                return Outcome(await self.writer.patch_workload(kind, namespace, name, patch))
            case SetDeletionCost():
                annotations: dict[str, str | None] = {DELETION_COST: action.cost}
                if action.restore:
                    annotations[ORIGINAL_COST_ANNOTATION] = None
                elif action.save_original is not None:
                    annotations[ORIGINAL_COST_ANNOTATION] = action.save_original
                namespace, name = action.pod
                return Outcome(await self.writer.annotate_pod(namespace, name, annotations))
            case Evict():
                namespace, name = action.pod
                try:
                    done = await self.writer.evict(namespace, name, action.uid)
                except TooManyRequests as error:
                    if error.is_disruption_budget:
                        return Outcome(False, blocked=True, detail=str(error))
                    raise
                if done:
                    self._event_on_pod(action, f"Evicted: node {action.node} is going away", now)
                return Outcome(done)
            case Delete():
                namespace, name = action.pod
                done = await self.writer.delete_pod(
                    namespace, name, action.uid, action.grace_seconds
                )
                if done:
                    self._event_on_pod(
                        action,
                        f"Deleted with {action.grace_seconds}s grace: node {action.node} reaches "
                        f"its deadline ({action.event_id})",
                        now,
                        warning=True,
                    )
                return Outcome(done)
            case StartReturn():
                return await self._start_return(action, now)
            case FinishReturn():
                return await self._finish_return(action, now)
            case ForgetReturn():
                kind, namespace, name = action.workload
                patch = {"metadata": {"annotations": {RETURN_ANNOTATION: None}}}
                return Outcome(await self.writer.patch_workload(kind, namespace, name, patch))
            case ReportBlocked():
                key = (action.workload, action.detail)
                if key in self.reported:
                    return Outcome(False)
                self.reported.add(key)
                await self._event_on_workload(
                    action.workload,
                    action,
                    f"No on-demand fallback: {action.detail}",
                    now,
                    warning=True,
                )
                return Outcome(True)
        raise TypeError(f"unknown action {action!r}")

    async def _on_conflict_read_again(
        self,
        write: Callable[[_A, datetime], Awaitable[Outcome]],
        action: _A,
        now: datetime,
        attempts: int = CONFLICT_ATTEMPTS,
    ) -> Outcome:
        """client-go's RetryOnConflict for the writes that re-read and re-validate first: on a
        real API server the Deployment controller updates the status (and so the
        resourceVersion) just as replacements become Ready, which is when a scale-back comes.
        Waiting for the next pass would cost seconds of the deadline."""
        for _ in range(attempts - 1):
            try:
                return await write(action, now)
            except Conflict:
                continue
        return await write(action, now)

    async def _scale_up(self, action: ScaleUp, now: datetime) -> Outcome:
        """Surge, re-validated against the Deployment as it is now, not as the cache had it:
        a stale cache must never add replicas for pods a surge already covers."""
        kind, namespace, name = action.workload
        fresh = await self.writer.get_workload(kind, namespace, name)
        if fresh is None:
            return Outcome(False)
        info = WorkloadInfo.from_json(kind, fresh)
        if info.surge_unreadable:
            return Outcome(False, detail="surge record unreadable")
        covered = set()
        if info.surge is not None:
            covered = set(info.surge.doomed_pods)
        new = [pod for pod in action.record.doomed_pods if pod not in covered]
        if not new:
            return Outcome(False, detail="already surged")
        if info.surge is not None and not info.surge.completed:
            record = replace(
                info.surge,
                added=info.surge.added + len(new),
                event_ids=tuple(sorted(set(info.surge.event_ids) | set(action.record.event_ids))),
                doomed_pods=tuple(sorted(covered | set(new))),
                deadline=min_deadline(info.surge.deadline, action.record.deadline),
            )
        else:
            # A completed record's pods are on their way out; keep naming them so that they
            # are never taken for new doomed pods, and surge for the new ones only.
            record = replace(
                action.record,
                base_replicas=info.replicas,
                added=len(new),
                doomed_pods=tuple(sorted(covered | set(new))),
                completed=False,
            )
        replicas = info.replicas + len(new)
        patch: dict[str, Any] = {
            "metadata": {
                "annotations": {SURGE_ANNOTATION: record.to_json()},
                "resourceVersion": info.resource_version,
            },
            "spec": {"replicas": replicas},
        }
        done = await self.writer.patch_workload(kind, namespace, name, patch)
        if done:
            await self._event_on_workload(
                action.workload,
                action,
                f"Scaled to {replicas} to replace {len(new)} replica(s) on evicted nodes "
                f"before they go ({', '.join(record.event_ids)})",
                now,
            )
        return Outcome(done)

    async def _start_return(self, action: StartReturn, now: datetime) -> Outcome:
        kind, namespace, name = action.workload
        patch: dict[str, Any] = {
            "metadata": {"annotations": {RETURN_ANNOTATION: action.record.to_json()}},
            "spec": {"replicas": action.replicas},
        }
        if action.resource_version:
            patch["metadata"]["resourceVersion"] = action.resource_version
        done = await self.writer.patch_workload(kind, namespace, name, patch)
        if done:
            await self._event_on_workload(
                action.workload,
                action,
                f"Returning a replica to spot pool {action.record.pool}: scaled to "
                f"{action.replicas}; {action.record.retire} goes once the new one is Ready",
                now,
            )
        return Outcome(done)

    async def _finish_return(self, action: FinishReturn, now: datetime) -> Outcome:
        kind, namespace, name = action.workload
        current = self.workloads.get(action.workload)
        annotations: dict[str, str | None] = {}
        raw = None if current is None else current.annotations.get(RETURN_ANNOTATION)
        try:
            annotations[RETURN_ANNOTATION] = (
                complete(ReturnRecord.from_json(raw)).to_json() if raw else None
            )
        except (ValueError, KeyError, TypeError):
            annotations[RETURN_ANNOTATION] = None
        if action.backoff_until is not None:
            annotations[RETURN_BACKOFF_ANNOTATION] = action.backoff_until.strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        patch: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if action.replicas is not None:
            patch["spec"] = {"replicas": action.replicas}
        if current is not None and current.resource_version:
            patch["metadata"]["resourceVersion"] = current.resource_version
        done = await self.writer.patch_workload(kind, namespace, name, patch)
        if done:
            await self._event_on_workload(
                action.workload,
                action,
                f"Return to spot finished: {action.reason}",
                now,
                warning=action.backoff_until is not None,
            )
        return Outcome(done)

    async def _scale_back(self, action: ScaleBack, now: datetime) -> Outcome:
        """Scale back, re-validated against the Deployment as it is now (see `_scale_up`)."""
        kind, namespace, name = action.workload
        fresh = await self.writer.get_workload(kind, namespace, name)
        if fresh is None:
            return Outcome(False)
        info = WorkloadInfo.from_json(kind, fresh)
        surge = info.surge
        if surge is None or surge.completed:
            return Outcome(False, detail="no surge to scale back")
        replicas = action.replicas
        if replicas is not None and info.replicas != surge.base_replicas + surge.added:
            replicas = None  # changed by an HPA or a person since the plan: do not fight them
        # A completed record keeps its doomed pods out of later surges and drains until they are
        # gone, which after a scale-back they soon are. After a cancellation they stay, serving,
        # and nothing of the surge is doomed any more: drop the record, or those pods would be
        # neither surged for, nor evicted, nor deleted when a later notice dooms their node.
        record = None if action.reason == Reason.CANCELLED else replace(surge, completed=True)
        patch: dict[str, Any] = {
            "metadata": {
                "annotations": {SURGE_ANNOTATION: None if record is None else record.to_json()},
                "resourceVersion": info.resource_version,
            }
        }
        if replicas is not None:
            patch["spec"] = {"replicas": replicas}
        done = await self.writer.patch_workload(kind, namespace, name, patch)
        if done:
            target = "left as is" if replicas is None else f"to {replicas}"
            await self._event_on_workload(
                action.workload, action, f"Scaled back {target}: {action.reason}", now
            )
        return Outcome(done)

    def _event_on_pod(
        self, action: Evict | Delete, message: str, now: datetime, *, warning: bool = False
    ) -> None:
        namespace, name = action.pod
        self.events.emit(
            regarding={"kind": "Pod", "namespace": namespace, "name": name, "apiVersion": "v1"},
            reason=EVENT_REASONS[type(action)],
            message=message,
            event_type="Warning" if warning else "Normal",
            now=now,
        )

    async def _event_on_node(self, action: Any, message: str, now: datetime) -> None:
        self.events.emit(
            regarding={"kind": "Node", "name": action.node, "apiVersion": "v1", "namespace": ""},
            reason=EVENT_REASONS[type(action)],
            message=message,
            now=now,
        )

    async def _event_on_workload(
        self,
        workload: tuple[str, str, str],
        action: Any,
        message: str,
        now: datetime,
        *,
        warning: bool = False,
    ) -> None:
        kind, namespace, name = workload
        self.events.emit(
            regarding={"kind": kind, "namespace": namespace, "name": name, "apiVersion": "apps/v1"},
            reason=EVENT_REASONS[type(action)],
            message=message,
            event_type="Warning" if warning else "Normal",
            now=now,
        )


class DryRunExecutor:
    """Writes nothing: every action is reported as it would have been applied."""

    workloads: Mapping[tuple[str, str, str], WorkloadInfo] = {}

    async def apply(self, action: Action, now: datetime) -> Outcome:
        del action, now
        return Outcome(False, detail="dry run")

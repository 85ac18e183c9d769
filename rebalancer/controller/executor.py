"""Applying actions: the only place the controller writes to the API. It decides nothing.

For each action: read the object afresh where the action depends on it, check it still matches
what the plan was made from (`basis`), and write, or reject with a typed reason (`Rejection`):
gone, stale (the next pass plans again from the newer state), blocked by a PodDisruptionBudget,
fenced (this replica may have lost its Lease). Every write is safe to repeat: node changes are
read-modify-write guarded by the resourceVersion, workload changes carry the resourceVersion of
the object just checked, pod deletions and evictions a UID precondition.

Retries follow one policy (`rebalancer.retry.RetryPolicy`, from the settings): a 409 reads, checks
and writes again at once; a 429 that is not a PodDisruptionBudget's, a 5xx or no answer waits
(Retry-After, capped) and tries again; a write that still fails is an `error` outcome, and the
next pass, which sees the cluster as it is, plans it again. Before each action the fence is
asked (no fresh read, no write for a replica that may no longer hold the Lease); the write itself
is fenced again as it leaves, after the request budget's wait, by the kube layer's gate, and a
write it does not send (`Fenced`) is the same `fenced` rejection.

`DryRunExecutor` has the same interface and writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from rebalancer.controller.actions import (
    APPLIED,
    NOOP,
    Action,
    Bound,
    Delete,
    EndLoadHold,
    Evict,
    Hold,
    NodeAction,
    Outcome,
    RecordHistory,
    Release,
    ReportBlocked,
    SetDeletionCost,
    WorkloadAction,
)
from rebalancer.controller.model import ScaledObjectInfo, ScalerInfo, WorkloadInfo
from rebalancer.controller.seal import (
    SCALER_RECORDS,
    WORKLOAD_RECORDS,
    Sealer,
    scaled_object_identity,
    scaler_identity,
    workload_identity,
)
from rebalancer.kube.errors import Conflict, Fenced, KubeError, TooManyRequests
from rebalancer.kube.writes import Writer
from rebalancer.retry import RetryPolicy, retrying
from rebalancer.vocabulary import ActionResult, Rejection


class Rejected(Exception):
    def __init__(self, rejection: Rejection, detail: str = "") -> None:
        super().__init__(detail or rejection.value)
        self.rejection = rejection


@dataclass(frozen=True)
class HistoryObject:
    """Where the eviction history is kept: a ConfigMap in the controller's namespace."""

    namespace: str
    name: str

    @property
    def collection(self) -> str:
        return f"/api/v1/namespaces/{quote(self.namespace, safe='')}/configmaps"

    @property
    def path(self) -> str:
        return f"{self.collection}/{quote(self.name, safe='')}"


class Executor:
    def __init__(
        self,
        writer: Writer,
        *,
        history: HistoryObject,
        policy: RetryPolicy,
        fence: Callable[[], bool],
        sleep: Callable[[float], Awaitable[None]],
        sealer: Callable[[], Sealer],
        log: Any = None,
    ) -> None:
        self._writer = writer
        self._sealer = sealer
        self._history = history
        self._policy = policy
        self._fence = fence
        self._sleep = sleep
        self._log = log

    async def apply(self, action: Action) -> Outcome:
        try:
            return await retrying(
                lambda attempt: self._once(action, attempt),
                policy=self._policy,
                sleep=self._sleep,
                log=self._log,
                what=type(action).__name__,
            )
        except Rejected as rejected:
            return Outcome(ActionResult.REJECTED, rejected.rejection, str(rejected))
        except Fenced as error:
            return Outcome(ActionResult.REJECTED, Rejection.FENCED, str(error))
        except TooManyRequests as error:
            if error.is_disruption_budget:
                return Outcome(ActionResult.REJECTED, Rejection.BLOCKED, str(error))
            return Outcome(ActionResult.ERROR, detail=str(error), error_kind=error.kind)
        except KubeError as error:
            return Outcome(ActionResult.ERROR, detail=str(error), error_kind=error.kind)

    def _may_write(self) -> None:
        if not self._fence():
            raise Rejected(Rejection.FENCED, "this replica may no longer hold the Lease")

    async def _once(self, action: Action, attempt: int) -> Outcome:
        match action:
            case NodeAction():
                self._may_write()
                basis = action.basis if attempt == 1 else None
                done = await self._writer.update_node(action.node, action.build, current=basis)
                return _written(done)
            case WorkloadAction():
                return await self._workload(action)
            case SetDeletionCost() | EndLoadHold():
                self._may_write()
                namespace, name = action.pod
                return _written(await self._writer.patch_pod(namespace, name, action.patch()))
            case Evict():
                self._may_write()
                namespace, name = action.pod
                return _written(await self._writer.evict(namespace, name, action.body()))
            case Delete():
                self._may_write()
                namespace, name = action.pod
                return _written(await self._writer.delete_pod(namespace, name, action.body()))
            case ReportBlocked():
                return APPLIED  # nothing to write: the recorder says it
            case Hold():
                self._may_write()
                try:
                    await self._writer.create(_pdbs(action.namespace), action.body())
                except Conflict:
                    return NOOP  # there already
                return APPLIED
            case Bound():
                return await self._bound(action)
            case Release():
                self._may_write()
                gone = await self._writer.delete(f"{_pdbs(action.namespace)}/{quote(action.name)}")
                return APPLIED if gone else NOOP
            case RecordHistory():
                return await self._record_history(action)
        raise TypeError(f"unknown action {action!r}")

    async def _workload(self, action: WorkloadAction) -> Outcome:
        kind, namespace, name = action.workload
        fresh = await self._writer.get_workload(kind, namespace, name)
        if fresh is None:
            raise Rejected(Rejection.GONE)
        info = WorkloadInfo.from_json(kind, fresh)
        if not action.applies_to(info):
            raise Rejected(Rejection.STALE, "replicas or our records changed since the plan")
        patch = action.patch()
        self._sealer().seal_patch(workload_identity(info), WORKLOAD_RECORDS, patch)
        patch["metadata"]["resourceVersion"] = info.resource_version
        self._may_write()
        return _written(await self._writer.patch_workload(kind, namespace, name, patch))

    async def _bound(self, action: Bound) -> Outcome:
        namespace = quote(action.namespace, safe="")
        if action.through:  # KEDA's ScaledObject holds the HPA's bounds (keda.py)
            path = f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/" + quote(
                action.through, safe=""
            )
        else:
            path = (
                f"/apis/autoscaling/v2/namespaces/{namespace}"
                f"/horizontalpodautoscalers/{quote(action.name, safe='')}"
            )
        fresh = await self._writer.get(path)
        if fresh is None:
            raise Rejected(Rejection.GONE)
        if action.through:
            scaled = ScaledObjectInfo.from_json(fresh)
            now = (*scaled.hpa_bounds, scaled.original)
            identity, version = scaled_object_identity(scaled), scaled.resource_version
        else:
            info = ScalerInfo.from_json(fresh)
            now = (info.min_replicas, info.max_replicas, info.original)
            identity, version = scaler_identity(info), info.resource_version
        if now != action.basis:
            raise Rejected(Rejection.STALE, "its bounds changed since the plan")
        patch = action.patch()
        self._sealer().seal_patch(identity, SCALER_RECORDS, patch)
        patch["metadata"]["resourceVersion"] = version
        self._may_write()
        return _written(await self._writer.patch(path, patch))

    async def _record_history(self, action: RecordHistory) -> Outcome:
        where = self._history
        body = action.configmap(namespace=where.namespace, name=where.name)
        self._may_write()
        try:
            if action.history.resource_version:
                await self._writer.put(where.path, body)
            else:
                await self._writer.create(where.collection, body)
        except Conflict:
            # Written by another leader since we read it: the next pass merges into the newer one.
            raise Rejected(Rejection.STALE, "the history changed since it was read") from None
        return APPLIED


def _pdbs(namespace: str) -> str:
    return f"/apis/policy/v1/namespaces/{quote(namespace, safe='')}/poddisruptionbudgets"


def _written(done: bool | None) -> Outcome:
    if done is None:
        return NOOP
    if not done:
        raise Rejected(Rejection.GONE)
    return APPLIED


class DryRunExecutor:
    """Writes nothing: every action is reported as it would have been applied."""

    async def apply(self, action: Action) -> Outcome:
        del action
        return Outcome(ActionResult.DRY_RUN)

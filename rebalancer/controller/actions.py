"""What the planner decides, as data: one frozen action per write, each with its reason.

An action carries everything its write needs and the state it was planned from (`basis`): the
executor reads the object afresh, applies the action only if the object still matches that basis,
and otherwise rejects it (the next pass plans again from the newer state). So the executor never
decides, and a stale cache can never make it write twice.

Each action that writes has one pure function that makes what is sent: node actions `build(node)`
(a JSON merge patch from the Node as read, because a merge patch replaces the taint list whole and
must start from the taints the Node has now); workload actions `patch()` (sent if `applies_to`
the object read afresh); `SetDeletionCost.patch()`, `EndLoadHold.patch()`, `Evict.body()` (the
Eviction), `Delete.body()` (the DeleteOptions), `Hold.body()`, `Bound.patch()`,
`RecordHistory.configmap()`.
The executor sends them; `rebalancer simulate` applies the same ones to its virtual objects, so
what it reports is what these writes do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from rebalancer import names
from rebalancer.controller import node_patches
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.records import ReturnRecord, Spare, Surge
from rebalancer.timefmt import iso
from rebalancer.vocabulary import ActionResult, Reason, Rejection

WorkloadKey = tuple[str, str, str]
PodKey = tuple[str, str]
NodeJson = Mapping[str, Any]


class Step:
    """When an action is applied in its pass: the actions of one step are independent and may run
    at once; a step starts when the one before it has finished (`Plan.steps`).

    An HPA's bounds are raised first, before the surge they protect: were the surge written
    first, an HPA sync between the two writes would scale the Deployment back and the ReplicaSet
    would remove the replacement just created (not Ready yet, so it goes first). Then cordons,
    surges and the history, each of which starts a clock (the node stops taking pods, the
    replacements start loading). Holds, pod deletion costs and the deadline's deletions come
    before any scale-back, which must find the doomed pods already marked or gone. Then
    scale-backs, and bounds put back. Evictions, marks and the rest last."""

    FIRST = 0
    CORDON = 1
    BEFORE_SCALE_BACK = 2
    SCALE_BACK = 3
    LAST = 4
    COUNT = 5


# ---- what applying an action came to ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    result: ActionResult
    rejection: Rejection | None = None
    detail: str = ""
    error_kind: str = ""  # the KubeError kind of an `error` outcome

    @property
    def applied(self) -> bool:
        return self.result is ActionResult.APPLIED

    @property
    def label(self) -> str:
        """The `outcome` label of rebalancer_controller_actions_total."""
        if self.rejection is not None:
            return f"rejected_{self.rejection.value}"
        return self.result.value


APPLIED = Outcome(ActionResult.APPLIED)
NOOP = Outcome(ActionResult.NOOP)


# ---- what an action was planned from ---------------------------------------------------------


@dataclass(frozen=True)
class WorkloadBasis:
    """The parts of a workload a plan depends on: its replicas and our records on it."""

    replicas: int
    surge: str | None
    return_record: str | None
    uid: str = ""
    spare: str | None = None

    @classmethod
    def of(cls, workload: WorkloadInfo) -> WorkloadBasis:
        return cls(
            replicas=workload.replicas,
            surge=workload.annotations.get(names.SURGE_ANNOTATION),
            return_record=workload.annotations.get(names.RETURN_ANNOTATION),
            uid=workload.uid,
            spare=workload.annotations.get(names.SPARE_RECORD),
        )

    def matches(self, fresh: WorkloadInfo) -> bool:
        """Still the object planned from: the same replicas and records (the resourceVersion
        moves with every status update, so it is not compared), and not a new object."""
        now = WorkloadBasis.of(fresh)
        same = (now.replicas, now.surge, now.return_record, now.spare) == (
            self.replicas,
            self.surge,
            self.return_record,
            self.spare,
        )
        return same and (not self.uid or self.uid == fresh.uid)


# Matches no workload: an action without its basis is always rejected as stale.
UNKNOWN_BASIS = WorkloadBasis(replicas=-1, surge=None, return_record=None)


# ---- node actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeAction:
    node: str
    # The Node as the cache had it (with its resourceVersion): the first attempt patches from
    # it, saving a GET; if it was stale the patch fails with 409 and the retry reads afresh.
    basis: NodeJson | None = field(default=None, compare=False, repr=False, kw_only=True)
    uid: str = field(default="", compare=False, kw_only=True)

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Cordon(NodeAction):
    step: ClassVar[int] = Step.CORDON

    event_id: str = ""
    event_type: str = ""
    reason: Reason = Reason.NOTICE

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        return node_patches.cordon(self.event_id, self.event_type)(node)


@dataclass(frozen=True)
class Restore(NodeAction):
    """Undo our cordon, taint and label on a node whose notice is gone."""

    step: ClassVar[int] = Step.CORDON

    event_id: str = ""
    reason: Reason = Reason.CANCELLED

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        return node_patches.restore(node)


@dataclass(frozen=True)
class MarkDrained(NodeAction):
    step: ClassVar[int] = Step.LAST

    event_id: str = ""
    reason: Reason = Reason.DRAINED

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        return node_patches.mark_drained(self.event_id)(node)


@dataclass(frozen=True)
class StartCooldown(NodeAction):
    step: ClassVar[int] = Step.LAST

    until: datetime | None = None
    reason: Reason = Reason.COOLDOWN

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        assert self.until is not None
        return node_patches.start_cooldown(self.until)(node)


@dataclass(frozen=True)
class EndCooldown(NodeAction):
    step: ClassVar[int] = Step.LAST

    reason: Reason = Reason.COOLDOWN_OVER

    def build(self, node: NodeJson) -> dict[str, Any] | None:
        return node_patches.end_cooldown(node)


# ---- workload actions ------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadAction:
    workload: WorkloadKey
    basis: WorkloadBasis = field(default=UNKNOWN_BASIS, compare=False, repr=False, kw_only=True)

    def patch(self) -> dict[str, Any]:
        raise NotImplementedError

    def applies_to(self, fresh: WorkloadInfo) -> bool:
        """Whether the patch may be sent to the object as read now: it is still the one planned
        from, or (a surge) the count is already there and nothing else moved: an HPA whose
        minReplicas we raised (the step before the surge) scaled to it first, and our record is
        still to write."""
        if self.basis.matches(fresh):
            return True
        if not isinstance(self, ScaleUp) or fresh.replicas != self.replicas:
            return False
        return self.basis.matches(replace(fresh, replicas=self.basis.replicas))


def _workload_patch(
    annotations: Mapping[str, str | None], replicas: int | None = None
) -> dict[str, Any]:
    patch: dict[str, Any] = {"metadata": {"annotations": dict(annotations)}}
    if replicas is not None:
        patch["spec"] = {"replicas": replicas}
    return patch


@dataclass(frozen=True)
class ScaleUp(WorkloadAction):
    """Surge: `replicas` now, and the record of why (a new one, or a wave merged into it)."""

    step: ClassVar[int] = Step.CORDON

    replicas: int = 0
    record: Surge | None = None
    added: int = 0  # replicas this action adds
    reason: Reason = Reason.NOTICE

    def patch(self) -> dict[str, Any]:
        assert self.record is not None
        return _workload_patch({names.SURGE_ANNOTATION: self.record.to_json()}, self.replicas)


@dataclass(frozen=True)
class ScaleBack(WorkloadAction):
    """Replicas back to `replicas` (None: leave them, someone else changed them); the record
    kept as completed (`record`) or dropped (None)."""

    step: ClassVar[int] = Step.SCALE_BACK

    replicas: int | None = None
    reason: Reason = Reason.REPLACEMENTS_READY
    record: Surge | None = field(default=None, compare=False)

    def patch(self) -> dict[str, Any]:
        value = None if self.record is None else self.record.to_json()
        return _workload_patch({names.SURGE_ANNOTATION: value}, self.replicas)


@dataclass(frozen=True)
class ForgetSurge(WorkloadAction):
    """Drop a completed surge record once none of its doomed pods exists any more."""

    step: ClassVar[int] = Step.LAST

    reason: Reason = Reason.RECORD_DONE

    def patch(self) -> dict[str, Any]:
        return _workload_patch({names.SURGE_ANNOTATION: None})


@dataclass(frozen=True)
class SetSpare(WorkloadAction):
    """Keep the policy's spare replicas: `replicas` (None: leave them) and our record of the
    owner's count (None: drop it, the spares are gone)."""

    step: ClassVar[int] = Step.LAST

    replicas: int | None = None
    record: Spare | None = None
    reason: Reason = Reason.SPARE
    # With an availability target, why (words for people, `names.TARGET_WHY`): None leaves the
    # annotation as it is, "" removes it.
    why: str | None = None

    def patch(self) -> dict[str, Any]:
        record = self.record.to_json() if self.record is not None else None
        annotations: dict[str, str | None] = {names.SPARE_RECORD: record}
        if self.why is not None:
            annotations[names.TARGET_WHY] = self.why or None
        return _workload_patch(annotations, self.replicas)


@dataclass(frozen=True)
class RecordPolicy(WorkloadAction):
    """Record a valid placement policy as the one in force (None: drop the record, the policy
    annotations are gone), so that it stays in force while a later edit is invalid."""

    step: ClassVar[int] = Step.LAST

    policy: str | None = None
    reason: Reason = Reason.POLICY_VALID

    def patch(self) -> dict[str, Any]:
        return _workload_patch({names.POLICY_IN_FORCE: self.policy})


@dataclass(frozen=True)
class StartReturn(WorkloadAction):
    step: ClassVar[int] = Step.LAST

    replicas: int = 0
    record: ReturnRecord | None = None
    reason: Reason = Reason.RETURN

    def patch(self) -> dict[str, Any]:
        assert self.record is not None
        return _workload_patch({names.RETURN_ANNOTATION: self.record.to_json()}, self.replicas)


@dataclass(frozen=True)
class FinishReturn(WorkloadAction):
    """Scale back (None: leave replicas), keep the record as completed (or drop it), and on a
    give-up back the workload off until `backoff_until`."""

    step: ClassVar[int] = Step.SCALE_BACK

    replicas: int | None = None
    reason: Reason = Reason.RETURNED
    record: ReturnRecord | None = field(default=None, compare=False)
    backoff_until: datetime | None = field(default=None, compare=False)
    purpose: str = field(default="return", compare=False)  # the record's: return | risk

    def patch(self) -> dict[str, Any]:
        annotations: dict[str, str | None] = {
            names.RETURN_ANNOTATION: None if self.record is None else self.record.to_json()
        }
        if self.backoff_until is not None:
            annotations[names.RETURN_BACKOFF_ANNOTATION] = iso(self.backoff_until)
        return _workload_patch(annotations, self.replicas)


@dataclass(frozen=True)
class ForgetReturn(WorkloadAction):
    step: ClassVar[int] = Step.LAST

    reason: Reason = Reason.RECORD_DONE

    def patch(self) -> dict[str, Any]:
        return _workload_patch({names.RETURN_ANNOTATION: None})


# ---- pod actions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SetDeletionCost:
    step: ClassVar[int] = Step.BEFORE_SCALE_BACK

    pod: PodKey
    cost: str | None  # None: remove the annotation
    save_original: str | None = None  # store this as the original before lowering
    restore: bool = False
    reason: Reason = field(default=Reason.LOWEST_COST, compare=False)

    def patch(self) -> dict[str, Any]:
        """The JSON merge patch of the Pod."""
        annotations: dict[str, str | None] = {names.DELETION_COST: self.cost}
        if self.restore:
            annotations[names.ORIGINAL_COST_ANNOTATION] = None
        elif self.save_original is not None:
            annotations[names.ORIGINAL_COST_ANNOTATION] = self.save_original
        return {"metadata": {"annotations": annotations}}


@dataclass(frozen=True)
class EndLoadHold:
    """Remove the do-not-disrupt our webhook put on a pod only while it loaded (a return's new
    replica, names.HELD_UNTIL_READY), now that it is Ready: held longer, Karpenter could never
    consolidate or drift its node."""

    step: ClassVar[int] = Step.LAST

    pod: PodKey
    reason: Reason = field(default=Reason.LOADED, compare=False)

    def patch(self) -> dict[str, Any]:
        """The JSON merge patch of the Pod."""
        held = {names.KARPENTER_DO_NOT_DISRUPT: None, names.HELD_UNTIL_READY: None}
        return {"metadata": {"annotations": held}}


@dataclass(frozen=True)
class Evict:
    step: ClassVar[int] = Step.LAST

    pod: PodKey
    uid: str
    node: str
    event_id: str
    reason: Reason = Reason.NOTICE
    # Shorter than the pod's own when that would not end before the deadline; None: its own.
    grace_seconds: int | None = None

    def body(self) -> dict[str, Any]:
        """The Eviction POSTed to pods/eviction: only this pod (its UID), and the grace cut
        when the plan cut it."""
        namespace, name = self.pod
        options: dict[str, Any] = {"preconditions": {"uid": self.uid}}
        if self.grace_seconds is not None:
            options["gracePeriodSeconds"] = max(0, self.grace_seconds)
        return {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }


@dataclass(frozen=True)
class Delete:
    step: ClassVar[int] = Step.BEFORE_SCALE_BACK

    pod: PodKey
    uid: str
    node: str
    event_id: str
    grace_seconds: int
    reason: Reason = Reason.DEADLINE

    def body(self) -> dict[str, Any]:
        """The DeleteOptions of the DELETE: only this pod (its UID), with this grace."""
        return {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": max(0, self.grace_seconds),
            "preconditions": {"uid": self.uid},
        }


@dataclass(frozen=True)
class Hold:
    """A PodDisruptionBudget (maxUnavailable 0) on a surged Deployment's pods (its own
    selector), so that evictions by others wait until the replacements are Ready."""

    step: ClassVar[int] = Step.BEFORE_SCALE_BACK

    namespace: str
    workload: str
    selector: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    reason: Reason = field(default=Reason.NOTICE, compare=False)

    @property
    def name(self) -> str:
        return f"{names.HOLD_PREFIX}{self.workload}"[:253]

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {
                    names.MANAGED_BY_LABEL: names.MANAGED_BY,
                    names.HOLD_LABEL: self.workload,
                },
            },
            "spec": {"maxUnavailable": 0, "selector": dict(self.selector)},
        }


@dataclass(frozen=True)
class Bound:
    """Set an HorizontalPodAutoscaler's bounds: raised for a surge (the originals recorded on
    it), or put back (`original` None: the annotation removed). Planned from `resource_version`.
    `through`: KEDA's ScaledObject that owns the HPA, whose `minReplicaCount` and
    `maxReplicaCount` are set instead (keda.py); KEDA writes them onto the HPA."""

    namespace: str
    name: str
    min_replicas: int
    max_replicas: int
    original: str | None
    # (min, max, our annotation) as planned from: the executor checks the fresh object against it.
    basis: tuple[int, int, str | None] = field(default=(-1, -1, None), compare=False)
    reason: Reason = field(default=Reason.NOTICE, compare=False)
    through: str = ""

    @property
    def step(self) -> int:
        """Raised before the surge it protects; put back with the scale-back."""
        return Step.FIRST if self.original is not None else Step.SCALE_BACK

    def patch(self) -> dict[str, Any]:
        bounds = (
            {"minReplicaCount": self.min_replicas, "maxReplicaCount": self.max_replicas}
            if self.through
            else {"minReplicas": self.min_replicas, "maxReplicas": self.max_replicas}
        )
        return {
            "metadata": {"annotations": {names.HPA_ORIGINAL_ANNOTATION: self.original}},
            "spec": bounds,
        }


@dataclass(frozen=True)
class Release:
    """Delete a hold whose surge is over."""

    step: ClassVar[int] = Step.LAST

    namespace: str
    name: str
    reason: Reason = field(default=Reason.RECORD_DONE, compare=False)


# ---- the rest --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportBlocked:
    """No write: a workload that cannot fail over (an Event and a metric say why)."""

    step: ClassVar[int] = Step.LAST

    workload: WorkloadKey
    detail: str
    reason: Reason = Reason.NO_ON_DEMAND_POOL
    uid: str = field(default="", compare=False)


@dataclass(frozen=True)
class RecordHistory:
    """Write the eviction history with the notices it did not have yet."""

    step: ClassVar[int] = Step.CORDON

    history: History = field(compare=False, repr=False)
    new: tuple[Entry, ...] = ()
    reason: Reason = Reason.NEW_NOTICE

    def configmap(self, *, namespace: str, name: str) -> dict[str, Any]:
        """The ConfigMap that holds the history (created, or replaced from the version read)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if self.history.resource_version:
            metadata["resourceVersion"] = self.history.resource_version
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": {names.HISTORY_KEY: self.history.to_json()},
        }


Action = (
    Cordon
    | Restore
    | MarkDrained
    | StartCooldown
    | EndCooldown
    | ScaleUp
    | ScaleBack
    | ForgetSurge
    | SetSpare
    | RecordPolicy
    | StartReturn
    | FinishReturn
    | ForgetReturn
    | SetDeletionCost
    | EndLoadHold
    | Evict
    | Delete
    | ReportBlocked
    | RecordHistory
    | Hold
    | Release
    | Bound
)
ACTION_TYPES: tuple[type, ...] = (
    Cordon, Restore, MarkDrained, StartCooldown, EndCooldown, ScaleUp, ScaleBack, ForgetSurge,
    SetSpare, RecordPolicy, StartReturn, FinishReturn, ForgetReturn, SetDeletionCost, EndLoadHold,
    Evict, Delete, ReportBlocked, RecordHistory, Hold, Release, Bound,
)  # fmt: skip

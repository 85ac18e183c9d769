"""The project's fixed vocabulary: every enumerated word that code compares, counts or writes.

Each word is defined here once and imported everywhere else (`grep '"Preempt"'` finds this file and
tests). Cluster object names (annotations, labels, taints, condition types) live in `names.py`.
Nothing here does I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class EventType(StrEnum):
    """Azure Scheduled Events types (IMDS `EventType`)."""

    FREEZE = "Freeze"
    REBOOT = "Reboot"
    REDEPLOY = "Redeploy"
    PREEMPT = "Preempt"
    TERMINATE = "Terminate"


# A notice an operator asked for with the drain annotation; not an Azure type.
MANUAL: Final = "Manual"
# Karpenter is about to disrupt the node (drift, consolidation, expiry, repair): its
# `karpenter.sh/disrupted:NoSchedule` taint, which precedes its drain; not an Azure type.
KARPENTER_DISRUPTION: Final = "KarpenterDisruption"
# The metric label of any event type Azure may add later (labels stay bounded).
UNKNOWN: Final = "Unknown"
EVENT_TYPE_LABELS: Final = (*EventType, UNKNOWN)


def event_type_label(event_type: str) -> str:
    """Any string from a source mapped onto the bounded metric label set (Manual and Karpenter's
    disruption included)."""
    if event_type in (MANUAL, KARPENTER_DISRUPTION):
        return event_type
    return event_type if event_type in EVENT_TYPE_LABELS else UNKNOWN


class Source(StrEnum):
    """Where a notice came from."""

    AGENT = "agent"
    AKS_NPD = "aks-npd"
    MANUAL = "manual"
    KARPENTER = "karpenter"


class NoticePolicy(StrEnum):
    """What the controller does about a notice of one event type."""

    FAILOVER = "failover"  # surge replacements, then drain
    DRAIN = "drain"  # cordon and drain only
    NONE = "none"


DEFAULT_EVENT_POLICY: Final = {
    EventType.PREEMPT: NoticePolicy.FAILOVER,
    EventType.TERMINATE: NoticePolicy.FAILOVER,
    MANUAL: NoticePolicy.FAILOVER,
    KARPENTER_DISRUPTION: NoticePolicy.FAILOVER,
    EventType.REDEPLOY: NoticePolicy.DRAIN,
    EventType.REBOOT: NoticePolicy.DRAIN,
    EventType.FREEZE: NoticePolicy.NONE,
}
# The default of the planner's deadline_margin_seconds, here so that the emulator's demo, which
# may not import the controller, measures with the same margin.
DEFAULT_DEADLINE_MARGIN_SECONDS: Final = 5.0


class Reason(StrEnum):
    """Why the planner chose an action (a metric label and part of every log line)."""

    NOTICE = "Notice"
    REPLACEMENTS_READY = "ReplacementsReady"
    DOOMED_GONE = "DoomedPodsGone"
    DEADLINE = "DeadlineNear"
    CANCELLED = "NoticeGone"
    REPLICAS_CHANGED = "ReplicasChangedByOthers"
    DRAINED = "Drained"
    COOLDOWN = "PoolBeingEvicted"
    COOLDOWN_OVER = "CooldownOver"
    NO_ON_DEMAND_POOL = "NoCompatibleOnDemandPool"
    UNREADABLE_RECORD = "UnreadableSurgeRecord"
    SURGE_NOT_HELD = "SurgeNotHeld"  # someone set replicas back while replacements loaded
    NEW_NOTICE = "NewNotice"  # recorded in the eviction history
    RECORD_DONE = "RecordDone"  # a finished record whose pods are gone is dropped
    HOLD_BEFORE_NOTICE = "HoldBeforeNotice"  # a standing hold on a managed Deployment on spot
    SPARE = "SpareReplicas"  # the policy's spare replicas added, changed or removed
    SPARE_NOT_HELD = "SpareNotHeld"  # an owner keeps setting replicas back: spares given up
    # A target's error budget: a stretch below the owner's count began or ended (no Event).
    TARGET_ACCOUNT = "TargetAccount"
    POLICY_VALID = "PlacementPolicyValid"  # a valid placement policy recorded as the one in force
    COST_RESTORED = "CostRestored"
    LOWEST_COST = "LowestDeletionCost"
    LOADED = "LoadedReplicaReleased"  # a return's new replica Ready: its do-not-disrupt removed
    # Returns to spot.
    RETURN = "Return"
    RETURNED = "ReturnedToSpot"
    NOTICE_DURING_RETURN = "NoticeDuringReturn"
    LANDED_ON_DEMAND = "LandedOnDemand"
    SPOT_NOT_READY = "SpotReplicaNotReady"
    RETIRED_POD_GONE = "RetiredPodGone"
    # Moves off a spot group riskier than a workload's placement policy accepts.
    RISK_MOVE = "RiskAbovePolicy"
    MOVED = "MovedOffRisk"
    LANDED_RISKY = "LandedOutsidePolicy"


# How a return to spot ended (`rebalancer_controller_returns_total{outcome}`).
RETURN_OUTCOMES: Final = (
    Reason.RETURNED,
    Reason.NOTICE_DURING_RETURN,
    Reason.LANDED_ON_DEMAND,
    Reason.SPOT_NOT_READY,
    Reason.RETIRED_POD_GONE,
    Reason.REPLICAS_CHANGED,
)

# How a move off a risky spot group ended (`rebalancer_controller_risk_moves_total{outcome}`).
MOVE_OUTCOMES: Final = (
    Reason.MOVED,
    Reason.NOTICE_DURING_RETURN,
    Reason.LANDED_RISKY,
    Reason.SPOT_NOT_READY,
    Reason.RETIRED_POD_GONE,
    Reason.REPLICAS_CHANGED,
)

# Fail-over stages and their reasons (`rebalancer_controller_failovers_total{stage,reason}`).
FAILOVER_REASONS: Final = {
    "started": (Reason.NOTICE,),
    "completed": (
        Reason.REPLACEMENTS_READY,
        Reason.DOOMED_GONE,
        Reason.DEADLINE,
        Reason.CANCELLED,
        Reason.REPLICAS_CHANGED,
    ),
    "blocked": (Reason.NO_ON_DEMAND_POOL, Reason.UNREADABLE_RECORD, Reason.SURGE_NOT_HELD),
}


class ActionResult(StrEnum):
    """What applying one action came to (`rebalancer_controller_actions_total{outcome}`)."""

    APPLIED = "ok"
    NOOP = "noop"  # the object already looked as wanted
    REJECTED = "rejected"  # see Rejection
    ERROR = "error"  # the API kept failing; the next pass plans again
    DRY_RUN = "dry_run"


class Rejection(StrEnum):
    """Why the executor refused an action after reading the object afresh."""

    GONE = "gone"  # the object no longer exists
    STALE = "stale"  # it changed since the plan was made: the next pass plans again
    BLOCKED = "blocked"  # an eviction refused by a PodDisruptionBudget (429)
    FENCED = "fenced"  # this replica may have lost its Lease: it writes nothing more
    UNREADABLE = "unreadable"  # our record on it cannot be read


ACTION_OUTCOMES: Final = (
    *(r.value for r in ActionResult if r is not ActionResult.REJECTED),
    *(f"rejected_{r.value}" for r in Rejection),
)


class EventReason(StrEnum):
    """`reason` of the Kubernetes Events we write (docs/events.md)."""

    CORDONED = "SpotRebalancerCordoned"
    RESTORED = "SpotRebalancerRestored"
    SURGE = "SpotRebalancerSurge"
    SCALE_BACK = "SpotRebalancerScaleBack"
    SURGE_NOT_HELD = "SpotRebalancerSurgeNotHeld"
    REPLACEMENT_PLACED = "SpotRebalancerReplacementPlaced"
    EVICTED = "SpotRebalancerEvicted"
    EVICTION_BLOCKED = "SpotRebalancerEvictionBlocked"
    DELETED = "SpotRebalancerDeleted"
    DRAINED = "SpotRebalancerDrained"
    COOLDOWN = "SpotRebalancerCooldown"
    COOLDOWN_OVER = "SpotRebalancerCooldownOver"
    FAILOVER_BLOCKED = "SpotRebalancerFailoverBlocked"
    POLICY_REFUSED = "SpotRebalancerPolicyRefused"
    SPARES = "SpotRebalancerSpares"
    SPARES_NOT_HELD = "SpotRebalancerSparesNotHeld"
    MOVE_STARTED = "SpotRebalancerMoveStarted"
    MOVE_FINISHED = "SpotRebalancerMoveFinished"
    PLACED = "SpotRebalancerPlaced"
    RETURN_STARTED = "SpotRebalancerReturnStarted"
    RETURN_FINISHED = "SpotRebalancerReturnFinished"
    MISCONFIGURED = "SpotRebalancerMisconfigured"
    INPUT_REFUSED = "SpotRebalancerInputRefused"
    PLANNING_FAILED = "SpotRebalancerPlanningFailed"


class Check(StrEnum):
    """The doctor's checks (`rebalancer/controller/checkup.py`): finding ids, the metric's
    `check` label, the first word of a `SpotRebalancerMisconfigured` Event."""

    DEVICE_PLUGIN_NOT_ON_SPOT = "device-plugin-not-on-spot"
    DEVICE_PLUGIN_MISSING = "device-plugin-missing"
    GPUS_NOT_ADVERTISED = "gpus-not-advertised"
    AGENT_NOT_ON_SPOT = "agent-not-on-spot"
    WORKLOAD_NOT_ON_SPOT = "workload-cannot-use-spot"
    WORKSPACE_NOT_ON_SPOT = "kaito-workspace-cannot-use-spot"
    NO_ON_DEMAND_FALLBACK = "workload-no-on-demand-fallback"
    POOL_AT_ZERO_UNDECLARED = "on-demand-pool-undeclared"
    NODEPOOL_SPOT_ONLY = "nodepool-spot-only"
    NODEPOOL_KEEPS_EMPTY_NODES = "nodepool-keeps-empty-nodes"
    FALLBACK_KEPT_IDLE = "on-demand-fallback-kept-idle"
    TARGET_NOT_ACTED_ON = "availability-target-not-acted-on"

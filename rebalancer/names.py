"""Every name the project writes on cluster objects, under one DNS prefix.

Outside tools and the two processes parse these; docs/interfaces.md documents them.
Nothing here does I/O.
"""

from typing import Final

from rebalancer.vocabulary import EventType

PREFIX: Final = "spot-rebalancer.io"

# Written by the agent on its own Node.
CONDITION_TYPE: Final = f"{PREFIX}/ScheduledEvent"
EVENTS_ANNOTATION: Final = f"{PREFIX}/scheduled-events"

# Written by the controller on a Node once it has been drained for an event: a comma-separated
# list of EventIds. The agent acknowledges an event to Azure only when its id is listed here.
DRAINED_FOR_ANNOTATION: Final = f"{PREFIX}/drained-for"

# Names owned by other components that we read and must never write.
AKS_SPOT_LABEL: Final = "kubernetes.azure.com/scalesetpriority"
# AKS node auto-drain's taint on a node it cordons for a Scheduled Event (AKS node auto-repair
# docs): a drain for an eviction, not an upgrade's.
AKS_REMEDIATOR_TAINT: Final = "remediator.aks.microsoft.com/unschedulable"
AKS_AGENTPOOL_LABEL: Final = "kubernetes.azure.com/agentpool"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
# Karpenter's (AKS node auto-provisioning, KAITO): the NodePool of a Node and its capacity type
# (spot, on-demand, reserved); on a pod, do-not-disrupt keeps voluntary disruption (consolidation,
# drift) off its node.
KARPENTER_NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
KARPENTER_CAPACITY_TYPE_LABEL: Final = "karpenter.sh/capacity-type"
KARPENTER_DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
# Karpenter's taint (NoSchedule) on a node it is about to disrupt, before its drain.
KARPENTER_DISRUPTED_TAINT: Final = "karpenter.sh/disrupted"

# An operator sets this on a Node to have it drained now, as if a notice had arrived. Its value
# is "now", or an RFC 3339 deadline; anything else also means now.
DRAIN_REQUEST_ANNOTATION: Final = f"{PREFIX}/drain"

# AKS's node-problem-detector conditions for Scheduled Events (shared reference E).
NPD_PREEMPTION_CONDITION: Final = "PreemptionScheduled"
NPD_ANY_EVENT_CONDITION: Final = "VMEventScheduled"
NPD_PER_TYPE_CONDITIONS: Final = {f"{event_type}Scheduled": event_type for event_type in EventType}

# ---- written by the controller ---------------------------------------------------------------

# On a Node it cordoned: the event it cordoned for, and what it changed (so undo is exact).
CORDONED_FOR: Final = f"{PREFIX}/cordoned-for"
WAS_UNSCHEDULABLE: Final = f"{PREFIX}/was-unschedulable"
ADDED_LB_EXCLUSION: Final = f"{PREFIX}/added-lb-exclusion"
EVICTING_TAINT: Final = f"{PREFIX}/evicting"  # NoSchedule, on a node with a notice
# On the rest of an evicted spot pool: PreferNoSchedule until this time.
COOLDOWN_TAINT: Final = f"{PREFIX}/cooldown"
COOLDOWN_UNTIL: Final = f"{PREFIX}/cooldown-until"
# On a Deployment: the surge and the return to spot in progress, and a return's back-off.
SURGE_ANNOTATION: Final = f"{PREFIX}/surge"
RETURN_ANNOTATION: Final = f"{PREFIX}/return"
RETURN_BACKOFF_ANNOTATION: Final = f"{PREFIX}/return-backoff-until"
# On a pod whose deletion cost we lowered: its cost before.
ORIGINAL_COST_ANNOTATION: Final = f"{PREFIX}/original-deletion-cost"
# On a PodDisruptionBudget of ours (`spot-rebalancer-hold-<deployment>`, maxUnavailable 0, the
# Deployment's own selector) that holds a surged Deployment's pods while replacements load, so
# evictions by others (AKS node auto-drain, kubectl drain) wait; our own deletions do not. The
# value is the Deployment's name.
HOLD_LABEL: Final = f"{PREFIX}/hold-for"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "spot-rebalancer"
HOLD_PREFIX: Final = "spot-rebalancer-hold-"
# On an HorizontalPodAutoscaler whose minReplicas (and maxReplicas) we raised for a surge: its
# values before, "min,max", so they are put back exactly when the surge ends.
HPA_ORIGINAL_ANNOTATION: Final = f"{PREFIX}/original-replicas-bounds"
# Set by a user on a workload: leave it alone.
OPT_OUT_ANNOTATION: Final = f"{PREFIX}/ignore"
# A workload's placement policy, set by a user on its Deployment or StatefulSet (schema:
# rebalancer/controller/policy.py, docs/placement.md).
MIN_ON_DEMAND: Final = f"{PREFIX}/min-on-demand"  # replicas kept on on-demand pools, at least
SPARE_REPLICAS: Final = f"{PREFIX}/spare-replicas"  # replicas kept beyond the owner's count
POOLS: Final = f"{PREFIX}/pools"  # comma-separated agent pools that may serve it; all if absent
MAX_RISK: Final = f"{PREFIX}/max-risk"  # low | medium | high: the riskiest spot group accepted
SPREAD: Final = f"{PREFIX}/spread"  # zone | pool | none: what its spot replicas spread over
FAILOVER_TO: Final = f"{PREFIX}/failover-to"  # on-demand | spot: where replacements go
# The share of time, in percent, with the owner's count Ready: the controller then decides the
# spot and on-demand replicas (rebalancer/controller/target.py).
AVAILABILITY_TARGET: Final = f"{PREFIX}/availability-target"
# Ours, on the workload with a target: why it keeps what it keeps (words, for people).
TARGET_WHY: Final = f"{PREFIX}/target-why"
# Ours, on the workload: the spare replicas we keep on it (JSON: the owner's count, ours added).
SPARE_RECORD: Final = f"{PREFIX}/spare"
# Ours, on the workload: the last valid policy (JSON), in force while the declared one is invalid.
POLICY_IN_FORCE: Final = f"{PREFIX}/placement-in-force"
# Ours, on a pod our admission webhook placed: "<pool>/<zone>" it chose, and why.
PLACED: Final = f"{PREFIX}/placed"
PLACED_WHY: Final = f"{PREFIX}/placed-why"
# Ours, on a pod our admission webhook placed: the uid of that AdmissionReview. The webhook counts
# each of its placements once, from its own record until its caches show the pod that carries it.
PLACED_REVIEW: Final = f"{PREFIX}/placed-review"
# Ours, on a pod our admission webhook held from Karpenter's voluntary disruption only while it
# loads (a return's or a move's new replica: `karpenter.sh/do-not-disrupt: "true"` added beside
# it). Once the pod is Ready and the return is over the controller removes both; a pod's own
# do-not-disrupt, a spare's or a fail-over replacement's never carries it and is never removed.
HELD_UNTIL_READY: Final = f"{PREFIX}/held-until-ready"
# The eviction history ConfigMap's key (the ConfigMap is named after the Lease: `<lease>-history`).
HISTORY_KEY: Final = "history.json"

# ---- owned by Kubernetes, read or written by us -----------------------------------------------

LB_EXCLUSION_LABEL: Final = "node.kubernetes.io/exclude-from-external-load-balancers"
DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
GPU_RESOURCE: Final = "nvidia.com/gpu"
# Set by Helm on what a release installed: a patch to such an object lasts until its next upgrade.
HELM_RELEASE_ANNOTATION: Final = "meta.helm.sh/release-name"
# AKS labels the nodes of GPU pools with their accelerator (`nvidia`).
AKS_ACCELERATOR_LABEL: Final = "kubernetes.azure.com/accelerator"
# The chart's labels, by which the doctor and the plugin find our own agent and controller.
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
PART_OF: Final = "spot-rebalancer"

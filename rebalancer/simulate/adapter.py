"""The one place the simulator touches the controller's planner.

Builds the planner's `Snapshot` from the virtual world, calls `plan(snapshot, settings)`, and
applies each action to the world through the very write the executor sends (the action's own
`build`, `patch()` or `body()`, applied to the object's API form with a JSON merge patch and read
back), so a cordon is whatever the product's cordon patch makes it. When the
planner's names change (the controller is being refactored: an eviction history is becoming
part of the snapshot), only this module has to follow.

The virtual world's taints are the controller's `Taint`, from here (its scheduler matches them
by Kubernetes' rules, `rebalancer.upstream.placement`, not by the controller's reading). The
`eviction-aware` policy reaches the controller through here too: the risk of each spot group
assessed from the world's eviction history (the record the planner keeps, as the
controller keeps its history ConfigMap), and the admission webhook's answer for each new pod.

Controller names used: `rebalancer.controller.planner`: `plan`, `Plan`, `Settings`;
`rebalancer.controller.snapshot`: `Snapshot`; `rebalancer.controller.history`: `History`,
`Entry`, `history_from_configmap`; `rebalancer.controller.actions`: the action classes and
their writes (`build`, `patch`, `applies_to`, `body`, `configmap`); `rebalancer.controller.returns`:
`ReturnSettings`; `rebalancer.controller.model`: `NodeInfo`, `PodInfo`, `WorkloadInfo`,
`Owner`, `Surge`, `ReturnRecord`; `rebalancer.controller.pools`: `Pool`;
`rebalancer.controller.scheduling`: `Taint`; `rebalancer.controller.risk`: `assess`,
`RiskSettings`, `Risk`, `GroupKey`;
`rebalancer.controller.admission`: `View`, `review`; `rebalancer.controller.policy`: `parse`,
`PolicyError`; `rebalancer.names`; `rebalancer.vocabulary`: `Policy`, `Reason`;
`rebalancer.notices`: `Notice`, `Source`; `rebalancer.controller.settings`: `ControllerSettings`
(where the scenario's values of the controller's settings nest).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from rebalancer import names
from rebalancer.controller.actions import (
    Action,
    Bound,
    Delete,
    EndLoadHold,
    Evict,
    FinishReturn,
    Hold,
    NodeAction,
    RecordHistory,
    Release,
    ReportBlocked,
    SetDeletionCost,
    WorkloadAction,
)
from rebalancer.controller.admission import View, review
from rebalancer.controller.history import History, history_from_configmap
from rebalancer.controller.model import NodeInfo, Owner, PodInfo, WorkloadInfo
from rebalancer.controller.planner import Plan, Settings, plan
from rebalancer.controller.policy import PolicyError, parse
from rebalancer.controller.pools import Pool
from rebalancer.controller.records import ReturnRecord, Surge
from rebalancer.controller.returns import ReturnSettings
from rebalancer.controller.risk import GroupKey, Risk, RiskSettings, assess
from rebalancer.controller.scheduling import Taint
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.target import TargetSettings, parse_target
from rebalancer.names import (
    COOLDOWN_UNTIL,
    FAILOVER_TO,
    GPU_RESOURCE,
    MAX_RISK,
    MIN_ON_DEMAND,
    PLACED,
    PLACED_WHY,
    RETURN_ANNOTATION,
    RETURN_BACKOFF_ANNOTATION,
    SPARE_REPLICAS,
    SPREAD,
    SURGE_ANNOTATION,
)
from rebalancer.notices import Notice
from rebalancer.setting_groups import nest
from rebalancer.simulate import InputError
from rebalancer.simulate.merge_patch import merge_patch
from rebalancer.simulate.workload import CONTROLLER_SETTINGS
from rebalancer.vocabulary import EventType, Reason, Source
from rebalancer.vocabulary import NoticePolicy as EventPolicy

if TYPE_CHECKING:
    from rebalancer.simulate.workload import Prices, Scenario
    from rebalancer.simulate.world import Deployment, Node, Pod, World

# The controller's taint, the world's too (its patches write them as the executor's do).
__all__ = ["Taint"]

NAMESPACE = "inference"
# Where the controller keeps its eviction history (`<lease name>-history`, the chart's default).
HISTORY_CONFIGMAP = "spot-rebalancer-controller-history"

T = TypeVar("T")

# Virtual time 0 (the first tick of the traces) as the planner's wall clock.
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
# Past the planner's one strict "later than" (a return's pending timeout).
NUDGE_SECONDS = 0.001


def _nested_settings(scenario: Scenario, group: str, cls: type[T]) -> T:
    """One of the controller's settings types (`planner`, `risk`) with the scenario's values of
    its settings (the controller's names, REBALANCER_...; None: the default), nested where the
    controller nests them. Built from the type itself: a ControllerSettings would read the
    environment."""
    values = {
        name: getattr(scenario, name)
        for name in CONTROLLER_SETTINGS
        if getattr(scenario, name) is not None
    }
    try:
        return cls(**nest(ControllerSettings, values).get(group, {}))
    except ValidationError as error:
        first = error.errors()[0]
        raise InputError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def failover_settings(world: World) -> Settings:
    """Today's product with its defaults, or the scenario's values of the controller's
    settings: fail over make-before-break, return to spot. The pools are declared
    (REBALANCER_POOLS), as the README asks for autoscaled pools."""
    planner = _nested_settings(world.scenario, "planner", Settings)
    return replace(planner, declared_pools=declared_pools(world))


def target_settings(world: World, prices: Prices) -> Settings:
    """`failover_settings` with the availability target's model set as a user would set it
    for this workload: recovery = on-demand provisioning + model load - notice (means), spot's
    price as a share of on-demand's (the pools' mean)."""
    scenario = world.scenario
    recovery = (
        scenario.on_demand_provision_seconds.mean
        + scenario.load_seconds.mean
        - scenario.notice_seconds.mean
    )
    spot = [pool.price for pool in world.pools.values() if pool.spot]
    share = (sum(spot) / len(spot)) / prices.on_demand if spot and prices.on_demand else 0.2
    return replace(
        failover_settings(world),
        target=TargetSettings(recovery_seconds=max(0.0, recovery), spot_price_share=share),
    )


def availability_target(text: str, *, where: str) -> str:
    """The workload's availability target as the controller reads it (`target.parse_target`)."""
    try:
        return f"{parse_target(text):g}"
    except ValueError as error:
        raise InputError(f"{where}: {error}") from None


def drain_settings(world: World) -> Settings:
    """The product configured as a plain handler: Preempt -> cordon and drain, no cool-down
    taints that steer placement, no return to spot."""
    planner = _nested_settings(world.scenario, "planner", Settings)
    policies = dict(planner.event_policy)
    policies.update({EventType.PREEMPT: EventPolicy.DRAIN, EventType.TERMINATE: EventPolicy.DRAIN})
    return replace(
        planner,
        event_policy=policies,
        cooldown_seconds=0.0,
        returns=ReturnSettings(enabled=False),
        declared_pools=declared_pools(world),
    )


# ---- eviction-aware: the policy, the risk, the webhook -----------------------------------------

# The controller's recorder reassesses risk every few seconds; with no new Preempt a level only
# changes as old ones fade, so the planner looks again this often (the traces' own resolution
# is 5 to 10 minutes).
RISK_RECHECK_SECONDS = 300.0


def placement_annotations(scenario: Scenario) -> dict[str, str]:
    """The workload's placement policy, as its Deployment's annotations would declare it;
    checked by the controller's own schema."""
    annotations = {
        MIN_ON_DEMAND: str(scenario.min_on_demand),
        SPARE_REPLICAS: str(scenario.spare_replicas),
        MAX_RISK: scenario.max_risk,
        SPREAD: scenario.spread,
        FAILOVER_TO: scenario.failover_to,
    }
    try:
        parse(annotations)
    except PolicyError as error:
        raise InputError(f"placement policy: {error}") from None
    return annotations


def risk_settings(scenario: Scenario) -> RiskSettings:
    """The controller's risk model with its defaults, or the scenario's values of its settings
    (REBALANCER_RISK_...). No Azure data: the traces carry none, so the prior is the setting's."""
    defaults = RiskSettings()
    high = _or(scenario.risk_high_rate_per_hour, defaults.high_rate_per_hour)
    medium = _or(scenario.risk_medium_rate_per_hour, defaults.medium_rate_per_hour)
    if high < medium:
        raise InputError(f"riskHighRatePerHour {high} is below riskMediumRatePerHour {medium}")
    return _nested_settings(scenario, "risk", RiskSettings)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def risks(
    world: World, nodes: Mapping[str, NodeInfo], settings: RiskSettings
) -> dict[GroupKey, Risk]:
    """What the controller's recorder assesses: every spot group on the Nodes or in the history."""
    history = world.history if world.history is not None else History()
    assessed = assess(
        nodes=nodes.values(), history=history, now=at(world.now), settings=settings,
        previous=world.risk_levels,
    )  # fmt: skip
    world.risk_levels = {key: risk.level for key, risk in assessed.items()}
    return assessed


class Webhook:
    """The controller's admission webhook for the world's new pods: the AdmissionReview it would
    get, `review` on a view of this instant (the controller's is its last pass, seconds old), and
    its JSON patch applied to the pod."""

    def __init__(self, risk: RiskSettings) -> None:
        self.risk = risk

    def __call__(self, world: World, pod: Pod) -> None:
        deployment = world.deployments[pod.deployment]
        owner = {"kind": "ReplicaSet", "name": _rs(deployment.name), "controller": True}
        container = {"name": "model", "resources": {"limits": {GPU_RESOURCE: str(deployment.gpus)}}}
        pod_object: dict[str, Any] = {
            "metadata": {"name": pod.name, "namespace": NAMESPACE, "ownerReferences": [owner]},
            "spec": {**copy.deepcopy(deployment.template_spec), "containers": [container]},
        }
        request = {
            "uid": pod.uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": NAMESPACE,
            "object": pod_object,
        }
        state = snapshot(world, risk=self.risk)
        answer = review(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
            View(state, state.risks, declared_pools(world)),
            (),
        )
        encoded = answer.response.get("response", {}).get("patch")
        if encoded is None:
            return
        for operation in json.loads(base64.b64decode(encoded)):
            _json_patch_add(pod_object, operation)
        spec = pod_object["spec"]
        pod.spec = {k: spec[k] for k in ("tolerations", "nodeSelector", "affinity") if k in spec}
        pod.annotations = dict(pod_object["metadata"].get("annotations") or {})


def _json_patch_add(document: dict[str, Any], operation: Mapping[str, Any]) -> None:
    """RFC 6902 `add` to an object member: all the webhook sends."""
    if operation.get("op") != "add":
        raise ValueError(f"the simulator applies only add operations, not {operation!r}")
    *parents, last = [
        part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]
    ]
    target = document
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = operation["value"]


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def seconds(moment: datetime) -> float:
    return (moment - EPOCH).total_seconds()


def _rs(deployment: str) -> str:
    return f"{deployment}-rs"


def declared_pools(world: World) -> dict[str, Pool]:
    """Every pool, as REBALANCER_POOLS would declare it: autoscaled pools may have no Node."""
    return {
        pool.name: Pool(
            name=pool.name,
            spot=pool.spot,
            taints=pool.taints,
            labels=pool.labels(world.scenario),
            nodes=(),
            gpus_per_node=world.scenario.node_gpus(),
        )
        for pool in world.pools.values()
    }


def snapshot(world: World, *, risk: RiskSettings | None = None) -> Snapshot:
    """The planner's view of the world; with `risk`, the risk of every spot group too (what
    the controller's recorder puts in it)."""
    now = at(world.now)
    nodes: dict[str, NodeInfo] = {}
    for node in world.nodes.values():
        if not node.ready(world.now):
            continue  # a Node object exists once its kubelet registers: at Ready, here
        notices: tuple[Notice, ...] = ()
        if node.notice is not None:
            notices = (
                Notice(
                    node=node.name,
                    event_type=EventType.PREEMPT,
                    deadline=at(node.notice.deadline),
                    event_id=node.notice.event_id,
                    source=Source.AGENT,
                    seen_at=at(node.notice.seen_at),
                ),
            )
        taints = tuple(node.all_taints())
        nodes[node.name] = NodeInfo(
            name=node.name,
            labels=dict(node.labels),
            annotations=dict(node.annotations),
            taints=taints,
            unschedulable=node.unschedulable,
            ready=True,
            allocatable_gpus=node.gpus,
            notices=notices,
            created=at(node.ready_at),  # the Node object is made when its kubelet registers
        )
    pods: dict[tuple[str, str], PodInfo] = {}
    for pod in world.pods.values():
        pods[(NAMESPACE, pod.name)] = PodInfo(
            namespace=NAMESPACE,
            name=pod.name,
            uid=pod.uid,
            node_name=pod.node or "",
            phase="Running" if pod.node else "Pending",
            ready=world.pod_ready(pod),
            deleting=pod.deleting,
            deletion_at=at(pod.deletion_at) if pod.deletion_at is not None else None,
            owner=Owner("ReplicaSet", _rs(pod.deployment)),
            gpus=world.deployments[pod.deployment].gpus,
            deletion_cost=pod.deletion_cost,
            original_deletion_cost=pod.original_cost,
            grace_seconds=world.scenario.grace_seconds,
            created=at(pod.created),
            placed=pod.annotations.get(PLACED, ""),
            placed_why=pod.annotations.get(PLACED_WHY, ""),
        )
    workloads: dict[tuple[str, str, str], WorkloadInfo] = {}
    for deployment in world.deployments.values():
        surge = None
        raw = deployment.annotations.get(SURGE_ANNOTATION)
        if raw is not None:
            surge = Surge.from_json(raw)
        info = WorkloadInfo(
            kind="Deployment",
            namespace=NAMESPACE,
            name=deployment.name,
            replicas=deployment.replicas,
            ready_replicas=sum(1 for p in world.pods_of(deployment.name) if world.pod_ready(p)),
            template_spec=deployment.template_spec,
            gpus_per_replica=deployment.gpus,
            annotations=dict(deployment.annotations),
            surge=surge,
        )
        workloads[info.key] = info
    if world.history is None:
        # The controller starts its record when it first runs: here, at the traces' start.
        world.history = History(since=at(world.start))
    return Snapshot(
        now=now,
        nodes=nodes,
        pods=pods,
        workloads=workloads,
        replicaset_owners={(NAMESPACE, _rs(d)): d for d in world.deployments},
        history=world.history,
        risks=risks(world, nodes, risk) if risk is not None else {},
    )


def run_planner(
    world: World, settings: Settings, *, risk: RiskSettings | None = None
) -> tuple[Plan, bool]:
    """One planning pass: plan on a fresh snapshot, apply every action to the world."""
    world.counters.planner_calls += 1
    result = plan(snapshot(world, risk=risk), settings)
    changed = False
    for action in result.actions:
        changed |= apply(world, action)
    return result, changed


def apply(world: World, action: Action) -> bool:
    """What the executor and the cluster make of one action; True if it changed anything.

    Each write is the product's own: a node action's `build` on the Node as the API would show
    it, a workload action's `patch()` (sent only if it `applies_to` the Deployment now), a pod's
    merge patch, the Eviction or DeleteOptions body, the history's ConfigMap, each applied as
    the API server would (`merge_patch`, the UID precondition, the grace it carries)."""
    match action:
        case NodeAction():
            node = world.nodes.get(action.node)
            if node is None or not _patch_node(node, action.build(node_object(node))):
                return False
        case SetDeletionCost() | EndLoadHold():
            pod = world.pods.get(action.pod[1])
            if pod is None or not _patch_pod(pod, action.patch()):
                return False
        case Evict():
            if not _evict(world, action.body()):
                return False
        case Delete():
            if not _delete(world, action.pod[1], action.body()):
                return False
        case ReportBlocked():
            return False
        case Hold() | Release() | Bound():
            # Holds against evictions by others and HPA bounds: the virtual cluster has neither
            # another evictor (AKS node auto-drain, kubectl drain) nor an HPA, so nothing a
            # replica sees changes.
            return False
        case WorkloadAction():
            if not _patch_deployment(world, action):
                return False
            moved = isinstance(action, FinishReturn) and action.reason == Reason.MOVED
            if moved and world.now >= 0:
                world.counters.moves += 1
        case RecordHistory():
            # Read back as the controller reads its ConfigMap: what it keeps is what was written.
            configmap = action.configmap(namespace=NAMESPACE, name=HISTORY_CONFIGMAP)
            world.history = history_from_configmap(configmap)
            return False  # nothing the pods or nodes see
        case _:
            raise TypeError(f"the simulator cannot apply {action!r}")
    world.touch()
    return True


# ---- the world's objects as the API shows them, and back -----------------------------------


def node_object(node: Node) -> dict[str, Any]:
    """The Node as the API shows it (the fields our patches read and write): the pool's taints
    and ours in one list, `unschedulable` only when set, a taint's empty value left out."""
    spec: dict[str, Any] = {"taints": [_taint_json(t) for t in node.all_taints()]}
    if node.unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {
            "name": node.name,
            "labels": dict(node.labels),
            "annotations": dict(node.annotations),
        },
        "spec": spec,
    }


def _taint_json(taint: Taint) -> dict[str, str]:
    data = {"key": taint.key, "value": taint.value, "effect": taint.effect}
    return {k: v for k, v in data.items() if v}


def _patch_node(node: Node, patch: Mapping[str, Any] | None) -> bool:
    """`patch` (None: nothing to write) applied to the Node; True if it changed."""
    if patch is None:
        return False
    before = node_object(node)
    after = merge_patch(before, patch)
    if after == before:
        return False
    meta, spec = after.get("metadata") or {}, after.get("spec") or {}
    node.labels = dict(meta.get("labels") or {})
    node.annotations = dict(meta.get("annotations") or {})
    node.unschedulable = bool(spec.get("unschedulable", False))
    taints = [Taint.from_json(t) for t in spec.get("taints") or []]
    node.taints = [t for t in taints if t not in node.pool.taints]
    return True


def pod_object(pod: Pod) -> dict[str, Any]:
    """The Pod's metadata as the API shows it: the admission's annotations and the deletion
    costs (which the world keeps apart, for the ReplicaSet's ranking)."""
    annotations = dict(pod.annotations)
    if pod.deletion_cost is not None:
        annotations[names.DELETION_COST] = pod.deletion_cost
    if pod.original_cost is not None:
        annotations[names.ORIGINAL_COST_ANNOTATION] = pod.original_cost
    return {
        "metadata": {
            "name": pod.name,
            "namespace": NAMESPACE,
            "uid": pod.uid,
            "annotations": annotations,
        }
    }


def _patch_pod(pod: Pod, patch: Mapping[str, Any]) -> bool:
    before = pod_object(pod)
    after = merge_patch(before, patch)
    if after == before:
        return False
    annotations = dict((after.get("metadata") or {}).get("annotations") or {})
    pod.deletion_cost = annotations.pop(names.DELETION_COST, None)
    pod.original_cost = annotations.pop(names.ORIGINAL_COST_ANNOTATION, None)
    pod.annotations = annotations
    return True


def _evict(world: World, eviction: Mapping[str, Any]) -> bool:
    """pods/eviction: the pod named, if its UID is the precondition's (else a new pod that took
    the name: not ours), deleted with the grace the Eviction carries, or its own."""
    name = str((eviction.get("metadata") or {}).get("name", ""))
    return _delete(world, name, eviction.get("deleteOptions") or {})


def _delete(world: World, name: str, options: Mapping[str, Any]) -> bool:
    """A DELETE with these DeleteOptions: UID precondition, grace (default: the pod's own, the
    scenario's terminationGracePeriodSeconds). A pod already terminating gets the shorter of
    its grace and this one, as the API server shortens a graceful deletion."""
    pod = world.pods.get(name)
    if pod is None:
        return False
    uid = (options.get("preconditions") or {}).get("uid")
    if uid is not None and uid != pod.uid:
        return False
    grace = options.get("gracePeriodSeconds")
    return world.delete_pod(pod, world.scenario.grace_seconds if grace is None else float(grace))


def deployment_object(world: World, deployment: Deployment) -> dict[str, Any]:
    """The Deployment as the API shows it (what the executor reads afresh before a patch)."""
    ready = sum(1 for p in world.pods_of(deployment.name) if world.pod_ready(p))
    return {
        "metadata": {
            "name": deployment.name,
            "namespace": NAMESPACE,
            "annotations": dict(deployment.annotations),
        },
        "spec": {"replicas": deployment.replicas, "template": {"spec": deployment.template_spec}},
        "status": {"readyReplicas": ready},
    }


def _patch_deployment(world: World, action: WorkloadAction) -> bool:
    """The executor's write: the fresh Deployment checked against the plan (`applies_to`),
    then the action's merge patch."""
    deployment = world.deployments[action.workload[2]]
    before = deployment_object(world, deployment)
    if not action.applies_to(WorkloadInfo.from_json("Deployment", before)):
        return False
    after = merge_patch(before, action.patch())
    if after == before:
        return False
    deployment.annotations = dict((after.get("metadata") or {}).get("annotations") or {})
    deployment.replicas = int(after["spec"]["replicas"])
    return True


def next_wakeup(
    world: World, result: Plan, settings: Settings, *, risk: RiskSettings | None = None
) -> float | None:
    """When the planner's answer would change with time alone: a notice's deadline minus the
    margin, a cool-down's end, a pool becoming quiet enough for a return, a return's timeout, a
    back-off's end; with risk, its next reassessment (levels fall as Preempts fade)."""
    times: list[float] = []
    if risk is not None:
        times.append(world.now + RISK_RECHECK_SECONDS)
    for notice in result.active.values():
        if notice.deadline is not None:
            times.append(seconds(notice.deadline) - settings.deadline_margin_seconds)
    for node in world.nodes.values():
        until = node.annotations.get(COOLDOWN_UNTIL)
        if until is not None:
            times.append(seconds(_parse(until)))
    if settings.returns.enabled:
        for pool in world.pools.values():
            if pool.spot:
                last = pool.preempts[-1] if pool.preempts else world.start
                times.append(max(last, world.start) + settings.returns.quiet_seconds)
        for deployment in world.deployments.values():
            raw = deployment.annotations.get(RETURN_ANNOTATION)
            if raw is not None:
                record = ReturnRecord.from_json(raw)
                if not record.completed:
                    started = seconds(_parse(record.started_at))
                    timeout = settings.returns.pending_timeout_seconds
                    times.append(started + timeout + NUDGE_SECONDS)
            backoff = deployment.annotations.get(RETURN_BACKOFF_ANNOTATION)
            if backoff is not None:
                times.append(seconds(_parse(backoff)))
    future = [t for t in times if t > world.now]
    return min(future) if future else None


def _parse(text: str) -> datetime:
    from rebalancer.timefmt import parse_iso

    moment = parse_iso(text)
    if moment is None:
        raise ValueError(f"unreadable time {text!r}")
    return moment

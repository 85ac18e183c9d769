"""Slim, frozen views of the cluster objects the planner reads, built from raw API JSON.

The informers keep these instead of full objects: 50 000 pods as generated client models are
slow and large; these hold only what a decision needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rebalancer import names, pool_kind
from rebalancer.controller.records import MAX_RECORD_REPLICAS, ReturnRecord, Spare, Surge
from rebalancer.controller.scheduling import Taint
from rebalancer.names import (
    DELETION_COST,
    GPU_RESOURCE,
    HELM_RELEASE_ANNOTATION,
    HOLD_LABEL,
    HPA_ORIGINAL_ANNOTATION,
    MIRROR_ANNOTATION,
    OPT_OUT_ANNOTATION,
    ORIGINAL_COST_ANNOTATION,
    SURGE_ANNOTATION,
)
from rebalancer.notices import Notice, notices_of
from rebalancer.strict import moment, whole_number
from rebalancer.timefmt import parse_iso

# A Kubernetes quantity: a signed decimal and an optional suffix (binary SI, decimal SI or an
# exponent), in ASCII only: [0-9], never \d (which matches every Unicode digit).
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,3})?",
    re.ASCII,
)
_MULTIPLIERS = {
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "E": 1e18,
}  # fmt: skip
MAX_QUANTITY_LENGTH = 64


def quantity(text: str) -> float | None:
    """A Kubernetes quantity ('500m', '16Gi', '1', '2k', '1e3') as a finite float; None for text
    that is not one. A Pod in an admission review is the client's text: `float()` would read
    full-width digits ('\uff13' as 3), '1_0', 'nan', and '1e999' as infinity (which `int()` then
    raises on)."""
    text = text.strip(" \t")
    match = _QUANTITY.fullmatch(text) if len(text) <= MAX_QUANTITY_LENGTH else None
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    if len(suffix) > 1 and suffix[0] in "eE":
        parsed = float(number + suffix)
    else:
        parsed = float(number) * _MULTIPLIERS[suffix]
    return parsed if math.isfinite(parsed) else None


def parse_quantity(value: object) -> float:
    """A quantity as a float; 0 for what is not one (see `quantity`)."""
    return quantity(str(value or "0")) or 0.0


def _gpu_quantities(pod_spec: Mapping[str, Any]) -> Iterable[object]:
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            wanted = (resources.get(kind) or {}).get(GPU_RESOURCE)
            if wanted is not None:
                yield wanted


def unreadable_gpus(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a GPU request of the pod is not a quantity (the API server refuses such a pod)."""
    return any(quantity(str(q)) is None for q in _gpu_quantities(pod_spec))


def gpus_of(pod_spec: Mapping[str, Any]) -> int:
    """GPUs a pod asks for: the sum over its containers (extended resources: limit = request)."""
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        wanted = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        total += int(parse_quantity(wanted))
    return total


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    allocatable_gpus: int
    notices: tuple[Notice, ...] = ()
    skipped: tuple[str, ...] = ()
    resource_version: str = ""
    raw_taints: tuple[Mapping[str, Any], ...] = ()  # as the API has them (timeAdded included)
    uid: str = ""
    created: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        """The parts of the Node our patches read, in the API's shape (cached, not fresh)."""
        return {
            "metadata": {
                "name": self.name,
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
                "resourceVersion": self.resource_version,
            },
            "spec": {
                "taints": [dict(t) for t in self.raw_taints],
                "unschedulable": self.unschedulable,
            },
        }

    @property
    def pool(self) -> str:
        return pool_kind.pool_of(self.labels)

    @property
    def spot(self) -> bool:
        return pool_kind.is_spot(self.labels)

    @property
    def sku(self) -> str:
        return self.labels.get(names.INSTANCE_TYPE_LABEL, "")

    @property
    def zone(self) -> str:
        return self.labels.get(names.ZONE_LABEL, "")

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodeInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
            if isinstance(c, dict)
        )
        found = notices_of(obj)
        return cls(
            name=str(meta.get("name", "")),
            labels=dict(meta.get("labels") or {}),
            annotations={
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k.startswith(names.PREFIX)
            },
            taints=tuple(Taint.from_json(t) for t in spec.get("taints") or []),
            unschedulable=bool(spec.get("unschedulable", False)),
            ready=ready,
            allocatable_gpus=int(
                parse_quantity((status.get("allocatable") or {}).get(GPU_RESOURCE))
            ),
            notices=found.notices,
            skipped=found.skipped,
            resource_version=str(meta.get("resourceVersion", "")),
            raw_taints=tuple(dict(t) for t in spec.get("taints") or []),
            uid=str(meta.get("uid", "")),
            created=parse_iso(meta.get("creationTimestamp")),
        )


def replicaset_owner(obj: Mapping[str, Any]) -> str:
    """The Deployment that controls a ReplicaSet ("" when none does)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Deployment":
            return str(ref.get("name"))
    return ""


def _template_placement(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod template decides where its pods may go: the keys `Pool.problems_for` reads."""
    return {
        key: pod_spec[key] for key in ("tolerations", "nodeSelector", "affinity") if key in pod_spec
    }


@dataclass(frozen=True)
class DaemonSetInfo:
    """A DaemonSet, as far as the doctor cares: where its pods may go and what they run."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    template_spec: Mapping[str, Any]  # tolerations, nodeSelector, affinity only
    images: tuple[str, ...]
    desired: int  # status.desiredNumberScheduled
    ready: int  # status.numberReady
    helm_release: str = ""  # annotation meta.helm.sh/release-name: a chart owns its spec

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DaemonSetInfo:
        meta = obj.get("metadata") or {}
        pod_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            labels=dict(meta.get("labels") or {}),
            template_spec=_template_placement(pod_spec),
            images=tuple(
                str(c.get("image", ""))
                for c in (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or [])
            ),
            desired=int(status.get("desiredNumberScheduled") or 0),
            ready=int(status.get("numberReady") or 0),
            helm_release=str((meta.get("annotations") or {}).get(HELM_RELEASE_ANNOTATION, "")),
        )


@dataclass(frozen=True)
class HoldInfo:
    """A PodDisruptionBudget of ours that holds a surge's doomed pods against evictions."""

    namespace: str
    name: str
    workload: str  # the Deployment's name: the value of the hold label it selects

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> HoldInfo:
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            workload=str((meta.get("labels") or {}).get(HOLD_LABEL, "")),
        )


@dataclass(frozen=True)
class ScalerMetric:
    """One of an HPA's metrics as its recommendation reads it (upstream's replica_calculator.go):
    the target and the value its status reports now (None: none, the HPA could not read it).
    `per_pod`: the value is an average over the Ready pods, or a Value target's usage ratio,
    which upstream also multiplies by the Ready pods; False: an Object or External
    `AverageValue`, the total over the HPA's current replicas (status.currentReplicas)."""

    name: str  # for words: "cpu", "Pods requests_per_second", "External queue_depth"
    target: float
    current: float | None
    per_pod: bool = True


@dataclass(frozen=True)
class ScalerInfo:
    """An HorizontalPodAutoscaler (autoscaling/v2): what it scales and its bounds, the bounds it
    had before we raised them (our annotation), if we did, and what an availability target reads
    of it to know the count the HPA wants (its metrics, their current values, its scale-down
    window)."""

    namespace: str
    name: str
    target: tuple[str, str]  # (kind, name) of what it scales
    min_replicas: int
    max_replicas: int
    original: str | None  # our annotation as it is on the HPA (sealed): the basis of a write
    resource_version: str = ""
    uid: str = ""
    # The "min,max" before our raise, once its seal is checked (seal.py); None: none, or one that
    # is not ours (`refused` says why), which is never put back.
    saved: str | None = None
    refused: str = ""
    metrics: tuple[ScalerMetric, ...] = ()
    current_replicas: int = 0  # status.currentReplicas
    # spec.behavior.scaleDown.stabilizationWindowSeconds (upstream's default 300); None: the
    # HPA never scales down (selectPolicy Disabled).
    scale_down_window: float | None = 300.0
    # Its controlling owner ("ScaledObject llm": KEDA's; an operator's), "" if none: an owner
    # that reconciles the HPA's spec sets any bounds we raise back at once.
    owner: str = ""
    owner_uid: str = ""
    # KEDA's ScaledObject that owns it, when its bounds are held there (`keda.py`): then
    # `min_replicas`, `max_replicas`, `original` and `saved` are the ScaledObject's.
    holder: ScaledObjectInfo | None = None

    @property
    def operated(self) -> bool:
        """An operator owns it and its bounds cannot be held: raised on the HPA they would be
        set back at once; held through KEDA's ScaledObject only when that one does not scale
        to zero (`ScaledObjectInfo.holdable`)."""
        return bool(self.owner) and (self.holder is None or not self.holder.holdable)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def own_bounds(self) -> tuple[int, int]:
        """The bounds it had before we raised them ("min,max" in our annotation), read
        strictly: anyone who may annotate the HPA could write "100000,100000" there. None
        recorded, unreadable or not ours (its seal, seal.py): today's bounds."""
        low, _, high = self.saved.partition(",") if self.saved else ("", "", "")
        try:
            bounds = (
                whole_number(low, low=1, high=MAX_RECORD_REPLICAS),
                whole_number(high, low=1, high=MAX_RECORD_REPLICAS),
            )
        except ValueError:
            return self.min_replicas, self.max_replicas
        if bounds[0] > bounds[1]:
            return self.min_replicas, self.max_replicas
        return bounds

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ScalerInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        ref = spec.get("scaleTargetRef") or {}
        down = _mapping(_mapping(spec.get("behavior")).get("scaleDown"))
        window = down.get("stabilizationWindowSeconds")
        controller: Mapping[str, Any] = next(
            (
                ref
                for ref in meta.get("ownerReferences") or []
                if isinstance(ref, Mapping) and ref.get("controller") is True
            ),
            {},
        )
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            target=(str(ref.get("kind", "")), str(ref.get("name", ""))),
            min_replicas=int(spec.get("minReplicas") or 1),
            max_replicas=int(spec.get("maxReplicas") or 1),
            original=(meta.get("annotations") or {}).get(HPA_ORIGINAL_ANNOTATION),
            resource_version=str(meta.get("resourceVersion", "")),
            uid=str(meta.get("uid", "")),
            # Unchecked until the seal is (the controller's snapshot); simulations trust it.
            saved=(meta.get("annotations") or {}).get(HPA_ORIGINAL_ANNOTATION),
            metrics=scaler_metrics(spec.get("metrics"), status.get("currentMetrics")),
            current_replicas=_whole(status.get("currentReplicas")),
            scale_down_window=(
                None
                if down.get("selectPolicy") == "Disabled"
                else 300.0
                if window is None
                else float(_whole(window))
            ),
            owner=f"{controller.get('kind')} {controller.get('name')}"[:128] if controller else "",
            owner_uid=str(controller.get("uid", ""))[:128],
        )


_TRUE = ("1", "t", "T", "true", "TRUE", "True")


@dataclass(frozen=True)
class ScaledObjectInfo:
    """KEDA's ScaledObject (keda.sh/v1alpha1): the bounds its operator writes on the HPA it
    makes and owns (`GetHPAMinReplicas`: `minReplicaCount`, at least 1; `maxReplicaCount`,
    100 by default), and our record of the bounds it had before we raised them (the same
    annotation as on an HPA; KEDA copies it onto the HPA, where it is not read)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    min_count: int  # spec.minReplicaCount (0: unset, scales to zero when idle)
    max_count: int  # spec.maxReplicaCount (100: unset, or no count)
    original: str | None  # checked with the HPA's (`ScalerInfo.saved`), by its seal
    idle: bool = False  # spec.idleReplicaCount set: KEDA scales it to that when idle
    paused: bool = False  # one of KEDA's paused annotations: KEDA holds the count itself

    @property
    def holdable(self) -> bool:
        """Its bounds may hold spares: KEDA hands the count to the HPA only while it is not
        idle; with a minimum of 0 (or an idle count) it scales the Deployment to zero itself
        whatever the HPA's minReplicas, and a paused one holds a count of its own. A record of
        ours on one that is not is still put back."""
        return self.min_count >= 1 and not self.idle and not self.paused

    @property
    def hpa_bounds(self) -> tuple[int, int]:
        return max(1, self.min_count), self.max_count

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ScaledObjectInfo:
        meta = obj.get("metadata") or {}
        spec = _mapping(obj.get("spec"))
        annotations = _mapping(meta.get("annotations"))
        high = spec.get("maxReplicaCount")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            min_count=_whole(spec.get("minReplicaCount")),
            # KEDA's default for one unset; one that is no count (hostile) reads the same.
            max_count=high if type(high) is int and high >= 1 else 100,
            original=annotations.get(HPA_ORIGINAL_ANNOTATION),
            idle=spec.get("idleReplicaCount") is not None,
            # As KEDA reads them (NeedToBePausedByAnnotation, strconv.ParseBool's true).
            paused="autoscaling.keda.sh/paused-replicas" in annotations
            or annotations.get("autoscaling.keda.sh/paused") in _TRUE,
        )


# Where each metric type keeps its target and its status (autoscaling/v2 MetricSpec/Status).
_METRIC_FIELDS = {
    "Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
    "Object": "object", "External": "external",
}  # fmt: skip


def scaler_metrics(specs: object, statuses: object) -> tuple[ScalerMetric, ...]:
    """An HPA's metrics with their current values. The status lists them in the spec's order
    (upstream's computeReplicasForMetrics fills `statuses[i]` for `metricSpecs[i]`, an empty
    status for one it could not read); one that does not match its spec has no current value.
    A metric whose target is not a positive number is left out (the API server refuses those)."""
    specs = specs if isinstance(specs, list) else []
    statuses = statuses if isinstance(statuses, list) else []
    found = []
    for index, spec in enumerate(specs):
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        field_name = _METRIC_FIELDS.get(str(kind))
        if field_name is None:
            continue
        source = _mapping(spec.get(field_name))
        target = _mapping(source.get("target"))
        target_type = target.get("type")
        key = {"Utilization": "averageUtilization", "AverageValue": "averageValue"}.get(
            str(target_type), "value"
        )
        if kind in ("Resource", "ContainerResource", "Pods") and key == "value":
            continue  # not a valid target for a per-pod metric
        wanted = parse_quantity(target.get(key))
        if not wanted > 0:
            continue
        status = statuses[index] if index < len(statuses) else None
        current = None
        if isinstance(status, Mapping) and status.get("type") == kind:
            value = _mapping(_mapping(status.get(field_name)).get("current"))
            if value.get(key) is not None:
                current = quantity(str(value[key]))
        metric = _mapping(source.get("metric"))
        name = str(source.get("name") or metric.get("name") or "")[:64]
        found.append(
            ScalerMetric(
                name=name if kind in ("Resource", "ContainerResource") else f"{kind} {name}",
                target=wanted,
                current=current,
                per_pod=not (kind in ("Object", "External") and key == "averageValue"),
            )
        )
    return tuple(found)


def _mapping(value: object) -> Mapping[str, Any]:
    """A JSON object from the API, or {} for anything else (a field of the wrong type reads as
    absent: one odd metric must not make the whole HPA unreadable)."""
    return value if isinstance(value, Mapping) else {}


def _whole(value: object) -> int:
    """A count from the API: a non-negative int, else 0."""
    return value if type(value) is int and value >= 0 else 0


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    api_version: str = ""  # read for workloads only (which operator made it)


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    ready: bool
    deleting: bool
    owner: Owner | None
    gpus: int
    deletion_cost: str | None  # as annotated, None when absent
    original_deletion_cost: str | None  # what we saved before lowering it, if we did
    mirror: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    grace_seconds: int = 30
    deletion_at: datetime | None = None  # a terminating pod is killed by then (deletionTimestamp)
    created: datetime | None = None
    placed: str = ""  # "<pool>/<zone>" our admission webhook chose for it; "" if none
    placed_why: str = ""
    placed_review: str = ""  # the uid of the AdmissionReview that placed it
    # Held from Karpenter's voluntary disruption by our webhook until it is Ready (a return's
    # new replica): names.HELD_UNTIL_READY.
    held_until_ready: bool = False
    ready_since: datetime | None = None  # the Ready condition's lastTransitionTime, when Ready

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def daemonset(self) -> bool:
        return self.owner is not None and self.owner.kind == "DaemonSet"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PodInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        annotations = meta.get("annotations") or {}
        owner = next(
            (
                Owner(str(ref.get("kind")), str(ref.get("name")))
                for ref in meta.get("ownerReferences") or []
                if ref.get("controller")
            ),
            None,
        )
        ready = next(
            (
                c
                for c in status.get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            ),
            None,
        )
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase", "Pending")),
            ready=ready is not None,
            ready_since=parse_iso(ready.get("lastTransitionTime")) if ready else None,
            deleting=meta.get("deletionTimestamp") is not None,
            owner=owner,
            gpus=gpus_of(spec),
            deletion_cost=annotations.get(DELETION_COST),
            original_deletion_cost=annotations.get(ORIGINAL_COST_ANNOTATION),
            mirror=MIRROR_ANNOTATION in annotations,
            labels=dict(meta.get("labels") or {}),
            grace_seconds=int(spec.get("terminationGracePeriodSeconds", 30) or 0),
            deletion_at=parse_iso(meta.get("deletionTimestamp")),
            created=parse_iso(meta.get("creationTimestamp")),
            placed=str(annotations.get(names.PLACED) or "")[:128],
            placed_why=str(annotations.get(names.PLACED_WHY) or "")[:512],
            placed_review=str(annotations.get(names.PLACED_REVIEW) or "")[:64],
            held_until_ready=names.HELD_UNTIL_READY in annotations,
        )


@dataclass(frozen=True)
class WorkloadInfo:
    kind: str  # Deployment | StatefulSet
    namespace: str
    name: str
    replicas: int
    ready_replicas: int
    template_spec: Mapping[str, Any]  # tolerations, nodeSelector, affinity only
    gpus_per_replica: int
    annotations: Mapping[str, str]
    surge: Surge | None = None
    surge_unreadable: bool = False
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    uid: str = ""
    selector: Mapping[str, Any] = field(default_factory=dict)  # spec.selector, as the API has it
    # Problems of our records on it that someone else wrote (or broke): the workload is left
    # alone (drained plainly, never surged, returned or given spares) and reported.
    refused: tuple[str, ...] = ()
    # What made it (its controller owner reference), e.g. the KAITO Workspace a StatefulSet is
    # for: the doctor reports a problem on the object whose spec sets it.
    owner: Owner | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name

    @property
    def opted_out(self) -> bool:
        return self.annotations.get(OPT_OUT_ANNOTATION, "").lower() in ("true", "1", "yes")

    @property
    def spare(self) -> Spare | None:
        """Our spare-replicas record; None when absent or unreadable (planned afresh)."""
        text = self.annotations.get(names.SPARE_RECORD)
        if text is None:
            return None
        try:
            return Spare.from_json(text)
        except ValueError:
            return None

    @classmethod
    def from_json(cls, kind: str, obj: Mapping[str, Any]) -> WorkloadInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(names.PREFIX)
        }
        surge = None
        unreadable = False
        if SURGE_ANNOTATION in annotations:
            try:
                surge = Surge.from_json(annotations[SURGE_ANNOTATION])
            except ValueError:
                unreadable = True
        replicas = spec.get("replicas")
        return cls(
            kind=kind,
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            replicas=replicas if type(replicas) is int and replicas >= 0 else 1,
            ready_replicas=int(status.get("readyReplicas") or 0),
            template_spec=_template_placement(pod_spec),
            gpus_per_replica=gpus_of(pod_spec),
            annotations=annotations,
            surge=surge,
            surge_unreadable=unreadable,
            refused=refused_records(annotations),
            resource_version=str(meta.get("resourceVersion", "")),
            labels=dict(meta.get("labels") or {}),
            uid=str(meta.get("uid", "")),
            selector=dict(spec.get("selector") or {}),
            owner=next(
                (
                    Owner(str(ref.get("kind")), str(ref.get("name")), str(ref.get("apiVersion")))
                    for ref in meta.get("ownerReferences") or []
                    if isinstance(ref, dict) and ref.get("controller") is True
                ),
                None,
            ),
        )


def refused_records(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """What is wrong with the records of ours that a workload carries, checked by the grammar we
    write them in; () when they are all readable. The surge record has its own path
    (`surge_unreadable`: reported as a blocked fail-over); a placement policy a tenant declares
    is checked by policy.py, which keeps the last valid one in force."""
    checks: dict[str, Any] = {
        names.RETURN_ANNOTATION: ReturnRecord.from_json,
        names.SPARE_RECORD: Spare.from_json,
        names.RETURN_BACKOFF_ANNOTATION: moment,
    }
    problems = []
    for key, check in checks.items():
        text = annotations.get(key)
        if text is None:
            continue
        try:
            check(text)
        except ValueError as error:
            problems.append(f"{key}: {str(error)[:200]}")
    return tuple(problems)

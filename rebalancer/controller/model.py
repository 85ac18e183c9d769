"""Slim, frozen views of the cluster objects the planner reads, built from raw API JSON.

The informers keep these instead of full objects: 50 000 pods as generated client models are
slow and large; these hold only what a decision needs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rebalancer import names, pool_kind
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
from rebalancer.strict import moment
from rebalancer.timefmt import parse_iso

# A record on a workload naming more replicas than this is not ours: never obeyed.
MAX_RECORD_REPLICAS = 10_000
MAX_BELOW_SECONDS = 100 * 365 * 86400  # a target's seconds below its count: a century at most


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
class ScalerInfo:
    """An HorizontalPodAutoscaler (autoscaling/v2), as far as a surge cares: what it scales and
    its bounds, and the bounds it had before we raised them (our annotation), if we did."""

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

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ScalerInfo:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
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
        )


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str


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
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase", "Pending")),
            ready=any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            ),
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
        )


@dataclass(frozen=True)
class Spare:
    """The spare replicas we keep on a Deployment (its policy's `spare-replicas`): the owner's
    count and what we added; `reverted` counts the times someone set the count back to the
    owner's exactly (an owner that resets replicas), and `gave_up` stops us fighting it."""

    base: int
    added: int
    reverted: int = 0
    gave_up: bool = False
    # With an availability target: how many of base + added go on spot (the rest on-demand);
    # None: the placement policy's rules place them.
    spot: int | None = None
    # With a target, its error budget's account: watched since when (RFC 3339), the seconds the
    # owner's count was not all Ready before the current stretch, and since when it is not
    # (None: it is). Written when a stretch begins or ends, never in between.
    watched_since: str | None = None
    below_seconds: int = 0
    below_since: str | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "base": self.base, "added": self.added, "reverted": self.reverted,
            "gaveUp": self.gave_up,
        }  # fmt: skip
        if self.spot is not None:
            data["spot"] = self.spot
        if self.watched_since is not None:
            data["watchedSince"] = self.watched_since
            data["belowSeconds"] = self.below_seconds
        if self.below_since is not None:
            data["belowSince"] = self.below_since
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Spare:
        data = _record_object(text)
        if _count(data, "base") < 1:
            raise ValueError("base is 0: we never keep spares for a workload with no replicas")
        spot = _count(data, "spot") if "spot" in data else None
        if spot is not None and spot > _count(data, "base") + _count(data, "added"):
            raise ValueError("more spot replicas than replicas")
        watched_since = _optional_str(data, "watchedSince")
        below_since = _optional_str(data, "belowSince")
        for when in (watched_since, below_since):
            if when is not None:
                moment(when)
        below = data.get("belowSeconds", 0)
        if type(below) is not int or not 0 <= below <= MAX_BELOW_SECONDS:
            raise ValueError(f"belowSeconds is not a whole number from 0 to {MAX_BELOW_SECONDS}")
        return cls(
            base=_count(data, "base"),
            added=_count(data, "added"),
            reverted=_count(data, "reverted"),
            gave_up=data.get("gaveUp", False) is True,
            spot=spot,
            watched_since=watched_since,
            below_seconds=below,
            below_since=below_since,
        )


@dataclass(frozen=True)
class Surge:
    """What we recorded on a Deployment when we surged it, so any leader can finish or undo it."""

    base_replicas: int
    added: int
    event_ids: tuple[str, ...]
    doomed_pods: tuple[str, ...]  # "namespace/name" of the pods we are replacing
    deadline: str | None  # RFC 3339 of the earliest notice, None: act now
    # Scaled back already; kept until the doomed pods are gone, so that a doomed pod the
    # ReplicaSet has not removed yet is never taken for a new one and surged for twice.
    completed: bool = False
    # Someone else set replicas back while the replacements loaded: the surge could not be
    # held, so its doomed pods are drained at once instead of at the deadline.
    reverted: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseReplicas": self.base_replicas,
                "added": self.added,
                "eventIds": list(self.event_ids),
                "doomedPods": list(self.doomed_pods),
                "deadline": self.deadline,
                "completed": self.completed,
                "reverted": self.reverted,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Surge:
        """Parse and bound-check a record; ValueError for anything we would not have written."""
        data = _record_object(text)
        record = cls(
            base_replicas=_count(data, "baseReplicas"),
            added=_count(data, "added"),
            event_ids=_strings(data, "eventIds"),
            doomed_pods=_strings(data, "doomedPods"),
            deadline=_optional_str(data, "deadline"),
            completed=data.get("completed", False) is True,
            reverted=data.get("reverted", False) is True,
        )
        if record.added > len(record.doomed_pods):
            raise ValueError("more replicas added than pods it replaces")
        if record.base_replicas < 1:
            raise ValueError("baseReplicas is 0: we never surge a workload that had none")
        if record.deadline is not None:
            moment(record.deadline)
        return record


@dataclass(frozen=True)
class ReturnRecord:
    """What we recorded on a Deployment when a return to spot started (see returns.py)."""

    base_replicas: int
    retire: str  # "namespace/name" of the on-demand pod to remove
    pool: str
    started_at: str  # RFC 3339
    known_pods: tuple[str, ...]  # pod names that existed when it started
    completed: bool = False
    # Completed by giving up: the scale-back removes the new pod, not the one to retire, so the
    # record is kept until the new pod is gone (and then forgotten).
    gave_up: bool = False
    # A give-up's new pods, by name: what it waits for. Not "every pod it did not know": a
    # surge's replacements created after the give-up are not its business, and waiting for them
    # kept the record (and so every later return) for as long as they lived. None: a record
    # written before this was kept, which waits as it always did.
    waits_for: tuple[str, ...] | None = None
    # "return": back to spot from on-demand; "risk": off a spot group riskier than the workload's
    # placement policy accepts (pool is then "": the webhook chooses where the new pod goes).
    purpose: str = "return"
    why: str = ""  # for a move: the risk that started it, said in its Events

    @property
    def retire_name(self) -> str:
        return self.retire.split("/", 1)[-1]

    def leaving(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        """The pods a completed return is still waiting for the ReplicaSet to remove."""
        if self.gave_up and self.waits_for is not None:
            return [p for p in pods if p.name in self.waits_for]
        if self.gave_up:
            return [p for p in pods if p.name not in self.known_pods]
        return [p for p in pods if p.name == self.retire_name]

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseReplicas": self.base_replicas,
                "retire": self.retire,
                "pool": self.pool,
                "startedAt": self.started_at,
                "knownPods": list(self.known_pods),
                "completed": self.completed,
                "gaveUp": self.gave_up,
                **({"purpose": self.purpose, "why": self.why} if self.purpose != "return" else {}),
                **({"waitsFor": list(self.waits_for)} if self.waits_for is not None else {}),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ReturnRecord:
        """Parse and bound-check a record; ValueError for anything we would not have written."""
        data = _record_object(text)
        retire, pool, started = (data.get(k) for k in ("retire", "pool", "startedAt"))
        if not all(isinstance(v, str) for v in (retire, pool, started)):
            raise ValueError("retire, pool and startedAt must be strings")
        moment(started)
        if _count(data, "baseReplicas") < 1:
            raise ValueError("baseReplicas is 0: we never move a replica of a workload with none")
        return cls(
            base_replicas=_count(data, "baseReplicas"),
            retire=str(retire),
            pool=str(pool),
            started_at=str(started),
            known_pods=_strings(data, "knownPods"),
            completed=data.get("completed", False) is True,
            gave_up=data.get("gaveUp", False) is True,
            purpose=_purpose(data),
            why=(_optional_str(data, "why") or "")[:512],
            waits_for=_strings(data, "waitsFor") if data.get("waitsFor") is not None else None,
        )


def _purpose(data: Mapping[str, Any]) -> str:
    purpose = data.get("purpose", "return")
    if purpose not in ("return", "risk"):
        raise ValueError("purpose is not return or risk")
    return str(purpose)


def _record_object(text: str) -> dict[str, Any]:
    """A record's JSON object. Any failure (depth, size, numbers) is a ValueError."""
    if len(text) > 64 * 1024:
        raise ValueError("record larger than 64 KiB")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {type(error).__name__}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if type(value) is not int or not 0 <= value <= MAX_RECORD_REPLICAS:
        raise ValueError(f"{key} is not a whole number from 0 to {MAX_RECORD_REPLICAS}")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} is not a list of strings")
    if len(value) > MAX_RECORD_REPLICAS:
        raise ValueError(f"{key} is too long")
    return tuple(value)


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value


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

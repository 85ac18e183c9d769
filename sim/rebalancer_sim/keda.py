"""A KEDA stand-in: the operator's ScaledObject controller, which makes and keeps one
`autoscaling/v2` HPA per `keda.sh/v1alpha1` ScaledObject. The HPA controller (hpa.py) then scales
the target as it scales for any HPA; this module scales nothing itself.

It follows KEDA v2.20 (`controllers/keda/scaledobject_controller.go`, `hpa.go`,
`scaledobject_finalizer.go`, `apis/keda/v1alpha1/scaledobject_types.go`, `pkg/scalers/
cpu_memory_scaler.go`):

- **When it reconciles** is what KEDA's watches decide (`SetupWithManager`), not a period: a
  ScaledObject created or deleted, its `metadata.generation` moved (any spec edit), one of its
  pause or force-activation annotations changed, its Ready condition turned True; an HPA it
  controls created, deleted, or its labels, annotations or spec changed (`HPASpecChangedPredicate`:
  not its status). A label or any other annotation changed on the ScaledObject alone starts no
  reconcile, as in KEDA: it reaches the HPA with the next one. One exception, the emulator's own:
  a change of the load stand-in `sim.spot-rebalancer.io/cpu-load-percent` on a ScaledObject
  reconciles at once, since it stands for a metric, which reaches a real HPA without KEDA. A
  reconcile that fails is retried with controller-runtime's default backoff (5 ms, doubling, at
  most 1000 s); KEDA watches no Deployment, so a ScaledObject created before its target waits for
  that retry.
- **A reconcile**: the finalizer `finalizer.keda.sh` and the label `scaledobject.keda.sh/name`
  on the ScaledObject; the Ready, Active, Fallback and Paused conditions initialised; the scale
  target checked (`spec.scaleTargetRef`, kind Deployment and apiVersion apps/v1 by default: a
  kind the emulator serves, that exists and has a `scale` subresource), its kind and
  `originalReplicaCount` recorded; the replica bounds (min not above max, idle below min) and the
  triggers (at least one, unique names) validated; `triggersTypes` and `authenticationsTypes`
  recorded; then the HPA created, or updated if it differs (below), `status.hpaName` recorded.
  Ready becomes True (`ScaledObjectReady`), or False (`ScaledObjectCheckFailed`, KEDA's message)
  when a step fails, which then changes nothing further; Fallback is False (`NoFallbackFound`);
  with only cpu triggers Active is True, as KEDA's scale loop sets it for triggers that are always
  active.
- **The HPA** (`newHPAForScaledObject`): named `keda-hpa-<ScaledObject>`, or
  `spec.advanced.horizontalPodAutoscalerConfig.name` (a change of it deletes the old HPA and
  creates the new one); `minReplicas` `minReplicaCount` when above 0, else 1
  (`GetHPAMinReplicas`), `maxReplicas` `maxReplicaCount` or 100; `scaleTargetRef` the resolved
  target; `behavior` `spec.advanced.horizontalPodAutoscalerConfig.behavior`; its annotations the
  ScaledObject's; its labels `app.kubernetes.io/name` (the HPA's name, at most 63 characters),
  `version` (KEDA's), `part-of` (the ScaledObject) and `managed-by: keda-operator`, then the
  ScaledObject's own but those `scaledobject.keda.sh/hpa-excluded-labels` lists; a controller
  owner reference to the ScaledObject.
- **An HPA that drifted** is updated as `updateHPAIfNeeded` finds it, with
  `equality.Semantic.DeepDerivative`, which ignores what KEDA leaves unset: a different number of
  metrics or `behavior`, or a spec field KEDA sets (`minReplicas`, say) that differs; a label of
  KEDA's missing or different; an annotation of the ScaledObject's missing or different, or any
  annotation at all while the ScaledObject has none. An update writes KEDA's whole object: spec,
  labels and annotations replaced, so it also drops whatever else others wrote on the HPA, while
  an annotation added to an HPA that matches on all the rest stays until the next update.
- **Deletion**: KEDA's finalizer lets the ScaledObject go once it has reconciled the deletion
  (scaling the target back to `originalReplicaCount` first when
  `spec.advanced.restoreToOriginalReplicaCount` is set); the garbage collector (garbage.py) then
  deletes the HPA, whose controller reference names it.

Triggers: only `type: cpu` is modelled, as KEDA's cpu scaler turns it into an HPA metric:
`Resource` cpu (`ContainerResource` with `metadata.containerName`), target type `metricType`
(`Utilization` or `AverageValue`: KEDA v2.18 and later require it and refuse the removed
`metadata.type`), `averageUtilization` or `averageValue` from `metadata.value`. Other trigger
types are skipped: they make no metric (KEDA would add an `External` one served by its metrics
adapter, which the emulator does not have), and an HPA without a metric only keeps the replicas
within its bounds. The HPA's metric is hpa.py's stand-in: the load annotation, which reaches the
HPA because KEDA copies the ScaledObject's annotations (`cluster.set_load` writes it on the
ScaledObject of a workload declared with `keda:`).

Not modelled: KEDA's scale loop beyond the Active condition (scale to zero with
`minReplicaCount: 0` and inactive triggers, scaling up from zero, `idleReplicaCount`,
`cooldownPeriod`, `pollingInterval`, `lastActiveTime`), `fallback`, the pause annotations
(`autoscaling.keda.sh/paused`, `paused-replicas`, `paused-scale-in`, `paused-scale-out`),
`scalingModifiers`, KEDA's admission webhook (it refuses, for one, a ScaledObject whose target
another HPA scales), the CRD's schema validation, TriggerAuthentications, the metrics adapter,
ScaledJobs, events and the `HPAActive` condition. `hpa_changes` records what it did to HPAs,
for tests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.objects import (
    Obj,
    annotation,
    condition_true,
    controller_ref,
    is_terminating,
    owner_reference,
)
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.scenario import LOAD_ANNOTATION
from rebalancer_sim.status import ApiError, not_found
from rebalancer_sim.store import Change, Store

KEDA_VERSION = "2.20.2"  # the release followed here: its HPAs' app.kubernetes.io/version
GROUP = "keda.sh"
FINALIZER = "finalizer.keda.sh"
NAME_LABEL = "scaledobject.keda.sh/name"
EXCLUDED_LABELS_ANNOTATION = "scaledobject.keda.sh/hpa-excluded-labels"
HPA_NAME_PREFIX = "keda-hpa-"
# Annotations whose change starts a reconcile: KEDA's Paused*, PausedReplicas and
# ForceActivation predicates, and the emulator's load stand-in (see the module docstring).
WATCHED_ANNOTATIONS = (
    "autoscaling.keda.sh/paused",
    "autoscaling.keda.sh/paused-replicas",
    "autoscaling.keda.sh/paused-scale-in",
    "autoscaling.keda.sh/paused-scale-out",
    "autoscaling.keda.sh/force-activation",
    LOAD_ANNOTATION,
)
DEFAULT_HPA_MIN_REPLICAS = 1
DEFAULT_HPA_MAX_REPLICAS = 100
DEFAULT_TARGET_API_VERSION = "apps/v1"
DEFAULT_TARGET_KIND = "Deployment"
READY_REASON = "ScaledObjectReady"
READY_MESSAGE = "ScaledObject is defined correctly and is ready for scaling"
CHECK_FAILED_REASON = "ScaledObjectCheckFailed"
SCALE_TARGET_ERROR = "ScaledObject doesn't have correct scaleTargetRef specification"
BOUNDS_ERROR = "ScaledObject doesn't have correct Idle/Min/Max Replica Counts specification"
TRIGGERS_ERROR = "ScaledObject doesn't have correct triggers specification"
HPA_ERROR = "failed to ensure HPA is correctly created for ScaledObject"
# controller-runtime's default per-item rate limiter for a reconcile that returns an error.
RETRY_FIRST_SECONDS = 0.005
RETRY_MAX_SECONDS = 1000.0
CONDITION_TYPES = ("Ready", "Active", "Fallback", "Paused")
_INT32 = re.compile(r"^[+-]?\d+$")

Key = tuple[str, str]  # (namespace, ScaledObject name)


class ReconcileFailed(Exception):
    """A step of a reconcile that failed: `message` is KEDA's for the step, `cause` the error;
    the Ready condition says `<message>: <cause>`, as KEDA's does."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(f"{message}: {cause}")
        self.message = message
        self.cause = cause


@dataclass(frozen=True)
class HpaChange:
    at: float
    namespace: str
    scaled_object: str
    hpa: str
    action: str  # created | updated | deleted


class Keda:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: dict[Key, float] = {}  # ScaledObject -> when its reconcile is due
        self._failures: dict[Key, int] = {}
        self._listed = False
        self.hpa_changes: list[HpaChange] = []
        store.listeners.append(self._on_change)

    # ---- what starts a reconcile -------------------------------------------------------------

    def _now(self) -> float:
        return self.store.clock.now().timestamp()

    def _enqueue(self, key: Key) -> None:
        now = self._now()
        self._queue[key] = min(self._queue.get(key, now), now)

    def _on_change(self, change: Change) -> None:
        if change.resource is R.SCALEDOBJECTS:
            if change.type != "MODIFIED" or _scaled_object_update_matters(
                change.old or {}, change.new
            ):
                self._enqueue(_key(change.new))
        elif change.resource is R.HPAS:
            if change.type == "MODIFIED" and not _hpa_update_matters(change.old or {}, change.new):
                return
            for hpa in (change.old, change.new):
                owner = _owning_scaled_object(hpa)
                if owner is not None:
                    self._enqueue(owner)

    def reconcile(self) -> int:
        now = self._now()
        if not self._listed:  # the informer's first list: a create event for each
            self._listed = True
            for scaled_object in self.store.items(R.SCALEDOBJECTS):
                self._enqueue(_key(scaled_object))
        worked = 0
        for key in [k for k, due in self._queue.items() if due <= now + 1e-9]:
            del self._queue[key]
            writes_before = self.store.writes
            try:
                self._reconcile(*key)
            except ReconcileFailed:
                failures = self._failures.get(key, 0)
                self._failures[key] = failures + 1
                delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** min(failures, 40))
                self._queue[key] = min(self._queue.get(key, now + delay), now + delay)
            else:
                self._failures.pop(key, None)
            worked += self.store.writes != writes_before
        return worked

    # ---- one reconcile -----------------------------------------------------------------------

    def _reconcile(self, namespace: str, name: str) -> None:
        scaled_object = self.store.get(R.SCALEDOBJECTS, namespace, name)
        if scaled_object is None:
            return
        if is_terminating(scaled_object):
            self._finalize(scaled_object)
            return
        scaled_object = self._ensure_finalizer_and_label(scaled_object)
        status: Obj = json.loads(json.dumps(scaled_object.get("status") or {}))
        conditions = status.get("conditions") or []
        if not set(CONDITION_TYPES) <= {c.get("type") for c in conditions}:  # AreInitialized
            conditions = [
                {"type": t, "status": "False" if t == "Paused" else "Unknown"}
                for t in CONDITION_TYPES
            ]
        failure: ReconcileFailed | None = None
        try:
            self._reconcile_scaled_object(scaled_object, status)
        except ReconcileFailed as exc:
            failure = exc
        if failure is None:
            conditions = _set(conditions, "Ready", "True", READY_REASON, READY_MESSAGE)
            triggers = (scaled_object.get("spec") or {}).get("triggers") or []
            if all(t.get("type") == "cpu" for t in triggers):
                conditions = _set(
                    conditions,
                    "Active",
                    "True",
                    "ScalerActive",
                    "Scaling is performed because triggers are active",
                )
        else:
            conditions = _set(conditions, "Ready", "False", CHECK_FAILED_REASON, str(failure))
            conditions = _set(
                conditions, "Active", "Unknown", "UnknownState", "ScaledObject check failed"
            )
        conditions = _set(
            conditions,
            "Fallback",
            "False",
            "NoFallbackFound",
            "No fallbacks are active on this scaled object",
        )
        status["conditions"] = conditions
        if status != (scaled_object.get("status") or {}):
            self.store.update(R.SCALEDOBJECTS, dict(scaled_object, status=status))
        if failure is not None:
            raise failure

    def _ensure_finalizer_and_label(self, scaled_object: Obj) -> Obj:
        """`ensureFinalizer` and `ensureScaledObjectLabel`: two writes in KEDA, one here."""
        meta = scaled_object["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        labels = dict(meta.get("labels") or {})
        if FINALIZER in finalizers and labels.get(NAME_LABEL) == meta["name"]:
            return scaled_object
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        labels[NAME_LABEL] = meta["name"]
        updated = json.loads(json.dumps(scaled_object))
        updated["metadata"]["finalizers"] = finalizers
        updated["metadata"]["labels"] = labels
        return self.store.update(R.SCALEDOBJECTS, updated)

    def _reconcile_scaled_object(self, scaled_object: Obj, status: Obj) -> None:
        """`reconcileScaledObject` from the scale target check on; fills `status` as it goes."""
        spec = scaled_object.get("spec") or {}
        target_resource, target_kind = self._scale_target(scaled_object, status)
        _check_bounds(spec)
        triggers = spec.get("triggers") or []
        _check_triggers(triggers)
        types: list[str] = []
        auths: list[str] = []
        for trigger in triggers:
            if trigger.get("type") not in types:
                types.append(str(trigger.get("type")))
            auth = (trigger.get("authenticationRef") or {}).get("name")
            if auth and auth not in auths:
                auths.append(str(auth))
        status["triggersTypes"] = ",".join(types)
        status["authenticationsTypes"] = ",".join(auths)
        metrics = [_cpu_metric(t) for t in triggers if t.get("type") == "cpu"]
        resource_metrics = [m[_source(m)]["name"] for m in metrics]
        if resource_metrics:
            status["resourceMetricNames"] = resource_metrics
        else:
            status.pop("resourceMetricNames", None)
        status.pop("externalMetricNames", None)
        status["hpaName"] = self._ensure_hpa(
            scaled_object, desired_hpa(scaled_object, target_resource, target_kind, metrics), status
        )

    def _scale_target(self, scaled_object: Obj, status: Obj) -> tuple[ResourceType, str]:
        """`checkTargetResourceIsScalable`: (the target's resource, its kind)."""
        ref = (scaled_object.get("spec") or {}).get("scaleTargetRef") or {}
        name = ref.get("name")
        if not name:
            raise ReconcileFailed(
                SCALE_TARGET_ERROR, "ScaledObject.spec.scaleTargetRef.name is missing"
            )
        api_version = str(ref.get("apiVersion") or DEFAULT_TARGET_API_VERSION)
        kind = str(ref.get("kind") or DEFAULT_TARGET_KIND)
        group, _, version = api_version.rpartition("/")
        resource = _resource_of(group, version, kind)
        if resource is None:
            raise ReconcileFailed(
                SCALE_TARGET_ERROR, f'no matches for kind "{kind}" in version "{api_version}"'
            )
        target = self.store.get(resource, scaled_object["metadata"]["namespace"], str(name))
        if target is None:
            raise ReconcileFailed(SCALE_TARGET_ERROR, not_found(resource, str(name)).message)
        if "scale" not in resource.subresources:
            raise ReconcileFailed(
                SCALE_TARGET_ERROR, "the server could not find the requested resource"
            )
        gvk = f"{group}/{version}.{kind}"
        if status.get("scaleTargetKind") != gvk:
            status["scaleTargetKind"] = gvk
            status["scaleTargetGVKR"] = {
                "group": group,
                "version": version,
                "kind": kind,
                "resource": resource.plural,
            }
        if status.get("originalReplicaCount") is None:
            status["originalReplicaCount"] = int((target.get("spec") or {}).get("replicas", 1))
        return resource, kind

    def _ensure_hpa(self, scaled_object: Obj, desired: Obj, status: Obj) -> str:
        """`ensureHPAForScaledObjectExists`: create, rename or update; the HPA's name."""
        namespace = scaled_object["metadata"]["namespace"]
        so_name = scaled_object["metadata"]["name"]
        name = str(desired["metadata"]["name"])
        found = self.store.get(R.HPAS, namespace, status.get("hpaName") or name)
        now = self._now()
        if found is not None and found["metadata"]["name"] != name:
            old_name = found["metadata"]["name"]
            try:
                self.store.delete(R.HPAS, namespace, old_name)
            except ApiError as exc:
                raise ReconcileFailed(HPA_ERROR, exc.message) from None
            self.hpa_changes.append(HpaChange(now, namespace, so_name, old_name, "deleted"))
            found = None
        if found is None:
            try:
                self.store.create(R.HPAS, desired)
            except ApiError as exc:
                raise ReconcileFailed(HPA_ERROR, exc.message) from None
            self.hpa_changes.append(HpaChange(now, namespace, so_name, name, "created"))
        elif hpa_needs_update(desired, found):
            updated = json.loads(json.dumps(found))
            meta = updated["metadata"]
            # An Update of KEDA's object without a resourceVersion: what it leaves out goes.
            for key in ("labels", "annotations", "ownerReferences", "finalizers"):
                if key in desired["metadata"]:
                    meta[key] = desired["metadata"][key]
                else:
                    meta.pop(key, None)
            updated["spec"] = desired["spec"]
            self.store.update(R.HPAS, updated)
            self.hpa_changes.append(HpaChange(now, namespace, so_name, name, "updated"))
        return name

    def _finalize(self, scaled_object: Obj) -> None:
        """`finalizeScaledObject`: restore the replicas if asked, then let the object go."""
        meta = scaled_object["metadata"]
        finalizers = meta.get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        spec = scaled_object.get("spec") or {}
        status = scaled_object.get("status") or {}
        gvkr = status.get("scaleTargetGVKR")
        if (spec.get("advanced") or {}).get("restoreToOriginalReplicaCount") and gvkr:
            resource = _resource_of(gvkr.get("group", ""), gvkr.get("version", ""), gvkr["kind"])
            name = str((spec.get("scaleTargetRef") or {}).get("name"))
            target = None if resource is None else self.store.get(resource, meta["namespace"], name)
            if resource is not None and target is not None:
                restored = json.loads(json.dumps(target))
                restored["spec"]["replicas"] = int(status["originalReplicaCount"])
                self.store.update(resource, restored)
        updated = json.loads(json.dumps(scaled_object))
        updated["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
        self.store.update(R.SCALEDOBJECTS, updated)


# ---- the HPA KEDA wants ------------------------------------------------------------------------


def hpa_name(scaled_object: Obj) -> str:
    """`getHPAName`: `spec.advanced.horizontalPodAutoscalerConfig.name`, or `keda-hpa-<name>`."""
    config = _hpa_config(scaled_object.get("spec") or {})
    return str(config.get("name") or HPA_NAME_PREFIX + scaled_object["metadata"]["name"])


def hpa_min_replicas(spec: Obj) -> int:
    """`GetHPAMinReplicas`: an HPA cannot have 0, so a minReplicaCount of 0 (or none) gives 1."""
    value = spec.get("minReplicaCount")
    return int(value) if value is not None and int(value) > 0 else DEFAULT_HPA_MIN_REPLICAS


def hpa_max_replicas(spec: Obj) -> int:
    value = spec.get("maxReplicaCount")
    return DEFAULT_HPA_MAX_REPLICAS if value is None else int(value)


def desired_hpa(
    scaled_object: Obj, target_resource: ResourceType, target_kind: str, metrics: list[Obj]
) -> Obj:
    """`newHPAForScaledObject`: the whole HPA KEDA writes for a ScaledObject."""
    meta = scaled_object["metadata"]
    spec = scaled_object.get("spec") or {}
    name = hpa_name(scaled_object)
    label_name = name
    if len(label_name) > 63:
        label_name = re.sub(r"[^A-Za-z0-9]+$", "", label_name[:63])
    labels = {
        "app.kubernetes.io/name": label_name,
        "app.kubernetes.io/version": KEDA_VERSION,
        "app.kubernetes.io/part-of": meta["name"],
        "app.kubernetes.io/managed-by": "keda-operator",
    }
    annotations: dict[str, str] = meta.get("annotations") or {}
    excluded = (
        set(annotations[EXCLUDED_LABELS_ANNOTATION].split(","))
        if EXCLUDED_LABELS_ANNOTATION in annotations
        else set()
    )
    for key, value in (meta.get("labels") or {}).items():
        if key not in excluded:
            labels[key] = value
    hpa_spec: Obj = {
        "scaleTargetRef": {
            "apiVersion": target_resource.api_version,
            "kind": target_kind,
            "name": (spec.get("scaleTargetRef") or {}).get("name"),
        },
        "minReplicas": hpa_min_replicas(spec),
        "maxReplicas": hpa_max_replicas(spec),
    }
    if metrics:
        hpa_spec["metrics"] = metrics
    behavior = _hpa_config(spec).get("behavior")
    if behavior is not None:
        hpa_spec["behavior"] = json.loads(json.dumps(behavior))
    metadata: Obj = {"name": name, "namespace": meta["namespace"], "labels": labels}
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [owner_reference(scaled_object)]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": hpa_spec,
    }


def hpa_needs_update(desired: Obj, found: Obj) -> bool:
    """`updateHPAIfNeeded`'s three checks: spec, labels, annotations."""
    want, have = desired["spec"], found.get("spec") or {}
    if (
        len(want.get("metrics") or []) != len(have.get("metrics") or [])
        or want.get("behavior") != have.get("behavior")
        or not derives(want, have)
    ):
        return True
    want_meta, have_meta = desired["metadata"], found["metadata"]
    if not _map_derives(want_meta.get("labels"), have_meta.get("labels")):
        return True
    want_annotations = want_meta.get("annotations")
    have_annotations = have_meta.get("annotations")
    return bool(not want_annotations and have_annotations) or not _map_derives(
        want_annotations, have_annotations
    )


def derives(desired: Any, found: Any) -> bool:
    """`equality.Semantic.DeepDerivative` on JSON objects (Go structs): what `desired` leaves
    unset (null, "", an empty list or object) matches anything; a list may be longer in
    `found`; the rest must be equal."""
    if desired is None:
        return True
    if isinstance(desired, str):
        return not desired or desired == found
    if isinstance(desired, list):
        if not desired:
            return True
        if not isinstance(found, list) or len(desired) > len(found):
            return False
        return all(derives(d, f) for d, f in zip(desired, found, strict=False))
    if isinstance(desired, dict):
        if not desired:
            return True
        if not isinstance(found, dict):
            return False
        return all(derives(value, found.get(key)) for key, value in desired.items())
    return bool(desired == found)


def _map_derives(desired: dict[str, Any] | None, found: dict[str, Any] | None) -> bool:
    """DeepDerivative on a Go map (labels, annotations): each key of `desired` must be there."""
    if not desired:
        return True
    found = found or {}
    if len(desired) > len(found):
        return False
    return all(key in found and derives(value, found[key]) for key, value in desired.items())


def _cpu_metric(trigger: Obj) -> Obj:
    """KEDA's cpu scaler (`parseResourceMetadata`, `GetMetricSpecForScaling`)."""

    def failed(cause: str) -> ReconcileFailed:
        return ReconcileFailed(HPA_ERROR, f"error parsing cpu metadata: {cause}")

    metadata = trigger.get("metadata") or {}
    if "type" in metadata:
        raise failed(
            "scaler cpu info: The 'type' setting is DEPRECATED and is removed in v2.18 - "
            "Use 'metricType' instead."
        )
    value = metadata.get("value")
    if value is None:
        raise failed('missing required parameter "value" in [triggerMetadata]')
    if not isinstance(value, str):
        raise failed(f"metadata.value must be a string (the CRD's schema), not {value!r}")
    metric_type = str(trigger.get("metricType") or "")
    target: Obj
    if metric_type == "AverageValue":
        target = {"type": "AverageValue", "averageValue": value}
    elif metric_type == "Utilization":
        if not _INT32.match(value) or not -(2**31) <= int(value) < 2**31:
            raise failed(f'strconv.ParseInt: parsing "{value}": invalid syntax')
        target = {"type": "Utilization", "averageUtilization": int(value)}
    else:
        raise failed(
            f"unknown metric type: {metric_type}, allowed values are 'Utilization' or "
            "'AverageValue'"
        )
    container = metadata.get("containerName")
    if container:
        return {
            "type": "ContainerResource",
            "containerResource": {"name": "cpu", "target": target, "container": container},
        }
    return {"type": "Resource", "resource": {"name": "cpu", "target": target}}


def _source(metric: Obj) -> str:
    return "containerResource" if metric["type"] == "ContainerResource" else "resource"


def _check_bounds(spec: Obj) -> None:
    """`CheckReplicaCountBoundsAreValid`."""
    minimum = 0 if spec.get("minReplicaCount") is None else hpa_min_replicas(spec)
    maximum = hpa_max_replicas(spec)
    if minimum > maximum:
        raise ReconcileFailed(
            BOUNDS_ERROR, f"MinReplicaCount={minimum} must be less than MaxReplicaCount={maximum}"
        )
    idle = spec.get("idleReplicaCount")
    if idle is not None and int(idle) >= minimum:
        raise ReconcileFailed(
            BOUNDS_ERROR, f"IdleReplicaCount={idle} must be less than MinReplicaCount={minimum}"
        )


def _check_triggers(triggers: list[Obj]) -> None:
    """`ValidateTriggers`."""
    if not triggers:
        raise ReconcileFailed(TRIGGERS_ERROR, "no triggers defined in the ScaledObject/ScaledJob")
    names: set[str] = set()
    for trigger in triggers:
        kind = trigger.get("type")
        if trigger.get("useCachedMetrics") and kind in ("cpu", "memory", "cron"):
            raise ReconcileFailed(
                TRIGGERS_ERROR, f'property "useCachedMetrics" is not supported for "{kind}" scaler'
            )
        name = trigger.get("name")
        if name:
            if name in names:
                raise ReconcileFailed(
                    TRIGGERS_ERROR,
                    f'triggerName "{name}" is defined multiple times in the '
                    "ScaledObject/ScaledJob, but it must be unique",
                )
            names.add(str(name))


# ---- small helpers -----------------------------------------------------------------------------


def _key(obj: Obj) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _hpa_config(spec: Obj) -> Obj:
    config: Obj = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
    return config


def _resource_of(group: str, version: str, kind: str) -> ResourceType | None:
    for resource in R.ALL:
        if (resource.group, resource.version, resource.kind) == (group, version, kind):
            return resource
    return None


def _owning_scaled_object(hpa: Obj | None) -> Key | None:
    """The ScaledObject an HPA's controller reference names (KEDA's `Owns`)."""
    if hpa is None:
        return None
    ref = controller_ref(hpa)
    if ref is None or ref.get("kind") != "ScaledObject":
        return None
    if str(ref.get("apiVersion", "")).split("/")[0] != GROUP:
        return None
    return hpa["metadata"].get("namespace", ""), str(ref.get("name"))


def _scaled_object_update_matters(old: Obj, new: Obj) -> bool:
    """KEDA's predicates on a ScaledObject update (`GenerationChangedPredicate` and the rest)."""
    if old.get("metadata", {}).get("generation") != new["metadata"].get("generation"):
        return True
    if any(annotation(old, key) != annotation(new, key) for key in WATCHED_ANNOTATIONS):
        return True
    return condition_true(new, "Ready") and not condition_true(old, "Ready")


def _hpa_update_matters(old: Obj, new: Obj) -> bool:
    """KEDA's predicates on an HPA update: labels, annotations, or the spec (not the status)."""
    old_meta, new_meta = old.get("metadata", {}), new["metadata"]
    if (old_meta.get("labels") or {}) != (new_meta.get("labels") or {}):
        return True
    if (old_meta.get("annotations") or {}) != (new_meta.get("annotations") or {}):
        return True
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    return len(old_spec.get("metrics") or []) != len(new_spec.get("metrics") or []) or not (
        derives(new_spec, old_spec)
    )


def _set(conditions: list[Obj], kind: str, status: str, reason: str, message: str) -> list[Obj]:
    """KEDA's `Conditions.Set*Condition`: type, status, reason, message; no timestamps."""
    updated = {"type": kind, "status": status, "reason": reason, "message": message}
    if not any(c.get("type") == kind for c in conditions):
        return [*conditions, updated]
    return [updated if c.get("type") == kind else c for c in conditions]

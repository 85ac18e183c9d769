"""Workload controllers: Deployment -> ReplicaSet -> Pods, StatefulSet, DaemonSet.

Each controller keeps a set of dirty keys filled by store change listeners and reconciles only
those, so an idle 50 000-pod cluster costs nothing per tick. Behaviour follows upstream where
the rebalancer can observe it:
- ReplicaSet scale-down deletes pods in upstream's order, the rule `rebalancer simulate` follows
  too (`rebalancer.upstream.replicaset`: unassigned, Pending, not Ready, lower
  pod-deletion-cost, more of the Deployment's pods on the node, later Ready, more restarts,
  later created first).
- Deployment: one ReplicaSet per pod-template hash; a template change surges the new set to full
  size and scales old sets to zero once the new one is available (simpler than the rolling
  update's maxSurge/maxUnavailable steps); status counts as upstream.
- StatefulSet: pods `<name>-<ordinal>`, OrderedReady (one at a time, waiting for Ready) or
  Parallel; a deleted pod is recreated under the same name once the old one is gone.
- DaemonSet: one pod per node it tolerates and selects, with upstream's automatic tolerations
  (incl. `node.kubernetes.io/unschedulable:NoSchedule`); pods are bound by the scheduler through
  a `metadata.name` node-affinity term, as upstream does.
- Pods are created through the API server's admission (`PodCreations`), as each controller's
  ServiceAccount: with mutating webhooks to call, creates are in flight for a while, may fail,
  and are retried with upstream's backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from dataclasses import dataclass

from rebalancer.upstream import replicaset as upstream
from rebalancer_sim import resources as R
from rebalancer_sim.admission import CREATE_OPTIONS, Admission, UserInfo, controller_user
from rebalancer_sim.objects import (
    Obj,
    controller_ref,
    get_condition,
    is_pod_active,
    is_pod_ready,
    owner_reference,
    percent_or_int,
    pod_phase,
    with_condition,
)
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.scheduling import matches_node_selector_and_affinity, untolerated_taint
from rebalancer_sim.selectors import label_selector_object
from rebalancer_sim.status import ApiError
from rebalancer_sim.store import Change, Store, format_time, parse_time

TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
Key = tuple[str, str]

DAEMONSET_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def _key(obj: Obj) -> Key:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def pod_from_template(owner: Obj, template: Obj, *, name: str | None = None) -> Obj:
    meta_template = template.get("metadata") or {}
    metadata: Obj = {
        "namespace": owner["metadata"]["namespace"],
        "labels": dict(meta_template.get("labels") or {}),
        "ownerReferences": [owner_reference(owner)],
    }
    if meta_template.get("annotations"):
        metadata["annotations"] = dict(meta_template["annotations"])
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = owner["metadata"]["name"] + "-"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": json.loads(json.dumps(template.get("spec") or {})),
    }


def _owned_pods(store: Store, owner: Obj) -> list[Obj]:
    return [
        obj
        for resource, obj in store.dependents_of(owner["metadata"]["uid"])
        if resource is R.PODS and (controller_ref(obj) or {}).get("uid") == owner["metadata"]["uid"]
    ]


def _scale_down_facts(pod: Obj) -> upstream.PodFacts:
    """What upstream's ReplicaSet controller reads of a pod when it picks what to delete."""
    metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready = is_pod_ready(pod)
    ready_since = (get_condition(pod, "Ready") or {}).get("lastTransitionTime") if ready else None
    sidecars = {
        c.get("name")
        for c in spec.get("initContainers") or []
        if c.get("restartPolicy") == "Always"
    }
    created = metadata.get("creationTimestamp")
    return upstream.PodFacts(
        uid=str(metadata.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        phase=pod_phase(pod),
        ready=ready,
        ready_since=parse_time(ready_since).timestamp() if ready_since else None,
        deletion_cost=upstream.deletion_cost(metadata.get("annotations") or {}),
        restarts=max(
            (int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []),
            default=0,
        ),
        sidecar_restarts=max(
            (
                int(c.get("restartCount") or 0)
                for c in status.get("initContainerStatuses") or []
                if c.get("name") in sidecars
            ),
            default=0,
        ),
        created=parse_time(created).timestamp() if created else None,
    )


# Upstream's controllers: the first batch of creates (controller.SlowStartInitialBatchSize),
# and the work queue's per-item backoff after a failed sync (DefaultControllerRateLimiter).
SLOW_START_INITIAL_BATCH = 1
RETRY_BASE_SECONDS = 0.005
RETRY_MAX_SECONDS = 1000.0


@dataclass
class _Creating:
    """The pod creates of one owner: in flight, and the last failure."""

    resource: ResourceType
    key: Key
    in_flight: int = 0
    failures: int = 0
    retry_at: float = 0.0
    error: str | None = None


class PodCreations:
    """How the controllers create pods: through the API server's admission, as upstream's
    controllers do (their create is an API call, under their ServiceAccount).

    With no mutating webhook to call, a create is immediate, as before. With one, the creates of
    a sync run in a task, in upstream's slow-start batches (1, 2, 4, ...; the first failure
    skips the rest); while they are in flight the owner neither creates nor deletes pods
    (upstream's expectations). A failed create is retried after the work queue's backoff (5 ms,
    doubling per failure, at most 1000 s), and the owner's status can say why
    (a ReplicaSet's `ReplicaFailure` condition). `failures` records each one for tests."""

    def __init__(self, store: Store, admission: Admission | None = None) -> None:
        self.store = store
        self.admission = admission
        self._owners: dict[str, _Creating] = {}  # by owner uid
        self._wake: list[tuple[float, ResourceType, Key]] = []  # owners to sync again, when
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures: list[tuple[float, str, str]] = []  # time, "<Kind> <ns>/<name>", error

    def busy(self, owner: Obj) -> bool:
        state = self._owners.get(owner["metadata"]["uid"])
        return state is not None and state.in_flight > 0

    def may_create(self, owner: Obj) -> bool:
        state = self._owners.get(owner["metadata"]["uid"])
        return state is None or (
            state.in_flight == 0 and self.store.clock.now().timestamp() >= state.retry_at
        )

    def error(self, owner: Obj) -> str | None:
        """Why the owner's last creates failed; None once one succeeds."""
        state = self._owners.get(owner["metadata"]["uid"])
        return None if state is None else state.error

    def due(self, resource: ResourceType) -> list[Key]:
        """Owners of `resource` to sync again now: their creates settled or their backoff ended."""
        if not self._wake:
            return []
        now = self.store.clock.now().timestamp()
        due = [key for at, kind, key in self._wake if kind is resource and at <= now]
        if due:
            self._wake = [w for w in self._wake if not (w[1] is resource and w[0] <= now)]
        return due

    def create(
        self, resource: ResourceType, owner: Obj, pods: list[Obj], *, user: UserInfo
    ) -> None:
        if not pods:
            return
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"].get("namespace", "")
        try:
            webhooks = self.admission is not None and any(
                self.admission.matching(pod, namespace=namespace) for pod in pods
            )
        except ApiError as error:
            self._settled(resource, owner, error.message)
            return
        if not webhooks:
            for pod in pods:
                try:
                    self.store.create(R.PODS, pod)
                except ApiError as error:
                    self._settled(resource, owner, error.message)
                    return
            if uid in self._owners:
                self._settled(resource, owner, None)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._settled(resource, owner, "no event loop runs to call admission webhooks")
            return
        state = self._state(resource, owner)
        state.in_flight = len(pods)
        task = loop.create_task(self._create_in_batches(resource, owner, pods, user))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create_in_batches(
        self, resource: ResourceType, owner: Obj, pods: list[Obj], user: UserInfo
    ) -> None:
        remaining, size, error = list(pods), SLOW_START_INITIAL_BATCH, None
        try:
            while remaining and error is None:
                batch, remaining = remaining[:size], remaining[size:]
                results = await asyncio.gather(
                    *(self._create_one(resource, owner, pod, user) for pod in batch)
                )
                error = next((result for result in results if result is not None), None)
                size *= 2
        finally:
            self._state(resource, owner).in_flight = 0  # skipped pods are no longer expected
        self._settled(resource, owner, error)

    async def _create_one(
        self, resource: ResourceType, owner: Obj, pod: Obj, user: UserInfo
    ) -> str | None:
        """One create through admission: None, or the error's message."""
        assert self.admission is not None
        namespace, name = _key(owner)
        try:
            admitted, _ = await self.admission.admit(
                pod, namespace=namespace, user=user, options=CREATE_OPTIONS
            )
            current = self.store.get(resource, namespace, name)
            if current is not None and current["metadata"]["uid"] == owner["metadata"]["uid"]:
                # (an owner gone meanwhile gets none: upstream's garbage collector would delete it)
                self.store.create(R.PODS, admitted)
        except ApiError as error:
            return error.message
        return None

    def _state(self, resource: ResourceType, owner: Obj) -> _Creating:
        uid = owner["metadata"]["uid"]
        if uid not in self._owners:
            self._owners[uid] = _Creating(resource, _key(owner))
        return self._owners[uid]

    def _settled(self, resource: ResourceType, owner: Obj, error: str | None) -> None:
        state = self._state(resource, owner)
        now = self.store.clock.now().timestamp()
        self._wake.append((now, resource, state.key))  # its status may change
        if error is None:
            del self._owners[owner["metadata"]["uid"]]
            return
        state.failures += 1
        state.error = error
        state.retry_at = now + min(
            RETRY_BASE_SECONDS * 2 ** (state.failures - 1), RETRY_MAX_SECONDS
        )
        self._wake.append((state.retry_at, resource, state.key))
        self.failures.append((now, f"{resource.kind} {state.key[0]}/{state.key[1]}", error))

    async def close(self) -> None:
        """Cancel the creates in flight (the cluster stops)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Controller:
    resource: ResourceType
    user: UserInfo = {}  # the identity its creates are admitted as

    def __init__(self, store: Store, pods: PodCreations | None = None) -> None:
        self.store = store
        self.pods = pods or PodCreations(store)
        self._dirty: dict[Key, None] = {}
        store.listeners.append(self._on_change)
        for obj in store.items(self.resource):
            self._dirty[_key(obj)] = None

    def _on_change(self, change: Change) -> None:
        if change.resource is self.resource:
            self._dirty[_key(change.new)] = None
        elif change.resource is R.PODS:
            ref = controller_ref(change.new)
            if ref is not None and ref.get("kind") == self.resource.kind:
                self._dirty[(change.new["metadata"].get("namespace", ""), ref["name"])] = None

    def reconcile(self) -> int:
        for key in self.pods.due(self.resource):
            self._dirty[key] = None
        dirty, self._dirty = self._dirty, {}
        for key in dirty:
            obj = self.store.get(self.resource, *key)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                self.sync(obj)
        return len(dirty)

    def sync(self, obj: Obj) -> None:
        raise NotImplementedError

    def _write_status(self, obj: Obj, status: Obj) -> None:
        """Merge `status` into the object's; a None value removes that field."""
        merged = dict(obj.get("status") or {})
        merged.update(status)
        merged = {key: value for key, value in merged.items() if value is not None}
        if merged != obj.get("status"):
            updated = dict(obj)
            updated["status"] = merged
            self.store.update(self.resource, updated)


class ReplicaSetController(_Controller):
    resource = R.REPLICASETS
    user = controller_user("replicaset-controller")

    def sync(self, rs: Obj) -> None:
        pods = _owned_pods(self.store, rs)
        active = [p for p in pods if is_pod_active(p)]
        wanted = int(rs["spec"].get("replicas", 1))
        if self.pods.busy(rs):
            pass  # creates in flight: nothing until they are seen (upstream's expectations)
        elif len(active) < wanted:
            if self.pods.may_create(rs):
                template = rs["spec"].get("template") or {}
                new_pods = [pod_from_template(rs, template) for _ in range(wanted - len(active))]
                self.pods.create(R.REPLICASETS, rs, new_pods, user=self.user)
        elif len(active) > wanted:
            victims = upstream.victims(
                sorted(active, key=lambda p: p["metadata"]["name"]),
                len(active) - wanted,
                facts=_scale_down_facts,
                related_nodes=(
                    p.get("spec", {}).get("nodeName") or "" for p in self._related_active(rs)
                ),
                now=self.store.clock.now().timestamp(),
            )
            for pod in victims:
                with contextlib.suppress(ApiError):
                    self.store.delete(R.PODS, *_key(pod))
        pods = [p for p in _owned_pods(self.store, rs) if is_pod_active(p)]
        ready = sum(1 for p in pods if is_pod_ready(p))
        labels_match = label_selector_object(
            {
                "matchLabels": ((rs["spec"].get("template") or {}).get("metadata") or {}).get(
                    "labels"
                )
                or {}
            }
        )
        self._write_status(
            rs,
            {
                "replicas": len(pods),
                "fullyLabeledReplicas": sum(
                    1 for p in pods if labels_match(p["metadata"].get("labels") or {})
                ),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs["metadata"].get("generation", 1),
                "conditions": self._failure_conditions(rs) or None,
            },
        )

    def _related_active(self, rs: Obj) -> list[Obj]:
        """The active pods of every ReplicaSet of this one's owner (upstream's
        `getIndirectlyRelatedPods`): a Deployment's old and new sets count together. A set
        without an owner has none, so its pods all rank alike (the real controller-manager)."""
        owner = controller_ref(rs)
        if owner is None:
            return []
        siblings = [
            obj
            for resource, obj in self.store.dependents_of(owner["uid"])
            if resource is R.REPLICASETS and (controller_ref(obj) or {}).get("uid") == owner["uid"]
        ]
        return [
            p for sibling in siblings for p in _owned_pods(self.store, sibling) if is_pod_active(p)
        ]

    def _failure_conditions(self, rs: Obj) -> list[Obj]:
        """Upstream's `ReplicaFailure` condition: set (reason FailedCreate, the API's error) when
        creates fail and it is absent, removed once they succeed."""
        conditions = list((rs.get("status") or {}).get("conditions") or [])
        failure = next((c for c in conditions if c.get("type") == "ReplicaFailure"), None)
        error = self.pods.error(rs)
        if error is not None and failure is None:
            now = format_time(self.store.clock.now())
            conditions = with_condition(
                conditions, "ReplicaFailure", "True", now=now, reason="FailedCreate", message=error
            )
        elif error is None and failure is not None:
            conditions.remove(failure)
        return conditions


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    number = int(digest[:16], 16)
    out = []
    for _ in range(10):
        number, index = divmod(number, len(alphabet))
        out.append(alphabet[index])
    return "".join(out)


class DeploymentController(_Controller):
    resource = R.DEPLOYMENTS

    def _on_change(self, change: Change) -> None:
        if change.resource is R.DEPLOYMENTS:
            self._dirty[_key(change.new)] = None
        elif change.resource is R.REPLICASETS:
            ref = controller_ref(change.new)
            if ref is not None and ref.get("kind") == "Deployment":
                self._dirty[(change.new["metadata"].get("namespace", ""), ref["name"])] = None

    def sync(self, deployment: Obj) -> None:
        namespace, name = _key(deployment)
        spec = deployment["spec"]
        template = spec.get("template") or {}
        pod_hash = template_hash(template)
        owned = [
            obj
            for resource, obj in self.store.dependents_of(deployment["metadata"]["uid"])
            if resource is R.REPLICASETS
        ]
        new_rs = next(
            (rs for rs in owned if rs["metadata"].get("labels", {}).get(TEMPLATE_HASH) == pod_hash),
            None,
        )
        wanted = int(spec.get("replicas", 1))
        revision = 1 + max(
            (int((rs["metadata"].get("annotations") or {}).get(REVISION, 0)) for rs in owned),
            default=0,
        )
        if new_rs is None:
            new_template = json.loads(json.dumps(template))
            new_template.setdefault("metadata", {}).setdefault("labels", {})[TEMPLATE_HASH] = (
                pod_hash
            )
            selector = json.loads(json.dumps(spec.get("selector") or {}))
            selector.setdefault("matchLabels", {})[TEMPLATE_HASH] = pod_hash
            new_rs = self.store.create(
                R.REPLICASETS,
                {
                    "metadata": {
                        "name": f"{name}-{pod_hash}",
                        "namespace": namespace,
                        "labels": dict(new_template["metadata"]["labels"]),
                        "annotations": {
                            REVISION: str(revision),
                            "deployment.kubernetes.io/desired-replicas": str(wanted),
                        },
                        "ownerReferences": [owner_reference(deployment)],
                    },
                    "spec": {"replicas": wanted, "selector": selector, "template": new_template},
                },
            )
        elif new_rs["spec"].get("replicas") != wanted:
            self._scale(new_rs, wanted)
        old = [rs for rs in owned if rs["metadata"]["uid"] != new_rs["metadata"]["uid"]]
        max_unavailable = percent_or_int(
            ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable", "25%"),
            wanted,
            round_up=False,
        )
        new_available = int((new_rs.get("status") or {}).get("availableReplicas", 0))
        if spec.get("strategy", {}).get("type") == "Recreate" or new_available >= wanted - (
            max_unavailable
        ):
            for rs in old:
                if rs["spec"].get("replicas", 0):
                    self._scale(rs, 0)
        all_sets = [self.store.get(R.REPLICASETS, *_key(rs)) or rs for rs in [*owned, new_rs]]
        by_uid = {rs["metadata"]["uid"]: rs for rs in all_sets}.values()
        new_status = (self.store.get(R.REPLICASETS, *_key(new_rs)) or new_rs).get("status") or {}
        replicas = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in by_uid)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in by_uid)
        available = sum(int((rs.get("status") or {}).get("availableReplicas", 0)) for rs in by_uid)
        now = format_time(self.store.clock.now())
        conditions = with_condition(
            (deployment.get("status") or {}).get("conditions"),
            "Available",
            "True" if available >= wanted - max_unavailable else "False",
            now=now,
            reason="MinimumReplicasAvailable"
            if available >= wanted - max_unavailable
            else "MinimumReplicasUnavailable",
            message="Deployment has minimum availability."
            if available >= wanted - max_unavailable
            else "Deployment does not have minimum availability.",
        )
        conditions = with_condition(
            conditions,
            "Progressing",
            "True",
            now=now,
            reason="NewReplicaSetAvailable"
            if int(new_status.get("availableReplicas", 0)) >= wanted
            else "ReplicaSetUpdated",
            message=f'ReplicaSet "{new_rs["metadata"]["name"]}" '
            + (
                "has successfully progressed."
                if int(new_status.get("availableReplicas", 0)) >= wanted
                else "is progressing."
            ),
        )
        status: Obj = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": replicas,
            "updatedReplicas": int(new_status.get("replicas", 0)),
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(0, wanted - available),
            "conditions": conditions,
        }
        self._write_status(deployment, status)

    def _scale(self, rs: Obj, replicas: int) -> None:
        updated = dict(rs)
        updated["spec"] = dict(rs["spec"], replicas=replicas)
        annotations = dict(rs["metadata"].get("annotations") or {})
        annotations["deployment.kubernetes.io/desired-replicas"] = str(replicas)
        updated["metadata"] = dict(rs["metadata"], annotations=annotations)
        self.store.update(R.REPLICASETS, updated)


class StatefulSetController(_Controller):
    resource = R.STATEFULSETS
    user = controller_user("statefulset-controller")

    def sync(self, sts: Obj) -> None:
        namespace, name = _key(sts)
        spec = sts["spec"]
        wanted = int(spec.get("replicas", 1))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        template = spec.get("template") or {}
        revision = f"{name}-{template_hash(template)}"
        missing: list[Obj] = []
        for ordinal in range(wanted):
            pod_name = f"{name}-{ordinal}"
            pod = self.store.get(R.PODS, namespace, pod_name)
            if pod is None:
                new_pod = pod_from_template(sts, template, name=pod_name)
                labels = new_pod["metadata"]["labels"]
                labels["statefulset.kubernetes.io/pod-name"] = pod_name
                labels["apps.kubernetes.io/pod-index"] = str(ordinal)
                labels["controller-revision-hash"] = revision
                new_pod["spec"]["hostname"] = pod_name
                if spec.get("serviceName"):
                    new_pod["spec"]["subdomain"] = spec["serviceName"]
                missing.append(new_pod)
                if not parallel:
                    break
            elif not parallel and (not is_pod_ready(pod) or not is_pod_active(pod)):
                break  # OrderedReady: wait for this ordinal before the next
        if not self.pods.busy(sts):
            if self.pods.may_create(sts):
                self.pods.create(R.STATEFULSETS, sts, missing, user=self.user)
            pods = [p for p in _owned_pods(self.store, sts) if is_pod_active(p)]
            extra = sorted((p for p in pods if _ordinal(p) >= wanted), key=_ordinal, reverse=True)
            for pod in extra[: (len(extra) if parallel else 1)]:
                with contextlib.suppress(ApiError):
                    self.store.delete(R.PODS, *_key(pod))
        pods = [p for p in _owned_pods(self.store, sts) if is_pod_active(p)]
        ready = sum(1 for p in pods if is_pod_ready(p))
        self._write_status(
            sts,
            {
                "observedGeneration": sts["metadata"].get("generation", 1),
                "replicas": len(pods),
                "readyReplicas": ready,
                "availableReplicas": ready,
                "currentReplicas": len(pods),
                "updatedReplicas": len(pods),
                "currentRevision": revision,
                "updateRevision": revision,
            },
        )


def _ordinal(pod: Obj) -> int:
    try:
        return int(pod["metadata"]["name"].rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


class DaemonSetController(_Controller):
    resource = R.DAEMONSETS
    user = controller_user("daemon-set-controller")

    def _on_change(self, change: Change) -> None:
        super()._on_change(change)
        if change.resource is R.NODES and (
            change.type != "MODIFIED"
            or (change.old or {}).get("spec") != change.new.get("spec")
            or (change.old or {}).get("metadata", {}).get("labels")
            != change.new["metadata"].get("labels")
        ):
            for ds in self.store.items(R.DAEMONSETS):
                self._dirty[_key(ds)] = None

    def sync(self, ds: Obj) -> None:
        template = json.loads(json.dumps(ds["spec"].get("template") or {}))
        pod_spec = template.setdefault("spec", {})
        tolerations = pod_spec.setdefault("tolerations", [])
        for toleration in DAEMONSET_TOLERATIONS:
            if toleration not in tolerations:
                tolerations.append(toleration)
        pods = [p for p in _owned_pods(self.store, ds) if is_pod_active(p)]
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            node_name = _daemon_node(pod)
            by_node.setdefault(node_name, []).append(pod)
        eligible = 0
        missing: list[Obj] = []
        for node in self.store.items(R.NODES):
            node_name = node["metadata"]["name"]
            fits = matches_node_selector_and_affinity(pod_spec, node) and (
                untolerated_taint(
                    tolerations,
                    [
                        t
                        for t in node.get("spec", {}).get("taints") or []
                        if t.get("effect") in ("NoSchedule", "NoExecute")
                        and t.get("key")
                        not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
                    ],
                )
                is None
            )
            if not fits:
                continue
            eligible += 1
            if by_node.pop(node_name, None):
                continue
            new_pod = pod_from_template(ds, template)
            spec = new_pod["spec"]
            affinity = spec.setdefault("affinity", {})
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            }
            missing.append(new_pod)
        if not self.pods.busy(ds):
            if self.pods.may_create(ds):
                self.pods.create(R.DAEMONSETS, ds, missing, user=self.user)
            for leftovers in by_node.values():
                for pod in leftovers:
                    with contextlib.suppress(ApiError):
                        self.store.delete(R.PODS, *_key(pod))
        pods = [p for p in _owned_pods(self.store, ds) if is_pod_active(p)]
        ready = sum(1 for p in pods if is_pod_ready(p))
        scheduled = sum(1 for p in pods if p.get("spec", {}).get("nodeName"))
        self._write_status(
            ds,
            {
                "observedGeneration": ds["metadata"].get("generation", 1),
                "desiredNumberScheduled": eligible,
                "currentNumberScheduled": scheduled,
                "numberReady": ready,
                "numberAvailable": ready,
                "updatedNumberScheduled": scheduled,
                "numberMisscheduled": 0,
            },
        )


def _daemon_node(pod: Obj) -> str:
    node = pod.get("spec", {}).get("nodeName")
    if node:
        return str(node)
    terms = (
        ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


class WorkloadOwners:
    """Operators that own a Deployment or StatefulSet and set its `spec.replicas` (KServe, KAITO,
    Dynamo's operator create Deployments and reconcile them): every `reset_seconds` each one puts
    the replicas it wants back, whoever changed them. What it wants is the scenario's replicas,
    or the last `ClusterEmulator.scale` (a user changing the owner's own resource). `resets`
    records each time it overwrote someone else's count, for tests."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._owned: dict[tuple[str, str], tuple[float, int, float]] = {}  # -> period, want, next
        self.resets: list[tuple[float, str, str, int, int]] = []  # time, ns, name, found, set

    def own(self, namespace: str, name: str, *, replicas: int, reset_seconds: float) -> None:
        now = self.store.clock.now().timestamp()
        self._owned[(namespace, name)] = (reset_seconds, replicas, now + reset_seconds)

    def want(self, namespace: str, name: str, replicas: int) -> None:
        if (namespace, name) in self._owned:
            period, _, due = self._owned[(namespace, name)]
            self._owned[(namespace, name)] = (period, replicas, due)

    def reconcile(self) -> int:
        now = self.store.clock.now().timestamp()
        worked = 0
        for (namespace, name), (period, replicas, due) in list(self._owned.items()):
            if now + 1e-9 < due:
                continue
            self._owned[(namespace, name)] = (period, replicas, now + period)
            for resource in (R.DEPLOYMENTS, R.STATEFULSETS):
                obj = self.store.get(resource, namespace, name)
                if obj is None:
                    continue
                found = int(obj["spec"].get("replicas", 1))
                if found != replicas:
                    updated = json.loads(json.dumps(obj))
                    updated["spec"]["replicas"] = replicas
                    self.store.update(resource, updated)
                    self.resets.append((now, namespace, name, found, replicas))
                    worked += 1
        return worked

"""PodDisruptionBudgets: the disruption controller's status and the eviction subresource.

`DisruptionController` keeps each PDB's status (expectedPods, desiredHealthy, currentHealthy,
disruptionsAllowed, observedGeneration) current, recomputing only budgets whose pods or spec
changed. `evict` is `POST pods/<name>/eviction` with upstream's rules (shared reference D.1):
pods that are terminating, Pending, Succeeded or Failed are deleted without a budget check; no
budget -> allowed; more than one -> 500; `disruptionsAllowed == 0` -> 429 with a
`DisruptionBudget` cause; an allowed eviction decrements the budget before deleting the pod, so
two quick evictions cannot both spend the same disruption.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.objects import (
    Obj,
    controller_ref,
    is_pod_ready,
    is_terminating,
    labels_of,
    percent_or_int,
    pod_phase,
    with_condition,
)
from rebalancer_sim.selectors import LabelPredicate, label_selector_object
from rebalancer_sim.status import ApiError, bad_request, precondition_failed
from rebalancer_sim.store import Change, Store, format_time

PdbKey = tuple[str, str]


class DisruptionController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: set[PdbKey] = set()
        self._members: dict[PdbKey, set[str]] = {}  # pdb -> pod names in its namespace
        self._selectors: dict[PdbKey, tuple[str, LabelPredicate]] = {}
        store.listeners.append(self._on_change)
        for pdb in store.items(R.PDBS):
            self._dirty.add(_key(pdb))

    def _on_change(self, change: Change) -> None:
        resource = change.resource
        if resource is R.PDBS:
            key = _key(change.new)
            if change.type == "DELETED":
                self._members.pop(key, None)
                self._dirty.discard(key)
            elif change.old is None or change.old.get("spec") != change.new.get("spec"):
                self._members.pop(key, None)  # selector may have changed: rescan
                self._dirty.add(key)
        elif resource is R.PODS:
            namespace = change.new["metadata"].get("namespace", "")
            name = change.new["metadata"]["name"]
            old_labels = labels_of(change.old) if change.old else None
            new_labels = None if change.type == "DELETED" else labels_of(change.new)
            same_labels = old_labels is not None and old_labels == new_labels
            for pdb in self.store.items(R.PDBS, namespace):
                key = _key(pdb)
                members = self._members.get(key)
                if same_labels and members is not None:
                    # Labels unchanged (most writes: status): membership is known already.
                    if name in members:
                        self._dirty.add(key)
                    continue
                matches = self._selector(pdb)
                was = old_labels is not None and matches(old_labels)
                now = new_labels is not None and matches(new_labels)
                if not (was or now):
                    continue
                members = self._members.get(key)
                if members is not None:
                    if now:
                        members.add(name)
                    else:
                        members.discard(name)
                self._dirty.add(key)
        elif resource in (R.REPLICASETS, R.STATEFULSETS, R.DEPLOYMENTS):
            old_replicas = (change.old or {}).get("spec", {}).get("replicas")
            if change.type == "DELETED" or old_replicas != change.new.get("spec", {}).get(
                "replicas"
            ):
                namespace = change.new["metadata"].get("namespace", "")
                for pdb in self.store.items(R.PDBS, namespace):
                    self._dirty.add(_key(pdb))

    def _selector(self, pdb: Obj) -> LabelPredicate:
        key, version = _key(pdb), pdb["metadata"]["resourceVersion"]
        cached = self._selectors.get(key)
        if cached is None or cached[0] != version:
            cached = (version, label_selector_object(pdb["spec"].get("selector")))
            self._selectors[key] = cached
        return cached[1]

    def reconcile(self) -> int:
        """Recompute the status of every budget that may have changed; returns how many."""
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            pdb = self.store.get(R.PDBS, *key)
            if pdb is not None:
                self._sync(pdb)
        return len(dirty)

    def _pods(self, pdb: Obj) -> list[Obj]:
        key = _key(pdb)
        namespace = key[0]
        members = self._members.get(key)
        if members is None:
            matches = label_selector_object(pdb["spec"].get("selector"))
            members = {
                pod["metadata"]["name"]
                for pod in self.store.items(R.PODS, namespace)
                if matches(labels_of(pod))
            }
            self._members[key] = members
        pods = []
        for name in members:
            pod = self.store.get(R.PODS, namespace, name)
            if pod is not None:
                pods.append(pod)
        return pods

    def _sync(self, pdb: Obj) -> None:
        pods = self._pods(pdb)
        expected, desired = self._expectations(pdb, pods)
        disrupted = dict(pdb.get("status", {}).get("disruptedPods") or {})
        live = {pod["metadata"]["name"]: pod for pod in pods}
        for name in list(disrupted):
            if name not in live or is_terminating(live[name]):
                del disrupted[name]
        healthy = sum(
            1
            for pod in pods
            if not is_terminating(pod)
            and pod["metadata"]["name"] not in disrupted
            and is_pod_ready(pod)
        )
        allowed = max(0, healthy - desired)
        status: Obj = dict(pdb.get("status") or {})
        status.update(
            {
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "disruptionsAllowed": allowed,
                "expectedPods": expected,
                "observedGeneration": pdb["metadata"].get("generation", 1),
            }
        )
        if disrupted:
            status["disruptedPods"] = disrupted
        else:
            status.pop("disruptedPods", None)
        status["conditions"] = with_condition(
            status.get("conditions"),
            "DisruptionAllowed",
            "True" if allowed > 0 else "False",
            now=format_time(self.store.clock.now()),
            reason="SufficientPods" if allowed > 0 else "InsufficientPods",
            message="",
        )
        if status != pdb.get("status"):
            updated = dict(pdb)
            updated["status"] = status
            self.store.update(R.PDBS, updated)

    def _expectations(self, pdb: Obj, pods: list[Obj]) -> tuple[int, int]:
        """(expectedPods, desiredHealthy) as upstream's disruption controller computes them."""
        spec = pdb.get("spec", {})
        min_available = spec.get("minAvailable")
        max_unavailable = spec.get("maxUnavailable")
        if min_available is not None and not isinstance(min_available, str):
            return len(pods), int(min_available)
        expected = self._controller_scale(pdb, pods)
        if min_available is not None:
            return expected, percent_or_int(min_available, expected, round_up=True)
        if max_unavailable is not None:
            unavailable = percent_or_int(max_unavailable, expected, round_up=True)
            return expected, max(0, expected - unavailable)
        return len(pods), len(pods)

    def _controller_scale(self, pdb: Obj, pods: list[Obj]) -> int:
        """Sum of `spec.replicas` of the pods' controllers (a Deployment's, for its ReplicaSets)."""
        namespace = pdb["metadata"].get("namespace", "")
        scales: dict[str, int] = {}
        for pod in pods:
            ref = controller_ref(pod)
            if ref is None:
                scales[pod["metadata"]["uid"]] = 1
                continue
            if ref["uid"] in scales:
                continue
            owner: Obj | None = None
            if ref["kind"] == "ReplicaSet":
                owner = self.store.get(R.REPLICASETS, namespace, ref["name"])
                parent = controller_ref(owner) if owner else None
                if owner is not None and parent is not None and parent["kind"] == "Deployment":
                    deployment = self.store.get(R.DEPLOYMENTS, namespace, parent["name"])
                    if deployment is not None:
                        scales[parent["uid"]] = int(deployment["spec"].get("replicas", 1))
                        scales[ref["uid"]] = 0
                        continue
            elif ref["kind"] == "StatefulSet":
                owner = self.store.get(R.STATEFULSETS, namespace, ref["name"])
            scales[ref["uid"]] = int(owner["spec"].get("replicas", 1)) if owner else 0
        return sum(scales.values())


def _key(pdb: Obj) -> PdbKey:
    return pdb["metadata"].get("namespace", ""), pdb["metadata"]["name"]


def _too_many_requests(message: str, retry_after: int = 0) -> ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details=details,
        retry_after_seconds=retry_after or None,
    )


def evict(store: Store, namespace: str, name: str, body: Any) -> Obj:
    """The eviction subresource. Returns the success Status or raises `ApiError`."""
    if not isinstance(body, dict):
        raise bad_request("Eviction body must be a JSON object")
    body_name = (body.get("metadata") or {}).get("name")
    if body_name and body_name != name:
        raise bad_request("name in URL does not match name in Eviction object")
    pod = store.must_get(R.PODS, namespace, name)
    options = body.get("deleteOptions") or {}
    preconditions = options.get("preconditions") or {}
    if preconditions.get("uid") and preconditions["uid"] != pod["metadata"]["uid"]:
        raise precondition_failed(R.PODS, name, "UID", preconditions["uid"], pod["metadata"]["uid"])
    grace = options.get("gracePeriodSeconds")
    dry_run = bool(options.get("dryRun"))
    success = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    if is_terminating(pod) or pod_phase(pod) in ("Pending", "Succeeded", "Failed"):
        if not dry_run:
            _mark_and_delete(store, pod, grace, preconditions)
        return success
    pdbs = [
        pdb
        for pdb in store.items(R.PDBS, namespace)
        if label_selector_object(pdb["spec"].get("selector"))(labels_of(pod))
    ]
    if len(pdbs) > 1:
        raise ApiError(
            500,
            "",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support.",
        )
    if pdbs:
        pdb = pdbs[0]
        status = pdb.get("status") or {}
        pdb_name = pdb["metadata"]["name"]
        if status.get("observedGeneration", 0) < pdb["metadata"].get("generation", 1):
            raise _too_many_requests(
                f"The disruption budget {pdb_name} is still being processed by the server.", 10
            )
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise ApiError(403, "Forbidden", "pdb disruptions allowed is negative")
        healthy = int(status.get("currentHealthy", 0))
        desired = int(status.get("desiredHealthy", 0))
        unready_and_budget_ok = not is_pod_ready(pod) and healthy >= desired > 0
        if pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow" and not is_pod_ready(pod):
            unready_and_budget_ok = True
        if not unready_and_budget_ok:
            if allowed == 0:
                raise _too_many_requests(
                    f"The disruption budget {pdb_name} needs {desired} healthy pods and has "
                    f"{healthy} currently"
                )
            if not dry_run:
                updated = dict(pdb)
                new_status = dict(status)
                new_status["disruptionsAllowed"] = allowed - 1
                disrupted = dict(new_status.get("disruptedPods") or {})
                disrupted[name] = format_time(store.clock.now())
                new_status["disruptedPods"] = disrupted
                updated["status"] = new_status
                store.update(R.PDBS, updated)
    if not dry_run:
        _mark_and_delete(store, pod, grace, preconditions)
    return success


def _mark_and_delete(
    store: Store, pod: Obj, grace: int | None, preconditions: dict[str, Any]
) -> None:
    """What an allowed eviction writes: the DisruptionTarget condition (a status update of its
    own, which watchers see first), then a graceful delete."""
    meta = pod["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    wanted_version = preconditions.get("resourceVersion")
    if wanted_version and wanted_version != meta["resourceVersion"]:
        raise precondition_failed(
            R.PODS, name, "ResourceVersion", wanted_version, meta["resourceVersion"]
        )
    status = dict(pod.get("status") or {})
    status["conditions"] = with_condition(
        status.get("conditions"),
        "DisruptionTarget",
        "True",
        now=format_time(store.clock.now()),
        reason="EvictionByEvictionAPI",
        message="Eviction API: evicting",
    )
    store.update(R.PODS, dict(pod, status=status))
    # The condition's write moved the resourceVersion: only the UID is still to check.
    uid_only = {k: v for k, v in preconditions.items() if k == "uid"}
    store.delete(R.PODS, namespace, name, grace_seconds=grace, preconditions=uid_only)

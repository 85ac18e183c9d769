"""The workload of a pod that the webhook's view does not show yet: a brand-new Deployment's first
pods reach the admission webhook within milliseconds of its creation, before the next planning
pass's view has it (the Deployment controller makes the ReplicaSet, the ReplicaSet its pods, in
one burst). Without this they were admitted unplaced (`unknown_workload`): neither on the groups
their policy asks for nor held from Karpenter's consolidation.

The owner is found from the pod itself, as the webhook sees it: its controller reference names
its ReplicaSet, whose name is the Deployment's and the pod's `pod-template-hash` (the Deployment
controller names it so), or its StatefulSet. Then the controller's live informer cache (the watch
often has the Deployment before its pods arrive), else one list of that name.
A Deployment counts only when its selector selects the pod, as the Deployment controller
guarantees for its own pods.

Bounded so that admission never waits long or floods the API server: one lookup per workload at
a time (a burst of a hundred pods makes one request), its result remembered for `REMEMBER_SECONDS`
(a workload not found too: a hostile pod naming a made-up owner costs one request), at most
`MAX_IN_FLIGHT` requests at once (more pods are admitted unplaced, as before), and a caller's
timeout (`webhook.LOOKUP_TIMEOUT_SECONDS`, well under the webhook's own). The request is a list
of the one name, which the controller's RBAC already grants. A workload carrying a
record of ours is not a new one: the view shows it, or soon will; it is left to the view, whose
records are checked (seal.py).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from rebalancer.controller.admission import matches_selector
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.seal import WORKLOAD_RECORDS
from rebalancer.controller.snapshot import WorkloadKey
from rebalancer.kube.client import Requester
from rebalancer.kube.errors import KubeError, NotFound

TEMPLATE_HASH = "pod-template-hash"
REMEMBER_SECONDS = 30.0
MAX_REMEMBERED = 1_000
MAX_IN_FLIGHT = 8
COLLECTIONS = {"Deployment": "deployments", "StatefulSet": "statefulsets"}


def owner_key(pod: Mapping[str, Any], namespace: str) -> WorkloadKey | None:
    """The Deployment or StatefulSet a pod's controller reference points to, by name."""
    meta = pod.get("metadata") or {}
    owner = next(
        (
            o
            for o in meta.get("ownerReferences") or []
            if isinstance(o, dict) and o.get("controller") is True
        ),
        None,
    )
    if owner is None or not isinstance(owner.get("name"), str):
        return None
    kind, name = owner.get("kind"), owner["name"]
    if kind == "StatefulSet":
        return ("StatefulSet", namespace, name)
    template_hash = (meta.get("labels") or {}).get(TEMPLATE_HASH)
    if kind != "ReplicaSet" or not isinstance(template_hash, str) or not template_hash:
        return None
    deployment, dash, suffix = name.rpartition("-")
    if not dash or not deployment or suffix != template_hash:
        return None  # not a ReplicaSet a Deployment made
    return ("Deployment", namespace, deployment)


class OwnerLookup:
    def __init__(
        self,
        client: Requester,
        *,
        live: Callable[[WorkloadKey], WorkloadInfo | None],
        monotonic: Callable[[], float],
        on_result: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._client = client
        self._live = live
        self._monotonic = monotonic
        self._on_result = on_result  # result: informer, fetched, absent, failed, busy
        self._remembered: OrderedDict[WorkloadKey, tuple[float, WorkloadInfo | None]] = (
            OrderedDict()
        )
        self._in_flight: dict[WorkloadKey, asyncio.Task[WorkloadInfo | None]] = {}

    async def workload_of(self, pod: Mapping[str, Any], namespace: str) -> WorkloadInfo | None:
        """The pod's Deployment or StatefulSet as the API has it now, or None: not one, not found,
        not its owner, carrying records of ours, or not learnt (busy, an error). The caller
        bounds the wait; a cancelled wait leaves the request to finish for the pods after it."""
        key = owner_key(pod, namespace)
        if key is None:
            return None
        known, workload = self._known(key)
        if not known:
            task = self._in_flight.get(key)
            if task is None:
                if len(self._in_flight) >= MAX_IN_FLIGHT:
                    self._on_result("busy")
                    return None
                task = asyncio.get_running_loop().create_task(self._fetch(key))
                self._in_flight[key] = task
                task.add_done_callback(lambda _: self._in_flight.pop(key, None))
            workload = await asyncio.shield(task)
        if workload is None or not self._owns(workload, pod):
            return None
        return workload

    def _known(self, key: WorkloadKey) -> tuple[bool, WorkloadInfo | None]:
        """(whether it is known without a request, the workload if there is one to use)."""
        live = self._live(key)
        if live is not None:
            self._on_result("informer")
            return True, _usable(live)
        remembered = self._remembered.get(key)
        if remembered is not None and self._monotonic() - remembered[0] < REMEMBER_SECONDS:
            return True, remembered[1]
        return False, None

    async def _fetch(self, key: WorkloadKey) -> WorkloadInfo | None:
        kind, namespace, name = key
        # A list of the one name rather than a GET: the controller may list StatefulSets (its
        # informer does), not get them, and the chart grants exactly what it calls. The name,
        # which the pod says, goes in the query, never in the path.
        path = f"/apis/apps/v1/namespaces/{namespace}/{COLLECTIONS[kind]}"
        try:
            listed = await self._client.request(
                "GET", path, query={"fieldSelector": f"metadata.name={name}"}
            )
            obj = _named(listed, name)
            workload = _usable(WorkloadInfo.from_json(kind, obj)) if obj is not None else None
        except NotFound:  # no such namespace, or no such kind served
            workload = None
        except (KubeError, OSError, TimeoutError):
            self._on_result("failed")
            return None  # not remembered: the next pod tries again
        except Exception:  # a bug must never cost a pod: the pod goes unplaced, as before
            self._on_result("failed")
            return None
        self._on_result("fetched" if workload is not None else "absent")
        self._remembered[key] = (self._monotonic(), workload)
        self._remembered.move_to_end(key)
        while len(self._remembered) > MAX_REMEMBERED:
            self._remembered.popitem(last=False)
        return workload

    @staticmethod
    def _owns(workload: WorkloadInfo, pod: Mapping[str, Any]) -> bool:
        """A StatefulSet is named by the pod's own reference; a Deployment found by the name
        pattern must also select the pod (as its ReplicaSets' pods always are)."""
        if workload.kind == "StatefulSet":
            return True
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return matches_selector(workload.selector, labels)


def _named(listed: Any, name: str) -> Mapping[str, Any] | None:
    items = listed.get("items") if isinstance(listed, dict) else None
    return next(
        (
            item
            for item in items or []
            if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == name
        ),
        None,
    )


def _usable(workload: WorkloadInfo) -> WorkloadInfo | None:
    """A workload with a record of ours is no new one: left to the view (records checked)."""
    if any(field in workload.annotations for field in WORKLOAD_RECORDS):
        return None
    return workload

"""The controller's writes, each safe to repeat and each guarded against racing other writers.

Read-modify-write of a Node goes through `update_node`: GET (or take the copy given), build a merge
patch from it, send it with that resourceVersion (a merge patch carrying `metadata.resourceVersion`
fails with 409 if the object changed meanwhile). Each method is one attempt: retries are the
caller's (`rebalancer.retry`). Every write passes the client's gate, which fences it as it leaves
(`Fenced`: not sent).
Pods are evicted through `pods/eviction` (PodDisruptionBudgets apply) or deleted with a UID
precondition, so a replacement that reuses the name is never hit. "Already gone" is success.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from rebalancer.kube.client import MERGE
from rebalancer.kube.errors import Conflict, NotFound
from rebalancer.kube.gate import RequestGate

WORKLOAD_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}",
}


def _q(value: str) -> str:
    return quote(value, safe="")


class Writer:
    def __init__(self, client: RequestGate) -> None:
        self._client = client

    async def update_node(
        self,
        name: str,
        build_patch: Callable[[Mapping[str, Any]], dict[str, Any] | None],
        *,
        current: Mapping[str, Any] | None = None,
    ) -> bool | None:
        """Apply `build_patch(node)` guarded by the node's resourceVersion.

        True: written; None: the node already looked as wanted (nothing written); False: the node
        is gone. `current` (the node as the cache has it) saves the GET; if it was stale the
        patch fails with 409 (Conflict), and a retry without it reads the node afresh.
        """
        path = f"/api/v1/nodes/{_q(name)}"
        try:
            node = current if current is not None else await self._client.request("GET", path)
        except NotFound:
            return False
        patch = build_patch(node)
        if patch is None:
            return None
        patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
        try:
            await self._client.request("PATCH", path, body=patch, content_type=MERGE)
        except NotFound:
            return False
        return True

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._client.request("GET", path)
        except NotFound:
            return None
        return result

    async def put(self, path: str, body: Mapping[str, Any]) -> None:
        await self._client.request("PUT", path, body=dict(body))

    async def create(self, path: str, body: Mapping[str, Any]) -> None:
        await self._client.request("POST", path, body=dict(body))

    async def patch(self, path: str, patch: Mapping[str, Any]) -> bool:
        """A JSON merge patch; False when the object is gone."""
        try:
            await self._client.request("PATCH", path, body=dict(patch), content_type=MERGE)
        except NotFound:
            return False
        return True

    async def delete(self, path: str) -> bool:
        """DELETE; False when it was gone already."""
        try:
            await self._client.request("DELETE", path)
        except NotFound:
            return False
        return True

    async def patch_workload(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        path = WORKLOAD_PATHS[kind].format(namespace=_q(namespace), name=_q(name))
        try:
            await self._client.request("PATCH", path, body=patch, content_type=MERGE)
        except NotFound:
            return False
        return True

    async def get_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        path = WORKLOAD_PATHS[kind].format(namespace=_q(namespace), name=_q(name))
        try:
            result: dict[str, Any] = await self._client.request("GET", path)
        except NotFound:
            return None
        return result

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        """A JSON merge patch of a Pod; False when it is gone."""
        return await self.patch(f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", patch)

    async def evict(self, namespace: str, name: str, body: Mapping[str, Any]) -> bool:
        """POST pods/eviction with `body` (an Eviction, carrying the UID precondition and any
        shorter grace); raises TooManyRequests when a PDB blocks it. False: already gone."""
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/eviction"
        try:
            await self._client.request("POST", path, body=dict(body))
        except (NotFound, Conflict):
            return False  # gone, or a new pod with the same name: not ours to evict
        return True

    async def delete_pod(self, namespace: str, name: str, body: Mapping[str, Any]) -> bool:
        """DELETE with `body` (DeleteOptions, carrying the UID precondition and the grace)."""
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}"
        try:
            await self._client.request("DELETE", path, body=dict(body))
        except (NotFound, Conflict):
            return False
        return True

    async def record_event(
        self,
        *,
        regarding: Mapping[str, str],
        reason: str,
        message: str,
        event_type: str = "Normal",
        component: str = "spot-rebalancer",
        now: datetime | None = None,
        limited: bool = True,
    ) -> None:
        """A core/v1 Event on an object (kubectl describe shows it)."""
        namespace = regarding.get("namespace") or "default"
        stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{regarding.get('name', 'object')}.",
                "namespace": namespace,
            },
            "involvedObject": {k: v for k, v in regarding.items() if v},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": component,
        }
        await self._client.request(
            "POST", f"/api/v1/namespaces/{_q(namespace)}/events", body=body, limited=limited
        )

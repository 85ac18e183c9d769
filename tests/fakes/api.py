"""An in-memory Kubernetes API in place of our `KubeClient`, for the controller's loop tests.

It answers `request()` and `stream()` as `rebalancer.kube.client.KubeClient` does, with the API's
rules where the controller depends on them: resourceVersions on every write, a JSON merge patch
or PUT carrying `metadata.resourceVersion` fails with 409 when the object moved on, a delete or
eviction with a UID precondition, watches that start from a list's resourceVersion, and an
eviction refused (429 with a DisruptionBudget cause) for the pods in `pdb_blocked` and those a
PodDisruptionBudget with `maxUnavailable: 0` selects (by matchLabels). No controllers
run: a test plays the ReplicaSet, the scheduler and Azure itself, step by step. Every write is
logged in order (`writes`), and `fail()` makes chosen requests fail as a real server can.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rebalancer.kube.errors import Conflict, KubeError, NotFound, TooManyRequests, Unavailable
from rebalancer.timefmt import iso
from rebalancer_sim.patch import merge_patch  # RFC 7386, as the emulator applies it

Key = tuple[str, str, str]  # (resource, namespace, name)
PDB_REFUSAL = {
    "kind": "Status",
    "reason": "TooManyRequests",
    "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 1 healthy pod"}]},
}


@dataclass
class Write:
    method: str
    resource: str
    namespace: str
    name: str
    body: Any
    status: int  # what the fake answered: 200, or the error's status
    at: float = 0.0  # event-loop time of the request

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.method} {self.resource} {where} -> {self.status}"


@dataclass
class Fault:
    method: str
    path_part: str
    error: Callable[[], Exception]
    times: int


@dataclass
class FakeApi:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)
    pdb_blocked: set[tuple[str, str]] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)
    after_write: Callable[[Write], None] | None = None  # called once a write is applied
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    _watchers: list[tuple[str, asyncio.Queue[dict[str, Any]]]] = field(default_factory=list)

    # ---- the test's side ---------------------------------------------------------------------

    def put_object(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object as a cluster component would (no faults, not logged)."""
        meta = obj.setdefault("metadata", {})
        key = (resource, meta.get("namespace", ""), meta["name"])
        meta.setdefault("uid", f"uid-{meta['name']}")
        if key not in self.objects:
            meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = str(next(self._versions))
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        self._notify(resource, kind, obj)
        return obj

    def edit(self, resource: str, namespace: str, name: str, change: Callable[[Any], None]) -> None:
        obj = copy.deepcopy(self.objects[(resource, namespace, name)])
        change(obj)
        self.put_object(resource, obj)

    def remove(self, resource: str, namespace: str, name: str) -> None:
        obj = self.objects.pop((resource, namespace, name))
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self._notify(resource, "DELETED", obj)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(resource, namespace, name)]

    def fail(self, method: str, path_part: str, error: Callable[[], Exception], times: int) -> None:
        self.faults.append(Fault(method, path_part, error, times))

    def written(self, method: str = "", resource: str = "", ok: bool = True) -> list[Write]:
        return [
            w
            for w in self.writes
            if (not method or w.method == method)
            and (not resource or w.resource == resource)
            and (not ok or w.status < 300)
        ]

    # ---- KubeClient's interface --------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
        limited: bool = True,
    ) -> Any:
        del content_type, timeout_seconds, limited
        await asyncio.sleep(0)  # every call yields, as real I/O does
        resource, namespace, name, sub = _parse(path)
        if method != "GET":
            write = Write(
                method, resource + (f"/{sub}" if sub else ""), namespace, name, body, 200,
                asyncio.get_running_loop().time(),
            )  # fmt: skip
            self.writes.append(write)
        try:
            self._inject(method, path)
            answer = self._handle(method, resource, namespace, name, sub, body, query or {})
        except KubeError as error:
            if method != "GET":
                self.writes[-1].status = error.status or 500
            raise
        if method != "GET" and self.after_write is not None:
            self.after_write(self.writes[-1])
        return answer

    async def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        resource, namespace, _, _ = _parse(path)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        entry = (resource, queue)
        self._watchers.append(entry)
        wanted = _field_name(query)
        try:
            while True:
                event = await queue.get()
                meta = event["object"]["metadata"]
                if namespace and meta.get("namespace") != namespace:
                    continue
                if wanted and meta.get("name") != wanted:
                    continue
                yield copy.deepcopy(event)
        finally:
            self._watchers.remove(entry)

    async def close(self) -> None:
        pass

    # ---- the server's rules ------------------------------------------------------------------

    def _inject(self, method: str, path: str) -> None:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.path_part in path:
                fault.times -= 1
                raise fault.error()

    def _notify(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        for watched, queue in self._watchers:
            if watched == resource:
                queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    def _handle(
        self,
        method: str,
        resource: str,
        namespace: str,
        name: str,
        sub: str,
        body: Any,
        query: Mapping[str, str],
    ) -> Any:
        key = (resource, namespace, name)
        if method == "GET" and not name:
            wanted = _field_name(query)
            items = [
                copy.deepcopy(obj)
                for (res, ns, n), obj in sorted(self.objects.items())
                if res == resource
                and (not namespace or ns == namespace)
                and (not wanted or n == wanted)
            ]
            return {"items": items, "metadata": {"resourceVersion": str(next(self._versions))}}
        if method == "POST" and not name:
            if resource == "events":
                return body
            created = copy.deepcopy(body)
            meta = created["metadata"]
            if (resource, namespace, meta["name"]) in self.objects:
                raise Conflict("already exists", status=409)
            return copy.deepcopy(self.put_object(resource, created))
        current = self.objects.get(key)
        if current is None:
            raise NotFound(f"{resource} {name} not found", status=404)
        if method == "GET":
            return copy.deepcopy(current)
        if method == "POST" and sub == "eviction":
            if (namespace, name) in self.pdb_blocked or self._budget_allows_none(current):
                raise TooManyRequests("Cannot evict pod", status=429, body=PDB_REFUSAL)
            self._precondition_uid(current, (body.get("deleteOptions") or {}).get("preconditions"))
            self.remove(resource, namespace, name)
            return {}
        if method == "DELETE":
            self._precondition_uid(current, (body or {}).get("preconditions"))
            self.remove(resource, namespace, name)
            return {}
        wanted_version = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_version and wanted_version != current["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified", status=409)
        if method == "PATCH":
            patch = copy.deepcopy(body)
            patch.get("metadata", {}).pop("resourceVersion", None)
            updated = merge_patch(current, patch)
        elif method == "PUT":
            updated = copy.deepcopy(body)
            updated["metadata"]["uid"] = current["metadata"]["uid"]
        else:
            raise KubeError(f"{method} not served", status=405)
        return copy.deepcopy(self.put_object(resource, updated))

    def _budget_allows_none(self, pod: dict[str, Any]) -> bool:
        """A PodDisruptionBudget with maxUnavailable 0 selects the pod (matchLabels only)."""
        labels = pod["metadata"].get("labels") or {}
        for (res, ns, _), pdb in self.objects.items():
            if res != "poddisruptionbudgets" or ns != pod["metadata"].get("namespace"):
                continue
            spec = pdb.get("spec") or {}
            wanted = (spec.get("selector") or {}).get("matchLabels") or {}
            if spec.get("maxUnavailable") == 0 and all(
                labels.get(k) == v for k, v in wanted.items()
            ):
                return True
        return False

    @staticmethod
    def _precondition_uid(current: dict[str, Any], preconditions: Any) -> None:
        uid = (preconditions or {}).get("uid")
        if uid and uid != current["metadata"]["uid"]:
            raise Conflict("uid precondition failed", status=409)


def _field_name(query: Mapping[str, str]) -> str:
    selector = query.get("fieldSelector", "")
    return selector.split("=", 1)[1] if selector.startswith("metadata.name=") else ""


def _parse(path: str) -> tuple[str, str, str, str]:
    """(resource, namespace, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    parts = parts[2:] if parts[0] == "api" else parts[3:]  # api/v1 or apis/group/version
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 2:
        namespace, parts = parts[1], parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    sub = parts[2] if len(parts) > 2 else ""
    return resource, namespace, name, sub


class Killable:
    """One process's connection to the fake API. `kill()` is SIGKILL as the API server sees it:
    from then on nothing this process sends arrives (its cleanup, Lease release and queued
    Events included), while what it had sent before stays applied."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.dead = False

    def kill(self) -> None:
        self.dead = True

    async def request(self, method: str, path: str, **options: Any) -> Any:
        if self.dead:
            raise Unavailable(f"{method} {path}: the process is dead")
        return await self.api.request(method, path, **options)

    async def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        if self.dead:
            raise Unavailable(f"watch {path}: the process is dead")
        async for event in self.api.stream(path, query=query, timeout_seconds=timeout_seconds):
            if self.dead:
                return
            yield event

    async def close(self) -> None:
        pass


def _now() -> str:
    """The event loop's virtual time as a wall clock, as tests/loop/rig.py's CLOCK gives it."""
    from tests.loop.rig import CLOCK

    return iso(CLOCK.now())

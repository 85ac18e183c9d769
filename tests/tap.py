"""A tap on the emulator's API server, for tests: every request it answers, in order, and the
faults a real server can give.

`Tap.install(cluster)` wraps the emulator's request handler (before `cluster.start()` serves
it). Each request is recorded as it arrives (method, resource with its subresource, namespace,
name, JSON body, the status answered, the event loop's time, and who sent it, from the
User-Agent our processes send: `spot-rebalancer/<version> (controller; <identity>)`). A fault
answers the next N requests that match a method and a part of the path with a chosen status and
an upstream `Status` body (409 Conflict, 429 with a DisruptionBudget cause, 500, 503, ...)
instead of applying them; `cut` makes a process unreachable for the requests it selects (the
client sees a 503 from the path, as from a proxy in front of a server it cannot reach).
`after_write` is called once the server has answered a write (applied it, or refused it:
`Request.ok` tells), before the answer leaves: what a test does there happens between that
write and the next.

Not a model of anything: the emulator answers every request the tap lets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from rebalancer_sim import resources as R
from rebalancer_sim.apiserver import parse_path
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.status import ApiError

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PDB_CAUSE = {"reason": "DisruptionBudget", "message": "The disruption budget needs 1 healthy pod"}


@dataclass
class Request:
    method: str
    resource: str  # plural, with "/<subresource>" when one: "pods/eviction", "nodes/status"
    namespace: str
    name: str
    body: Any
    status: int  # what the server answered (0 until it has)
    at: float  # the event loop's time when it arrived (virtual under looptime)
    who: str  # the identity in the User-Agent's "(component; identity)", else its product
    path: str = ""
    query: dict[str, str] = field(default_factory=dict)
    content_type: str = ""

    @property
    def write(self) -> bool:
        return self.method in WRITES

    @property
    def ok(self) -> bool:
        return 0 < self.status < 300

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.who}: {self.method} {self.resource} {where} -> {self.status}"


@dataclass
class Fault:
    method: str
    path_part: str
    status: int
    reason: str
    message: str
    times: int
    details: dict[str, Any] | None = None
    retry_after_seconds: int | None = None
    who: str = ""  # only this sender's requests ("": anyone's)

    def matches(self, request: web.Request, who: str) -> bool:
        return (
            self.times > 0
            and (not self.method or request.method == self.method)
            and self.path_part in request.path
            and (not self.who or who == self.who)
        )


REASONS = {
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class Tap:
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    after_write: Callable[[Request], None] | None = None
    cut: Callable[[Request], bool] | None = None  # unreachable for these
    reads: bool = True  # record GETs too (watches once, when they open)

    def install(self, cluster: ClusterEmulator) -> Tap:
        handle = cluster.api._handle

        async def tapped(request: web.Request) -> web.StreamResponse:
            seen = await self._record(request)
            if self.cut is not None and self.cut(seen):
                seen.status = 503
                raise web.HTTPServiceUnavailable(reason="unreachable")
            for fault in self.faults:
                if fault.matches(request, seen.who):
                    fault.times -= 1
                    error = ApiError(
                        fault.status,
                        fault.reason,
                        fault.message,
                        details=fault.details,
                        retry_after_seconds=fault.retry_after_seconds,
                    )
                    seen.status = fault.status
                    return web.json_response(
                        error.body(),
                        status=fault.status,
                        headers={"Retry-After": str(fault.retry_after_seconds)}
                        if fault.retry_after_seconds
                        else None,
                    )
            try:
                response = await handle(request)
            except web.HTTPException as error:
                seen.status = error.status
                raise
            seen.status = response.status
            if seen.write and self.after_write is not None:
                self.after_write(seen)
            return response

        cluster.api._handle = tapped  # type: ignore[method-assign]
        return self

    async def _record(self, request: web.Request) -> Request:
        """The request as seen; kept in `requests` when it is a write, or reads are kept too
        (every path: one the emulator does not serve, a CRD's, is answered 404 and kept)."""
        route = parse_path(request.path.rstrip("/"))
        body = None
        if request.method in WRITES and request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                body = None
        resource, namespace, name = unserved(request.path)
        if route is not None:
            resource = route.resource.plural + (
                f"/{route.subresource}" if route.subresource else ""
            )
            namespace, name = route.namespace or "", route.name or ""
        seen = Request(
            method=request.method,
            resource=resource,
            namespace=namespace,
            name=name,
            body=body,
            status=0,
            at=asyncio.get_running_loop().time(),
            who=sender(request),
            path=request.path,
            query=dict(request.query),
            content_type=request.content_type if request.method in WRITES else "",
        )
        if seen.write or self.reads:
            self.requests.append(seen)
        return seen

    # ---- faults ------------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        path_part: str,
        status: int,
        *,
        times: int,
        reason: str = "",
        message: str = "injected by the test",
        causes: list[dict[str, str]] | None = None,
        retry_after_seconds: int | None = None,
        who: str = "",
    ) -> None:
        """Answer the next `times` requests of `method` ("": any) whose path contains
        `path_part` with `status` and a Status body, without applying them."""
        self.faults.append(
            Fault(
                method,
                path_part,
                status,
                reason or REASONS.get(status, "InternalError"),
                message,
                times,
                details={"causes": causes} if causes else None,
                retry_after_seconds=retry_after_seconds,
                who=who,
            )
        )

    def refuse_evictions(self, namespace: str, pod: str, *, times: int = 1 << 30) -> None:
        """What a PodDisruptionBudget that allows nothing answers to the pod's eviction."""
        self.fail(
            "POST",
            f"/namespaces/{namespace}/pods/{pod}/eviction",
            429,
            times=times,
            message="Cannot evict pod as it would violate the pod's disruption budget.",
            causes=[PDB_CAUSE],
        )

    # ---- what was sent -----------------------------------------------------------------------

    def written(
        self, method: str = "", resource: str = "", *, ok: bool = True, who: str = ""
    ) -> list[Request]:
        """The writes, in order of arrival: of `method` and `resource` when given, answered
        with success unless `ok` is False, sent by `who` when given."""
        return [
            r
            for r in self.requests
            if r.write
            and (not method or r.method == method)
            and (not resource or r.resource == resource)
            and (not ok or r.ok)
            and (not who or r.who == who)
        ]

    def refused(self, resource: str = "", *, who: str = "") -> list[Request]:
        return [r for r in self.written(resource=resource, ok=False, who=who) if r.status >= 300]


# /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]], the same under /apis/<g>/<v>.
_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/(?P<namespace>[^/]+))?"
    r"/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def unserved(path: str) -> tuple[str, str, str]:
    """(resource[/subresource], namespace, name) of a path by its shape alone ("" if none)."""
    match = _PATH.match(path.rstrip("/"))
    if match is None:
        return "", "", ""
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    return resource, match["namespace"] or "", match["name"] or ""


def sender(request: web.Request) -> str:
    """`ctl-a` from `spot-rebalancer/0.1 (controller; ctl-a)`; else the agent's first word."""
    agent = request.headers.get("User-Agent", "")
    if "(" in agent and "; " in agent:
        return agent.rsplit("; ", 1)[-1].rstrip(")")
    return agent.split("/", 1)[0]


@contextlib.asynccontextmanager
async def api_server(
    kubeconfig_dir: Path, *objects: tuple[Any, dict[str, Any]]
) -> AsyncIterator[tuple[ClusterEmulator, Tap]]:
    """The emulator's API server alone (no control loop runs: the test writes the objects as
    other components would), holding `objects` ((resource type, object) pairs), tapped, served
    on 127.0.0.1 with its kubeconfig in `kubeconfig_dir`: for tests of one client."""
    cluster = ClusterEmulator(controllers=set())
    for kind, obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace and cluster.store.get(R.NAMESPACES, "", namespace) is None:
            cluster.store.create(R.NAMESPACES, {"metadata": {"name": namespace}})
        cluster.store.create(kind, obj)
    tap = Tap().install(cluster)
    await cluster.start(kubeconfig_dir=kubeconfig_dir, run_loops=False)
    try:
        yield cluster, tap
    finally:
        await cluster.stop()


def node_condition(cluster: ClusterEmulator, node: str, type_: str) -> dict[str, Any] | None:
    """The Node's condition of that type, as the API server has it (None: none)."""
    obj = cluster.store.get(R.NODES, "", node) or {}
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition["type"] == type_:
            return dict(condition)
    return None

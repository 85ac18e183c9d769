"""An emulator of Azure IMDS Scheduled Events for many VMs, over real HTTP.

Each VM has its own path prefix: `/vms/<vm>/metadata/scheduledevents` (and
`/vms/<vm>/metadata/instance/compute`), so one server stands in for the IMDS of a whole fleet.
It behaves as the documented service does (shared reference A): 400 without `Metadata: true`,
with `X-Forwarded-For`, without or with an unknown api-version, or with a duplicate query
parameter; 405 for other methods; the incarnation grows on every change a VM can see;
Scheduled -> Started (at NotBefore or on acknowledgement) -> removed; a Preempt gets 30 s of notice
by default; events of a placement group are visible to all its VMs (unless the group is a GPU scale
set with one fault domain, which only sees its own); more than 5 requests per second from one VM
get 429. Fields are omitted for older api-versions as the release notes say.

A control API under `/control/` schedules, cancels and lists events and injects faults (slow
answers, error statuses with an optional Retry-After (`retryAfter`), garbage bodies);
`ImdsEmulator` offers the same as Python methods for in-process use (the cluster emulator,
tests). State is computed from the clock on each request, so a `ManualClock` drives it in
virtual time.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from rebalancer.azure.scheduled_events import format_not_before
from rebalancer.clock import Clock, SystemClock

API_VERSIONS = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
# Minimum notice per type (shared reference A.5); Terminate is settable 5-15 min, 5 by default.
DEFAULT_NOTICE_SECONDS = {
    "Freeze": 900.0,
    "Reboot": 900.0,
    "Redeploy": 600.0,
    "Preempt": 30.0,
    "Terminate": 300.0,
}
EVENT_TYPE_SINCE = {"Preempt": "2017-11-01", "Terminate": "2019-01-01"}
FIELD_SINCE = {
    "Description": "2019-04-01",
    "EventSource": "2019-08-01",
    "DurationInSeconds": "2020-07-01",
}
RATE_LIMIT_PER_SECOND = 5
MISSING_HEADER = {"error": "Bad request. Required metadata header not specified"}
BAD_VERSION = {
    "error": "Bad request. api-version is invalid or was not specified in the request. "
    "For more information refer to aka.ms/azureimds",
    "newest-versions": ["2020-07-01", "2019-08-01", "2019-04-01"],
}


@dataclass
class EmulatedEvent:
    event_id: str
    event_type: str
    resources: list[str]
    not_before: datetime
    started_seconds: float  # how long it stays Started before it is removed
    description: str = ""
    event_source: str = "Platform"
    duration_seconds: int = -1
    placement_group: str | None = None
    acknowledged_at: datetime | None = None
    acknowledged_by: list[str] = field(default_factory=list)
    cancelled_at: datetime | None = None
    created_at: datetime | None = None

    def started_at(self) -> datetime:
        if self.acknowledged_at is not None and self.acknowledged_at < self.not_before:
            return self.acknowledged_at
        return self.not_before

    def state(self, now: datetime) -> str:
        """scheduled | started | finished | cancelled."""
        if self.cancelled_at is not None and self.cancelled_at <= now:
            return "cancelled"
        start = self.started_at()
        if now < start:
            return "scheduled"
        if now < start + timedelta(seconds=self.started_seconds):
            return "started"
        return "finished"

    def render(self, now: datetime, api_version: str) -> dict[str, Any]:
        started = self.state(now) == "started"
        full: dict[str, Any] = {
            "EventId": self.event_id,
            "EventStatus": "Started" if started else "Scheduled",
            "EventType": self.event_type,
            "ResourceType": "VirtualMachine",
            "Resources": list(self.resources),
            "NotBefore": "" if started else format_not_before(self.not_before),
            "Description": self.description,
            "EventSource": self.event_source,
            "DurationInSeconds": self.duration_seconds,
        }
        return {
            key: value
            for key, value in full.items()
            if api_version >= FIELD_SINCE.get(key, API_VERSIONS[0])
        }

    def summary(self, now: datetime) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "resources": list(self.resources),
            "notBefore": self.not_before.isoformat(),
            "state": self.state(now),
            "acknowledgedBy": list(self.acknowledged_by),
            "placementGroup": self.placement_group,
        }


@dataclass
class Fault:
    kind: str  # "status" | "slow" | "garbage"
    status: int = 500
    delay_seconds: float = 0.0
    remaining: int | None = None  # requests left; None = until `until`
    until: datetime | None = None
    body: str = ""
    retry_after: str | None = None  # a Retry-After header on a status fault, as sent


@dataclass
class EmulatedVm:
    name: str
    placement_group: str | None = None
    broadcast: bool = True  # False: a GPU scale set with FD=1 sees only its own events
    first_call_delay_seconds: float = 0.0
    called: bool = False
    incarnation: int = 0
    last_content: str | None = None
    faults: list[Fault] = field(default_factory=list)
    recent_requests: deque[float] = field(default_factory=deque)
    requests: int = 0
    throttled: int = 0


class ImdsEmulator:
    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or SystemClock()
        self.vms: dict[str, EmulatedVm] = {}
        self.events: dict[str, EmulatedEvent] = {}
        # Requests per real second before a 429; None turns the limit off, for a test that runs
        # a client in virtual time and checks its rate on the virtual clock instead.
        self.rate_limit_per_second: int | None = RATE_LIMIT_PER_SECOND
        # The clock the limit counts seconds on: real time by default, even under a virtual
        # clock (how fast requests really arrive); a rig whose clients sleep on a virtual clock
        # too (the event loop's, tests/virtual) counts them on that one.
        self.rate_clock: Callable[[], float] = time.monotonic
        # How long an event of a type stays Started when its scheduler does not say (the cloud
        # sets its reboot time for Reboot and Redeploy); others stay 10 s.
        self.started_seconds_by_type: dict[str, float] = {}
        # Called with every event scheduled, through Python or the control API alike: the
        # emulated cloud carries each out from here, whoever scheduled it.
        self.on_schedule: list[Callable[[EmulatedEvent], object]] = []

    # ---- Python control API -------------------------------------------------------------------

    def add_vm(
        self,
        name: str,
        *,
        placement_group: str | None = None,
        broadcast: bool = True,
        first_call_delay_seconds: float = 0.0,
    ) -> EmulatedVm:
        vm = self.vms.get(name)
        if vm is None:
            vm = self.vms[name] = EmulatedVm(name=name)
        vm.placement_group = placement_group
        vm.broadcast = broadcast
        vm.first_call_delay_seconds = first_call_delay_seconds
        return vm

    def remove_vm(self, name: str) -> None:
        self.vms.pop(name, None)

    def schedule(
        self,
        event_type: str,
        resources: list[str],
        *,
        notice_seconds: float | None = None,
        event_id: str | None = None,
        description: str = "",
        event_source: str = "Platform",
        duration_seconds: int = -1,
        started_seconds: float | None = None,
        placement_group: str | None = None,
    ) -> EmulatedEvent:
        now = self.clock.now()
        if started_seconds is None:
            started_seconds = self.started_seconds_by_type.get(event_type, 10.0)
        notice = DEFAULT_NOTICE_SECONDS.get(event_type, 300.0)
        if notice_seconds is not None:
            notice = notice_seconds
        if placement_group is None and resources:
            first = self.vms.get(resources[0])
            placement_group = first.placement_group if first else None
        event = EmulatedEvent(
            event_id=event_id or str(uuid.uuid4()).upper(),
            event_type=event_type,
            resources=list(resources),
            not_before=now + timedelta(seconds=notice),
            started_seconds=started_seconds,
            description=description,
            event_source=event_source,
            duration_seconds=duration_seconds,
            placement_group=placement_group,
            created_at=now,
        )
        self.events[event.event_id] = event
        for listener in self.on_schedule:
            listener(event)
        return event

    def cancel(self, event_id: str) -> bool:
        """Remove a Scheduled event before it starts (Azure's rare cancellation)."""
        event = self.events.get(event_id)
        if event is None or event.state(self.clock.now()) != "scheduled":
            return False
        event.cancelled_at = self.clock.now()
        return True

    def add_fault(
        self,
        vm_name: str,
        kind: str,
        *,
        status: int = 500,
        delay_seconds: float = 0.0,
        count: int | None = None,
        seconds: float | None = None,
        body: str = "",
        retry_after: str | None = None,
    ) -> None:
        if kind not in ("status", "slow", "garbage"):
            raise ValueError(f"unknown fault kind {kind!r}")
        vm = self.vms.get(vm_name) or self.add_vm(vm_name)
        until = self.clock.now() + timedelta(seconds=seconds) if seconds is not None else None
        if count is None and until is None:
            count = 1
        vm.faults.append(
            Fault(
                kind=kind,
                status=status,
                delay_seconds=delay_seconds,
                remaining=count,
                until=until,
                body=body,
                retry_after=retry_after,
            )
        )

    def clear_faults(self, vm_name: str | None = None) -> None:
        for vm in self.vms.values():
            if vm_name is None or vm.name == vm_name:
                vm.faults.clear()

    def visible_events(self, vm_name: str, now: datetime) -> list[EmulatedEvent]:
        vm = self.vms.get(vm_name)
        visible = []
        for event in self.events.values():
            if event.state(now) not in ("scheduled", "started"):
                continue
            if vm_name in event.resources or (
                vm is not None
                and vm.broadcast
                and vm.placement_group is not None
                and event.placement_group == vm.placement_group
            ):
                visible.append(event)
        return sorted(visible, key=lambda e: (e.created_at or now, e.event_id))

    def document(self, vm_name: str, api_version: str = "2020-07-01") -> dict[str, Any]:
        """The document this VM would get now; bumps its incarnation if the content changed."""
        now = self.clock.now()
        vm = self.vms.get(vm_name) or self.add_vm(vm_name)
        events = [
            event.render(now, api_version)
            for event in self.visible_events(vm_name, now)
            if api_version >= EVENT_TYPE_SINCE.get(event.event_type, API_VERSIONS[0])
        ]
        content = json.dumps(events, sort_keys=True)
        if content != vm.last_content:
            vm.incarnation += 1
            vm.last_content = content
        return {"DocumentIncarnation": vm.incarnation, "Events": events}

    def acknowledge(self, vm_name: str, event_ids: list[str]) -> list[str]:
        """Approve events; returns the ids that are unknown to this VM (a 400 if any)."""
        now = self.clock.now()
        visible = {e.event_id.upper(): e for e in self.visible_events(vm_name, now)}
        unknown = [i for i in event_ids if i.upper() not in visible]
        if unknown:
            return unknown
        for event_id in event_ids:
            event = visible[event_id.upper()]
            if vm_name not in event.acknowledged_by:
                event.acknowledged_by.append(vm_name)
            if event.acknowledged_at is None and event.state(now) == "scheduled":
                event.acknowledged_at = now
        return []

    def prune(self, older_than_seconds: float = 3600.0) -> None:
        """Forget events that ended long ago (a long-running emulator stays small)."""
        now = self.clock.now()
        horizon = now - timedelta(seconds=older_than_seconds)
        for event_id, event in list(self.events.items()):
            if event.state(now) in ("finished", "cancelled") and event.not_before < horizon:
                del self.events[event_id]

    # ---- HTTP --------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/vms/{vm}/metadata/scheduledevents", self._scheduled_events)
        app.router.add_route("*", "/vms/{vm}/metadata/instance/compute", self._instance)
        app.router.add_post("/control/vms", self._control_add_vm)
        app.router.add_get("/control/vms", self._control_list_vms)
        app.router.add_post("/control/events", self._control_schedule)
        app.router.add_get("/control/events", self._control_list_events)
        app.router.add_delete("/control/events/{event_id}", self._control_cancel)
        app.router.add_post("/control/faults", self._control_fault)
        app.router.add_delete("/control/faults", self._control_clear_faults)
        return app

    async def _gate(self, request: web.Request, vm: EmulatedVm) -> web.Response | None:
        """Header, query and rate-limit rules shared by every IMDS path; None means go on."""
        vm.requests += 1
        now = self.rate_clock()
        vm.recent_requests.append(now)
        while vm.recent_requests and vm.recent_requests[0] <= now - 1.0:
            vm.recent_requests.popleft()
        limit = self.rate_limit_per_second
        if limit is not None and len(vm.recent_requests) > limit:
            vm.throttled += 1
            return web.json_response({"error": "Too many requests"}, status=429)
        if request.headers.get("Metadata", "").lower() != "true":
            return web.json_response(MISSING_HEADER, status=400)
        if "X-Forwarded-For" in request.headers:
            return web.json_response({"error": "Bad request. Proxy not supported"}, status=400)
        if any(len(request.query.getall(key)) > 1 for key in request.query):
            return web.json_response(
                {"error": "Bad request. Duplicate query parameter"}, status=400
            )
        return None

    async def _apply_faults(self, vm: EmulatedVm) -> web.Response | None:
        now = self.clock.now()
        for fault in list(vm.faults):
            expired = (fault.remaining is not None and fault.remaining <= 0) or (
                fault.until is not None and now >= fault.until
            )
            if expired:
                vm.faults.remove(fault)
                continue
            if fault.remaining is not None:
                fault.remaining -= 1
            if fault.kind == "slow":
                await asyncio.sleep(fault.delay_seconds)
            elif fault.kind == "status":
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
                return web.json_response(
                    {"error": f"injected {fault.status}"}, status=fault.status, headers=headers
                )
            elif fault.kind == "garbage":
                return web.Response(
                    text=fault.body or '{"DocumentIncarnation": "x", "Eve',
                    content_type="application/json",
                )
        return None

    async def _scheduled_events(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["vm"]
        vm = self.vms.get(name) or self.add_vm(name)
        rejected = await self._gate(request, vm)
        if rejected is not None:
            return rejected
        if request.method not in ("GET", "POST"):
            return web.json_response({"error": "Method not allowed"}, status=405)
        api_version = request.query.get("api-version", "")
        if api_version not in API_VERSIONS:
            return web.json_response(BAD_VERSION, status=400)
        if not vm.called:
            vm.called = True
            if vm.first_call_delay_seconds:
                await asyncio.sleep(vm.first_call_delay_seconds)
        faulted = await self._apply_faults(vm)
        if faulted is not None:
            return faulted
        if request.method == "POST":
            return await self._acknowledge(request, vm)
        return web.json_response(self.document(name, api_version))

    async def _acknowledge(self, request: web.Request, vm: EmulatedVm) -> web.Response:
        try:
            body = json.loads(await request.read())
            ids = [str(item["EventId"]) for item in body["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "Bad request. Invalid StartRequests"}, status=400)
        unknown = self.acknowledge(vm.name, ids)
        if unknown:
            return web.json_response(
                {"error": f"Bad request. Unknown EventId {unknown}"}, status=400
            )
        return web.Response(status=200)

    async def _instance(self, request: web.Request) -> web.Response:
        name = request.match_info["vm"]
        vm = self.vms.get(name) or self.add_vm(name)
        rejected = await self._gate(request, vm)
        if rejected is not None:
            return rejected
        if request.method != "GET":
            return web.json_response({"error": "Method not allowed"}, status=405)
        if not request.query.get("api-version"):
            return web.json_response(BAD_VERSION, status=400)
        return web.json_response(
            {"name": name, "placementGroupId": vm.placement_group or "", "priority": "Spot"}
        )

    async def _control_add_vm(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        vm = self.add_vm(
            str(body["name"]),
            placement_group=body.get("placementGroup"),
            broadcast=bool(body.get("broadcast", True)),
            first_call_delay_seconds=float(body.get("firstCallDelaySeconds", 0.0)),
        )
        return web.json_response({"name": vm.name}, status=201)

    async def _control_list_vms(self, _: web.Request) -> web.Response:
        return web.json_response(
            [
                {"name": vm.name, "requests": vm.requests, "throttled": vm.throttled}
                for vm in self.vms.values()
            ]
        )

    async def _control_schedule(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        try:
            event = self.schedule(
                str(body["type"]),
                [str(r) for r in body["resources"]],
                notice_seconds=body.get("noticeSeconds"),
                event_id=body.get("eventId"),
                description=str(body.get("description", "")),
                event_source=str(body.get("eventSource", "Platform")),
                duration_seconds=int(body.get("durationSeconds", -1)),
                started_seconds=(
                    None if body.get("startedSeconds") is None else float(body["startedSeconds"])
                ),
                placement_group=body.get("placementGroup"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=f"bad event: {exc}") from None
        return web.json_response(event.summary(self.clock.now()), status=201)

    async def _control_list_events(self, _: web.Request) -> web.Response:
        now = self.clock.now()
        return web.json_response([event.summary(now) for event in self.events.values()])

    async def _control_cancel(self, request: web.Request) -> web.Response:
        if self.cancel(request.match_info["event_id"]):
            return web.Response(status=204)
        raise web.HTTPConflict(text="no such scheduled event")

    async def _control_fault(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        try:
            self.add_fault(
                str(body["vm"]),
                str(body["kind"]),
                status=int(body.get("status", 500)),
                delay_seconds=float(body.get("delaySeconds", 0.0)),
                count=body.get("count"),
                seconds=body.get("seconds"),
                body=str(body.get("body", "")),
                retry_after=None if body.get("retryAfter") is None else str(body["retryAfter"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=f"bad fault: {exc}") from None
        return web.Response(status=201)

    async def _control_clear_faults(self, request: web.Request) -> web.Response:
        self.clear_faults(request.query.get("vm"))
        return web.Response(status=204)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError:
        raise web.HTTPBadRequest(text="body is not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body is not a JSON object")
    return body

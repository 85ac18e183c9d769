"""The Kubernetes HTTP API over the store, on aiohttp: what kubectl and kubernetes_asyncio use.

Routing is one catch-all handler that splits the path into (resource, namespace, name,
subresource) using the resource table, so core and group resources, cluster-scoped and
namespaced ones, share one code path. Verbs: get, list (with label/field selectors and
`limit`/`continue`), watch (`watch=true|True|1`, from a resourceVersion, with bookmarks and
`timeoutSeconds`, 410 as an ERROR event like the watch cache), create, update, patch (JSON,
merge, strategic, apply), delete (graceful for pods), deletecollection; subresources status,
scale and eviction. Errors are upstream `Status` bodies (see `status`). A pod's create passes
the mutating admission webhooks first (see `admission`); their warnings come back as `Warning`
headers.

Any bearer token is accepted: the emulator has no authentication or authorisation.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import yaml
from aiohttp import web

from rebalancer_sim import defaults, discovery, event_views, patch, protobuf, tables
from rebalancer_sim import resources as R
from rebalancer_sim.admission import API_USER, CREATE_OPTIONS, Admission, UserInfo
from rebalancer_sim.disruption import evict
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.selectors import (
    LabelPredicate,
    ObjectPredicate,
    parse_field_selector,
    parse_label_selector,
)
from rebalancer_sim.status import (
    ApiError,
    bad_request,
    method_not_allowed,
    not_found,
    path_not_found,
    success,
    unsupported_media_type,
)
from rebalancer_sim.store import Obj, Store, dumps

# What Go's strconv.ParseBool reads as true: upstream parses boolean query parameters with it.
WATCH_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
DEFAULT_WATCH_TIMEOUT_SECONDS = 1800.0
JSON = "application/json"


class Route:
    __slots__ = ("name", "namespace", "resource", "subresource")

    def __init__(
        self,
        resource: ResourceType,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.subresource = subresource


def parse_path(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in R.BY_PATH:
        namespace, rest = rest[1], rest[2:]
    if not rest or not 1 <= len(rest) <= 3:
        return None
    resource = R.BY_PATH.get((group, version, rest[0]))
    if resource is None:
        return None
    if resource.namespaced != (namespace is not None) and len(rest) > 1:
        return None  # a namespaced object needs its namespace in the path
    name = rest[1] if len(rest) >= 2 else None
    subresource = rest[2] if len(rest) == 3 else None
    if subresource is not None and subresource not in resource.subresources:
        return None
    return Route(resource, namespace, name, subresource)


class ApiServer:
    def __init__(
        self,
        store: Store,
        *,
        bookmark_interval_seconds: float = 60.0,
        on_request: Callable[[], None] | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.store = store
        self.admission = admission
        self.bookmark_interval_seconds = bookmark_interval_seconds
        self.server_address = "127.0.0.1:0"
        self.requests = 0
        self._on_request = on_request
        self._watch_tasks: set[asyncio.Task[Any]] = set()
        self.closing = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    # ---- dispatch --------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            return await self._dispatch(request)
        except ApiError as error:
            return _error_response(error)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if request.method == "GET":
            document = self._discovery(path)
            if document is not None:
                return _json(document)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        route = parse_path(path)
        if route is None:
            raise path_not_found()
        if self._on_request is not None:
            self._on_request()
        method = request.method
        content_type = request.headers.get("Content-Type", "")
        if "cbor" in content_type or ("protobuf" in content_type and method == "PATCH"):
            # Protobuf bodies of creates and updates are read (kubectl >= 1.32 sends them for
            # its generator commands; client-go does not retry in JSON after a 415); CBOR is not.
            raise unsupported_media_type(content_type)
        if route.resource is R.EVENTS_V1:
            return await self._events_v1(request, route)
        if route.subresource == "eviction":
            if method != "POST":
                raise method_not_allowed()
            assert route.name is not None
            body = await _read_json(request)
            result = evict(self.store, route.namespace or "", route.name, body)
            return _json(result, status=201)
        if route.subresource == "scale":
            return await self._scale(request, route)
        if route.name is None:
            if method == "GET":
                if request.query.get("watch", "") in WATCH_TRUE:
                    return await self._watch(request, route)
                return self._list(request, route)
            if method == "POST":
                return await self._create(request, route)
            if method == "DELETE":
                return await self._delete_collection(request, route)
            raise method_not_allowed()
        if method == "GET":
            if request.query.get("watch", "") in WATCH_TRUE:
                return await self._watch(request, route, single=route.name)
            return self._get(request, route)
        if method == "PUT":
            return await self._replace(request, route)
        if method == "PATCH":
            return await self._patch(request, route)
        if method == "DELETE":
            return await self._delete(request, route)
        raise method_not_allowed()

    def _discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return discovery.version()
        if path == "/api":
            return discovery.core_versions(self.server_address)
        if path == "/api/v1":
            return discovery.resource_list("", "v1")
        if path == "/apis":
            return discovery.group_list()
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "apis":
            return discovery.group(parts[2])
        if len(parts) == 4 and parts[1] == "apis":
            return discovery.resource_list(parts[2], parts[3])
        if path == "/openapi/v3":
            return discovery.openapi_v3_root()
        if path.startswith("/openapi/v3/"):
            return discovery.openapi_v3_document(path.removeprefix("/openapi/v3/"))
        return None

    # ---- reads -----------------------------------------------------------------------------

    def _get(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        raw = self.store.raw(route.resource, route.namespace or "", route.name)
        if raw is None:
            raise not_found(route.resource, route.name)
        if "as=Table" in request.headers.get("Accept", ""):  # `kubectl get <kind> <name>`
            obj = json.loads(raw)
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            return _json(
                tables.table(
                    route.resource, [obj], meta, self.store, include_object=_include(request)
                )
            )
        return _raw_json(raw)

    def _selectors(
        self, request: web.Request, resource: ResourceType
    ) -> tuple[LabelPredicate | None, ObjectPredicate | None, str | None]:
        label_text = request.query.get("labelSelector", "")
        field_text = request.query.get("fieldSelector", "")
        labels = parse_label_selector(label_text) if label_text else None
        fields, node_name = (
            parse_field_selector(field_text, resource.kind) if field_text else (None, None)
        )
        return labels, fields, node_name

    def _list(self, request: web.Request, route: Route) -> web.Response:
        labels, fields, node_name = self._selectors(request, route.resource)
        limit = _int_query(request, "limit", 0)
        start_after = _decode_continue(request.query.get("continue", ""))
        items, last, remaining = self.store.list_raw(
            route.resource,
            namespace=route.namespace,
            labels=labels,
            fields=fields,
            node_name=node_name,
            limit=limit,
            start_after=start_after,
        )
        meta: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if last is not None:
            meta["continue"] = _encode_continue(last)
            meta["remainingItemCount"] = remaining
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            table = tables.table(
                route.resource,
                [json.loads(i) for i in items],
                meta,
                self.store,
                include_object=_include(request),
            )
            return _json(table)
        body = (
            b'{"kind":"'
            + route.resource.list_kind.encode()
            + b'","apiVersion":"'
            + route.resource.api_version.encode()
            + b'","metadata":'
            + dumps(meta)
            + b',"items":['
            + b",".join(items)
            + b"]}"
        )
        return _raw_json(body)

    async def _watch(
        self,
        request: web.Request,
        route: Route,
        single: str | None = None,
        *,
        view: Callable[[str, bytes], bytes] | None = None,
    ) -> web.StreamResponse:
        labels, fields, _ = self._selectors(request, route.resource)
        if single is not None:
            fields = _only_named(single, fields)
        since_text = request.query.get("resourceVersion", "")
        since: int | None = None
        if since_text not in ("", "0"):
            try:
                since = int(since_text)
            except ValueError:
                raise bad_request(f"invalid resource version: {since_text!r}") from None
        timeout = float(_int_query(request, "timeoutSeconds", 0)) or DEFAULT_WATCH_TIMEOUT_SECONDS
        bookmarks = request.query.get("allowWatchBookmarks", "") in WATCH_TRUE
        # WatchList (client-go's streaming list): initial state as ADDED events, then a bookmark
        # annotated `k8s.io/initial-events-end`.
        initial_events = request.query.get("sendInitialEvents", "") in WATCH_TRUE
        if initial_events:
            if not bookmarks:
                raise invalid_watch_list()
            since = None
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            watcher = self.store.watch(
                route.resource,
                namespace=route.namespace,
                labels=labels,
                fields=fields,
                since=since,
                encode=self._table_events(route.resource, _include(request))
                if "as=Table" in request.headers.get("Accept", "")
                else view,
            )
        except ApiError as error:
            # Like the watch cache: a 200 stream carrying one ERROR event with the 410 Status.
            await response.write(dumps({"type": "ERROR", "object": error.body()}) + b"\n")
            return response
        if initial_events:
            watcher.pending.append(self._bookmark(route.resource, initial_events_end=True))
            watcher.wakeup.set()
        task = asyncio.current_task()
        if task is not None:
            self._watch_tasks.add(task)
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval_seconds
        try:
            while not self.closing.is_set():
                if watcher.pending:
                    chunk = b"".join(watcher.pending)
                    watcher.pending.clear()
                    await response.write(chunk)
                watcher.wakeup.clear()
                now = time.monotonic()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    await response.write(self._bookmark(route.resource))
                    next_bookmark = now + self.bookmark_interval_seconds
                wait = min(deadline, next_bookmark if bookmarks else deadline) - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watcher.wakeup.wait(), timeout=max(0.0, min(wait, 1.0)))
                if request.transport is None or request.transport.is_closing():
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unwatch(watcher)
            if task is not None:
                self._watch_tasks.discard(task)
        return response

    async def _events_v1(self, request: web.Request, route: Route) -> web.StreamResponse:
        """events.k8s.io/v1: the core/v1 Events, converted both ways (see event_views)."""
        core = Route(R.EVENTS, route.namespace, route.name, route.subresource)
        method = request.method
        table = "as=Table" in request.headers.get("Accept", "")
        if method == "GET" and request.query.get("watch", "") in WATCH_TRUE:
            return await self._watch(request, core, single=route.name, view=_events_v1_line)
        if method == "GET" or (method == "DELETE" and route.name is None):
            if method == "GET":
                response = self._get(request, core) if route.name else self._list(request, core)
            else:
                response = await self._delete_collection(request, core)
            assert isinstance(response.body, bytes)
            document = json.loads(response.body)
            if table:  # the same columns; the rows' objects (`includeObject=Object`) converted
                for row in document.get("rows", []):
                    if (row.get("object") or {}).get("kind") == "Event":
                        row["object"] = event_views.to_events_v1(row["object"])
                return _json(document)
            if "items" in document:
                document.update(kind="EventList", apiVersion=R.EVENTS_V1.api_version)
                document["items"] = [event_views.to_events_v1(i) for i in document["items"]]
                return _json(document)
            return _json(event_views.to_events_v1(document))
        if method == "DELETE":
            return await self._delete(request, core)
        namespace = route.namespace or ""
        if method == "PATCH" and route.name is not None:
            current = self.store.copy_of(R.EVENTS, namespace, route.name)
            if current is None:
                raise not_found(route.resource, route.name)
            content_type = request.headers.get("Content-Type", "")
            body = patch.apply(
                event_views.to_events_v1(current),
                content_type,
                _decode_patch(await request.read(), content_type),
            )
        elif method in ("POST", "PUT"):
            body = await _read_object(request, route.resource)
        else:
            raise method_not_allowed()
        meta = body.setdefault("metadata", {})
        if meta.get("namespace") not in (None, "", route.namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        if route.namespace is None:
            raise path_not_found()
        meta["namespace"] = route.namespace
        if route.name is not None:
            meta["name"] = route.name
        stored = event_views.to_core(body)
        if _dry_run(request):
            written = stored
        elif method == "POST":
            written = self.store.create(R.EVENTS, stored)
        else:
            written = self.store.replace(R.EVENTS, stored)
        return _json(event_views.to_events_v1(written), status=201 if method == "POST" else 200)

    def _table_events(
        self, resource: ResourceType, include_object: str
    ) -> Callable[[str, bytes], bytes]:
        """`kubectl get -w`: each event's object is a one-row Table; column definitions only
        in the first event, as upstream sends them."""
        first = True

        def encode(event_type: str, raw: bytes) -> bytes:
            nonlocal first
            obj = json.loads(raw)
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            rendered = tables.table(
                resource, [obj], meta, self.store, include_object=include_object
            )
            if not first:
                rendered["columnDefinitions"] = []
            first = False
            return dumps({"type": event_type, "object": rendered}) + b"\n"

        return encode

    def _bookmark(self, resource: ResourceType, *, initial_events_end: bool = False) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if initial_events_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        event = {
            "type": "BOOKMARK",
            "object": {
                "kind": resource.kind,
                "apiVersion": resource.api_version,
                "metadata": metadata,
            },
        }
        return dumps(event) + b"\n"

    # ---- writes ----------------------------------------------------------------------------

    async def _create(self, request: web.Request, route: Route) -> web.Response:
        body = await _read_object(request, route.resource)
        meta = body.setdefault("metadata", {})
        if route.resource.namespaced:
            if meta.get("namespace") and meta["namespace"] != route.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            if route.namespace is None:
                raise path_not_found()
            meta["namespace"] = route.namespace
        if route.resource is R.NODES:
            defaults.admit_node(body)
        body, warnings = await self._admit(request, route, body)
        if _dry_run(request):
            return _warned(_json(body, status=201), warnings)
        created = self.store.create(route.resource, body)
        return _warned(
            _raw_json(
                self.store.raw(route.resource, route.namespace or "", created["metadata"]["name"])
                or dumps(created),
                status=201,
            ),
            warnings,
        )

    async def _admit(self, request: web.Request, route: Route, body: Obj) -> tuple[Obj, list[str]]:
        """Mutating admission of a create: the object to store and the webhooks' warnings."""
        if self.admission is None or route.resource is not R.PODS:
            return body, []
        options = dict(CREATE_OPTIONS)
        if _dry_run(request):
            options["dryRun"] = ["All"]
        for name in ("fieldManager", "fieldValidation"):
            if request.query.get(name):
                options[name] = request.query[name]
        return await self.admission.admit(
            body,
            namespace=route.namespace or "",
            user=_user_of(request),
            dry_run=_dry_run(request),
            options=options,
        )

    async def _replace(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        body = await _read_object(request, route.resource)
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != route.name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({route.name})"
            )
        if route.resource.namespaced and meta.get("namespace") not in (None, route.namespace):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        meta["name"] = route.name
        if route.namespace is not None:
            meta["namespace"] = route.namespace
        if _dry_run(request):
            return _json(body)
        updated = self.store.replace(route.resource, body, subresource=route.subresource)
        return _raw_json(dumps(updated))

    async def _patch(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        content_type = request.headers.get("Content-Type", "")
        raw_body = await request.read()
        body = _decode_patch(raw_body, content_type)
        namespace = route.namespace or ""
        current = self.store.copy_of(route.resource, namespace, route.name)
        if current is None:
            if content_type.startswith(patch.APPLY_PATCH) and isinstance(body, dict):
                body.setdefault("metadata", {})["name"] = route.name
                if route.namespace is not None:
                    body["metadata"]["namespace"] = route.namespace
                body, warnings = await self._admit(request, route, body)
                created = self.store.create(route.resource, body)
                return _warned(_raw_json(dumps(created), status=201), warnings)
            raise not_found(route.resource, route.name)
        patched = patch.apply(current, content_type, body)
        meta = patched.setdefault("metadata", {})
        if meta.get("name") != route.name:
            raise bad_request("metadata.name: Invalid value: the name of the object cannot change")
        if route.namespace is not None:
            meta["namespace"] = route.namespace
        if _dry_run(request):
            return _json(patched)
        updated = self.store.replace(route.resource, patched, subresource=route.subresource)
        return _raw_json(dumps(updated))

    async def _delete(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        options = await _delete_options(request)
        grace = options.get("gracePeriodSeconds")
        namespace = route.namespace or ""
        if _dry_run(request) or options.get("dryRun"):
            return _raw_json(
                self.store.raw(route.resource, namespace, route.name)
                or _raise(not_found(route.resource, route.name))
            )
        last, removed = self.store.delete(
            route.resource,
            namespace,
            route.name,
            grace_seconds=None if grace is None else int(grace),
            preconditions=options.get("preconditions"),
        )
        if route.resource is R.PODS or not removed:
            return _raw_json(dumps(last))
        return _json(success(route.resource, route.name, last["metadata"]["uid"]))

    async def _delete_collection(self, request: web.Request, route: Route) -> web.Response:
        labels, fields, node_name = self._selectors(request, route.resource)
        options = await _delete_options(request)
        grace = options.get("gracePeriodSeconds")
        items, _, _ = self.store.list_raw(
            route.resource,
            namespace=route.namespace,
            labels=labels,
            fields=fields,
            node_name=node_name,
        )
        deleted = []
        for raw in items:
            obj = json.loads(raw)
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):
                last, _ = self.store.delete(
                    route.resource,
                    meta.get("namespace", ""),
                    meta["name"],
                    grace_seconds=None if grace is None else int(grace),
                )
                deleted.append(dumps(last))
        body = (
            b'{"kind":"'
            + route.resource.list_kind.encode()
            + b'","apiVersion":"'
            + route.resource.api_version.encode()
            + b'","metadata":'
            + dumps({"resourceVersion": str(self.store.resource_version)})
            + b',"items":['
            + b",".join(deleted)
            + b"]}"
        )
        return _raw_json(body)

    async def _scale(self, request: web.Request, route: Route) -> web.Response:
        assert route.name is not None
        namespace = route.namespace or ""
        owner = self.store.must_get(route.resource, namespace, route.name)
        if request.method == "GET":
            return _json(_scale_of(owner))
        if request.method not in ("PUT", "PATCH"):
            raise method_not_allowed()
        if request.method == "PUT":
            scale = await _read_json(request)
        else:
            scale = patch.apply(
                _scale_of(owner),
                request.headers.get("Content-Type", ""),
                _decode_patch(await request.read(), request.headers.get("Content-Type", "")),
            )
        if not isinstance(scale, dict):
            raise bad_request("Scale body must be an object")
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{route.name}" is invalid: spec.replicas: Invalid value: '
                f"{replicas}: must be greater than or equal to 0",
            )
        wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
        updated = json.loads(self.store.raw(route.resource, namespace, route.name) or b"{}")
        updated["spec"]["replicas"] = replicas
        if wanted_rv:
            updated["metadata"]["resourceVersion"] = wanted_rv
        result = self.store.replace(route.resource, updated)
        return _json(_scale_of(result))

    async def close(self) -> None:
        """End open watches (so the aiohttp runner can stop without waiting for them)."""
        self.closing.set()
        for task in list(self._watch_tasks):
            task.cancel()


def _events_v1_line(event_type: str, raw: bytes) -> bytes:
    """One watch event of events.k8s.io/v1, from a stored core/v1 Event."""
    return dumps({"type": event_type, "object": event_views.to_events_v1(json.loads(raw))}) + b"\n"


def _include(request: web.Request) -> str:
    """A Table row's object: `Metadata` (the default), `Object` or `None`, as upstream."""
    value = request.query.get("includeObject", "") or "Metadata"
    if value not in ("Metadata", "Object", "None"):
        raise bad_request(f"includeObject: unsupported value {value!r}")
    return value


def invalid_watch_list() -> ApiError:
    return ApiError(
        422,
        "Invalid",
        'ListOptions.meta.k8s.io "" is invalid: allowWatchBookmarks: Required value: '
        "allowWatchBookmarks required when sendInitialEvents is true",
    )


def _only_named(name: str, fields: ObjectPredicate | None) -> ObjectPredicate:
    def matches(obj: Obj) -> bool:
        return bool(obj["metadata"]["name"] == name and (fields is None or fields(obj)))

    return matches


def _scale_of(owner: Obj) -> Obj:
    meta = owner["metadata"]
    selector = owner["spec"].get("selector")
    selector_text = ",".join(
        f"{k}={v}" for k, v in ((selector or {}).get("matchLabels") or {}).items()
    )
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": owner["spec"].get("replicas", 0)},
        "status": {
            "replicas": owner.get("status", {}).get("replicas", 0),
            "selector": selector_text,
        },
    }


def _raise(error: ApiError) -> bytes:
    raise error


def _json(document: Any, *, status: int = 200) -> web.Response:
    return _raw_json(dumps(document), status=status)


def _raw_json(body: bytes, *, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _warned(response: web.Response, warnings: list[str]) -> web.Response:
    """Admission warnings as upstream returns them: `Warning: 299 - "<text>"` headers."""
    for text in warnings:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def _user_of(request: web.Request) -> UserInfo:
    """Who the request acts as: the impersonation headers (`kubectl --as`), else the admin."""
    name = request.headers.get("Impersonate-User")
    if not name:
        return API_USER
    user: UserInfo = {"username": name}
    if request.headers.get("Impersonate-Uid"):
        user["uid"] = request.headers["Impersonate-Uid"]
    user["groups"] = [*request.headers.getall("Impersonate-Group", []), "system:authenticated"]
    return user


def _error_response(error: ApiError) -> web.Response:
    headers = {}
    if error.retry_after_seconds:
        headers["Retry-After"] = str(error.retry_after_seconds)
    return web.Response(
        body=dumps(error.body()), status=error.code, content_type=JSON, headers=headers
    )


def _int_query(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"invalid {name} {text!r}: must be an integer") from None


def _dry_run(request: web.Request) -> bool:
    return request.query.get("dryRun", "") == "All"


def _encode_continue(last: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()


def _decode_continue(token: str) -> tuple[str, str] | None:
    if not token:
        return None
    try:
        namespace, name = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError):
        raise bad_request("continue key is not valid: illegal base64 data") from None
    return str(namespace), str(name)


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    if protobuf.MEDIA_TYPE in request.headers.get("Content-Type", ""):
        return _decode_protobuf(raw, request.headers["Content-Type"])
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"json: cannot unmarshal request body: {exc}") from None


async def _read_object(request: web.Request, resource: ResourceType) -> Obj:
    content_type = request.headers.get("Content-Type", JSON)
    raw = await request.read()
    if protobuf.MEDIA_TYPE in content_type:
        body = _decode_protobuf(raw, content_type)
    else:
        try:
            body = yaml.safe_load(raw) if "yaml" in content_type else json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("couldn't get version/kind; json parse error: not an object")
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if kind and kind != resource.kind:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version})"
            if api_version and api_version != resource.api_version
            else f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
        )
    if api_version and api_version != resource.api_version:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version})"
        )
    return body


def _decode_protobuf(raw: bytes, content_type: str) -> Obj:
    """A protobuf body as JSON; a kind without a schema is a 415, as a CRD's is upstream."""
    try:
        return protobuf.decode(raw)
    except protobuf.ProtobufError as error:
        if str(error).startswith("no protobuf schema"):
            raise ApiError(415, "UnsupportedMediaType", f"{error} (got {content_type!r})") from None
        raise bad_request(f"protobuf: {error}") from None


def _decode_patch(raw: bytes, content_type: str) -> Any:
    media = content_type.split(";", 1)[0].strip()
    if media not in (
        patch.JSON_PATCH,
        patch.MERGE_PATCH,
        patch.STRATEGIC_MERGE_PATCH,
        patch.APPLY_PATCH,
    ):
        raise unsupported_media_type(media)
    try:
        return yaml.safe_load(raw) if media == patch.APPLY_PATCH else json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding patch: {exc}") from None


async def _delete_options(request: web.Request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    raw = await request.read()
    if raw.strip():
        try:
            decoded = json.loads(raw)
        except ValueError:
            raise bad_request("error decoding DeleteOptions") from None
        if isinstance(decoded, dict):
            options.update(decoded)
    if "gracePeriodSeconds" in request.query:
        options["gracePeriodSeconds"] = _int_query(request, "gracePeriodSeconds", 0)
    if "propagationPolicy" in request.query:
        options["propagationPolicy"] = request.query["propagationPolicy"]
    return options

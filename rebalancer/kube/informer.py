"""List-then-watch caches of slim projections (the informer pattern, without generated models).

One `Informer` per resource: list (in chunks), then watch from the list's resourceVersion with
bookmarks and a server-side timeout; re-list on 410 Gone or a watch ERROR; reconnect with backoff
when the connection drops. `synced` is set after the first complete list: nothing may decide
before that. Every change calls `on_change`, so the controller can plan at once.

Each object is projected on its own: an object whose projection raises (a hostile annotation, a
value out of range) is skipped, reported once per object and resourceVersion through `on_skip`,
and never stops the cache; a modified object that cannot be read keeps its last readable view.

An `optional` resource (a CRD the cluster may not have, KEDA's ScaledObjects) that answers 404,
or 403 (a ClusterRole from before the resource was read), is empty and synced, and listed again
every `absent_seconds`: a CRD installed or a permission granted later is picked up without a
restart, and nothing waits for what it cannot read. A 404 is no error; a 403 is logged (once
until it is read again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from rebalancer.kube.client import Requester
from rebalancer.kube.errors import Forbidden, Gone, KubeError, NotFound
from rebalancer.process import sleep_or_stop
from rebalancer.retry import Backoff

T = TypeVar("T")
Key = tuple[str, str]


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


class Informer(Generic[T]):
    def __init__(
        self,
        client: Requester,
        path: str,
        project: Callable[[Mapping[str, Any]], T],
        *,
        name: str = "",
        on_change: Callable[[], None] | None = None,
        watch_timeout_seconds: int = 300,
        page_size: int = 500,
        backoff: Backoff | None = None,
        log: Any = None,
        query: Mapping[str, str] | None = None,
        on_skip: Callable[[str], None] | None = None,
        optional: bool = False,
        absent_seconds: float = 60.0,
    ) -> None:
        self.client = client
        self.path = path
        self.project = project
        self.name = name or path
        self.items: dict[Key, T] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.relists = 0
        self.lists = 0  # complete lists so far (a supervisor tells a recovery from a crash loop)
        self.errors = 0
        self._on_change = on_change or (lambda: None)
        self._watch_timeout = watch_timeout_seconds
        self._page_size = page_size
        self._backoff = backoff or Backoff(initial_seconds=0.2, max_seconds=10.0)
        self._log = log
        self._query = dict(query or {})
        self._on_skip = on_skip or (lambda name: None)
        self._skipped: set[tuple[Key, str]] = set()
        self._absence: tuple[type[KubeError], ...] = (NotFound, Forbidden) if optional else ()
        self._absent_seconds = absent_seconds
        self.absent = False  # an optional resource the API server does not serve (404)

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch(stop)
                attempt = 0
            except Gone:
                need_list = True  # our resourceVersion is too old: start again from a list
                self.relists += 1
            except self._absence as error:  # an optional resource's 404 or 403 (see above)
                need_list = True
                if not self.absent or self.items:
                    self.absent, self.items = True, {}
                    self._on_change()
                    if isinstance(error, Forbidden) and self._log is not None:
                        self._log.warning(
                            "not permitted to read; planned without it", informer=self.name,
                            reason=str(error)[:200],
                        )  # fmt: skip
                self.synced.set()
                await sleep_or_stop(stop, self._absent_seconds)
            except KubeError as error:
                attempt += 1
                self.errors += 1
                if self._log is not None:
                    self._log.warning(
                        "watch failed", informer=self.name, kind=error.kind, reason=str(error)
                    )
                await sleep_or_stop(
                    stop, self._backoff.delay(attempt, retry_after=error.retry_after)
                )

    async def _list(self) -> None:
        items: dict[Key, T] = {}
        token = ""
        while True:
            query = {**self._query, "limit": str(self._page_size)}
            if token:
                query["continue"] = token
            page = await self.client.request("GET", self.path, query=query)
            for obj in page.get("items") or []:
                projected = self._project(obj)
                if projected is not None:
                    items[object_key(obj)] = projected[0]
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                self.resource_version = str(meta.get("resourceVersion", ""))
                break
        self.items = items
        self.absent = False
        self.lists += 1
        self.synced.set()
        self._on_change()

    async def _watch(self, stop: asyncio.Event) -> None:
        query = {
            **self._query,
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._watch_timeout),
        }
        stream = self.client.stream(
            self.path, query=query, timeout_seconds=self._watch_timeout + 30
        )
        stopping = asyncio.ensure_future(stop.wait())
        next_event: asyncio.Future[Any] | None = None
        try:
            iterator = stream.__aiter__()
            while True:
                next_event = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait(
                    {next_event, stopping}, return_when=asyncio.FIRST_COMPLETED
                )
                if stopping in done:
                    next_event.cancel()
                    return
                try:
                    event = next_event.result()
                except StopAsyncIteration:
                    return  # the server ended the watch (timeoutSeconds): watch again
                self._apply(event)
        finally:
            stopping.cancel()
            if next_event is not None and not next_event.done():
                # Also when this task is cancelled: the read still runs inside the stream, which
                # cannot be closed under it, and would outlive the informer as a stray task.
                next_event.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, KubeError):
                    await next_event
            await stream.aclose()  # type: ignore[attr-defined]

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(f"watch {self.path}: {obj.get('message', 'expired')}", status=410)
            raise KubeError(f"watch {self.path}: {obj.get('message')}", status=code)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if kind == "BOOKMARK":
            return
        key = object_key(obj)
        if kind == "DELETED":
            self.items.pop(key, None)
        elif kind in ("ADDED", "MODIFIED"):
            projected = self._project(obj)
            if projected is None:
                return
            self.items[key] = projected[0]
        self._on_change()

    def _project(self, obj: Mapping[str, Any]) -> tuple[T] | None:
        """(the view of `obj`,) or None when it cannot be read (reported once per version)."""
        try:
            return (self.project(obj),)
        except Exception as error:  # any object, however hostile, must not stop the cache
            key = object_key(obj)
            version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if (key, version) not in self._skipped:
                if len(self._skipped) > 10_000:
                    self._skipped.clear()
                self._skipped.add((key, version))
                self._on_skip(self.name)
                if self._log is not None:
                    self._log.warning(
                        "object skipped: cannot be read",
                        informer=self.name,
                        object="/".join(part for part in key if part),
                        resource_version=version,
                        error=f"{type(error).__name__}: {str(error)[:200]}",
                    )
            return None

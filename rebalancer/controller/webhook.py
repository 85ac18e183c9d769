"""The mutating admission webhook on Pod creation, served over HTTPS by every replica.

Decisions read the last planning pass's view (the informer caches every replica keeps warm):
an answer costs a few dictionary lookups. The one exception is a pod whose workload the view
does not show yet (a brand-new workload's first pods arrive before the next pass): its owner is
looked up (`owner_lookup.py`: the live cache, else one list of its name shared by the burst) for
at most `LOOKUP_TIMEOUT_SECONDS`, and the pod is admitted unplaced, as before, if it is not
learnt by then. Pods placed here are counted from the webhook's own record until the caches
show them (at most `RECENT_SECONDS`), so that a burst of creations from one ReplicaSet spreads
instead of piling onto the group that looked emptiest.
Server-side dry runs are answered alike and recorded nowhere.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from rebalancer.controller.admission import MAX_UID_LENGTH, Admitted, View, review
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.owner_lookup import OwnerLookup
from rebalancer.controller.webhook_server import Limits, serve_guarded
from rebalancer.metrics import ControllerMetrics

PATH = "/mutate-pods"
RECENT_SECONDS = 30.0
# How long a review may wait for the owner the view lacks: half the shortest timeout the chart
# lets the API server give the webhook (`controller.webhook.timeoutSeconds`, 1 to 30 s, 2 by
# default), so the answer is in time with room for the rest (the body, TLS, the network).
LOOKUP_TIMEOUT_SECONDS = 0.5
# Placements remembered at once: a burst of a few thousand pods fits; a flood of reviews keeps
# the newest (issue 18: every cache of what others send is bounded).
MAX_RECENT = 10_000


class Refused(Exception):
    """A request answered with an HTTP error: the API server then applies the failure policy
    (Ignore: the pod is created unchanged)."""

    def __init__(self, reason: str, status: int, message: str) -> None:
        super().__init__(message)
        self.reason, self.status, self.message = reason, status, message


def nested_deeper_than(value: object, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` arrays and objects (walked without
    recursion, stopping at the first too deep)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


class PlacementWebhook:
    def __init__(
        self,
        view: Callable[[], View | None],
        *,
        metrics: ControllerMetrics,
        now: Callable[[], datetime],
        log: object,
        limits: Limits | None = None,
        lookup: OwnerLookup | None = None,
        lookup_timeout_seconds: float = LOOKUP_TIMEOUT_SECONDS,
    ) -> None:
        self._view = view
        self.lookup = lookup  # None: a pod whose workload the view lacks goes unplaced
        self.lookup_timeout_seconds = lookup_timeout_seconds
        self.metrics = metrics
        self._now = now
        self._log = log
        self.limits = limits or Limits()
        self.admitted: deque[Admitted] = deque(maxlen=MAX_RECENT)  # oldest first

    def forget_shown(self, view: View) -> None:
        """Forget the placements whose pods a pass's view shows: views count them from then on,
        and a pod that goes soon after (a scale-down, an eviction) must not count again from
        this record (on the real control plane, a target's swap then sent a replacement to
        on-demand, as if a deleted spot replica were there, and evicted it again)."""
        if not self.admitted:
            return
        pods = view.snapshot.pods_by_workload
        shown = {
            p.placed_review
            for workload in {a.workload for a in self.admitted}
            for p in pods.get(workload, [])
        } - {""}
        if any(a.review in shown for a in self.admitted):
            self.admitted = deque(
                (a for a in self.admitted if a.review not in shown), maxlen=MAX_RECENT
            )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body_bytes)
        app.router.add_post(PATH, self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            body = await self.read(request)
        except Refused as refused:
            self.metrics.webhook_reviews.labels("bad_request").inc()
            self.metrics.webhook_requests_refused.labels(refused.reason).inc()
            return web.json_response({"error": refused.message}, status=refused.status)
        try:
            answer = self.answer(body, unseen=await self.unseen_owner(body))
        except Exception:  # a bug must never cost a pod: allow it unchanged, count, log
            self.metrics.webhook_reviews.labels("error").inc()
            self._log.exception("admission review failed; pod allowed unchanged")  # type: ignore[attr-defined]
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": _uid_of(body), "allowed": True},
            }
        self.metrics.webhook_seconds.observe(time.perf_counter() - started)
        if not answer:
            self.metrics.webhook_requests_refused.labels("not_review").inc()
            return web.json_response({"error": "not an AdmissionReview"}, status=400)
        return web.json_response(answer)

    async def read(self, request: web.Request) -> Any:
        """The request's JSON, or Refused: too large, too slow, too deep, not JSON."""
        limits = self.limits
        too_large = Refused("too_large", 413, f"body over {limits.max_body_bytes} bytes")
        if (request.content_length or 0) > limits.max_body_bytes:
            raise too_large  # said before a byte of it is read
        try:
            async with asyncio.timeout(limits.body_timeout_seconds):
                raw = await request.read()
        except TimeoutError:
            raise Refused(
                "body_timeout", 408, f"body not received within {limits.body_timeout_seconds} s"
            ) from None
        except web.HTTPRequestEntityTooLarge:  # chunked, or a Content-Length that lied
            raise too_large from None
        too_deep = Refused("too_deep", 400, f"JSON nested deeper than {limits.max_json_depth}")
        try:
            body = json.loads(raw)
        except RecursionError:  # nested deeper than the interpreter's own limit (about 1000)
            raise too_deep from None
        except ValueError:  # not JSON, not UTF-8, or an integer of over 4300 digits
            raise Refused("not_json", 400, "not JSON") from None
        if nested_deeper_than(body, limits.max_json_depth):
            raise too_deep
        return body

    async def unseen_owner(self, body: object) -> WorkloadInfo | None:
        """The workload of a pod being created that the view does not show, as the API has it
        now; None when the view shows it, or it is not learnt within the lookup's bound."""
        request = body.get("request") if isinstance(body, dict) else None
        if self.lookup is None or not isinstance(request, dict):
            return None
        pod, namespace = request.get("object"), str(request.get("namespace") or "")
        kind = (request.get("kind") or {}).get("kind")
        if kind != "Pod" or request.get("operation") != "CREATE" or not isinstance(pod, dict):
            return None
        view = self._view()
        if view is None or view.workload_of(pod, namespace) is not None:
            return None
        try:
            async with asyncio.timeout(self.lookup_timeout_seconds):
                return await self.lookup.workload_of(pod, namespace)
        except TimeoutError:
            self.metrics.webhook_owner_lookups.labels("timeout").inc()
            return None

    def answer(self, body: object, *, unseen: WorkloadInfo | None = None) -> dict[str, object]:
        now = self._now()
        horizon = now - timedelta(seconds=RECENT_SECONDS)
        while self.admitted and self.admitted[0].at < horizon:
            self.admitted.popleft()
        result = review(body, self._view(), self.admitted, unseen=unseen)
        self.metrics.webhook_reviews.labels(result.outcome).inc()
        decision, workload = result.decision, result.workload
        if decision is not None and workload is not None and not result.dry_run:
            uid = str(result.response["response"]["uid"])
            self.admitted.append(
                Admitted(now, workload.key, decision.pool, decision.zone, decision.spot, uid)
            )
            capacity = "spot" if decision.spot else "on_demand"
            self.metrics.placements.labels(workload.namespace, workload.name, capacity).inc()
            self._log.info(  # type: ignore[attr-defined]
                "pod placed",
                workload="/".join(workload.key),
                pool=decision.pool,
                zone=decision.zone,
                why=decision.reason,
            )
        elif result.outcome == "no_fit" and workload is not None:
            self._log.warning(  # type: ignore[attr-defined]
                "placement policy cannot be met: no pool it allows fits the pod; "
                "pod allowed unchanged",
                workload="/".join(workload.key),
            )
        return result.response


async def serve(
    webhook: PlacementWebhook, host: str, port: int, context: ssl.SSLContext
) -> web.AppRunner:
    """Serve the webhook over HTTPS under its limits (`webhook_server`)."""
    return await serve_guarded(
        webhook.app(), host, port, context=context, limits=webhook.limits, metrics=webhook.metrics
    )


def _uid_of(body: Any) -> str:
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and len(uid) <= MAX_UID_LENGTH else ""

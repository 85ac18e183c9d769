"""The mutating admission webhook on Pod creation, served over HTTPS by every replica.

Decisions read the last planning pass's view (the informer caches every replica keeps warm),
never the API: an answer costs a few dictionary lookups. Pods placed here are counted from the
webhook's own record until the caches show them (at most `RECENT_SECONDS`), so that a burst of
creations from one ReplicaSet spreads instead of piling onto the group that looked emptiest.
Server-side dry runs are answered alike and recorded nowhere.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from aiohttp import web

from rebalancer.controller.admission import Admitted, View, recent, review
from rebalancer.metrics import ControllerMetrics

PATH = "/mutate-pods"
RECENT_SECONDS = 30.0
MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit is about this


class PlacementWebhook:
    def __init__(
        self,
        view: Callable[[], View | None],
        *,
        metrics: ControllerMetrics,
        now: Callable[[], datetime],
        log: object,
    ) -> None:
        self._view = view
        self._metrics = metrics
        self._now = now
        self._log = log
        self.admitted: list[Admitted] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(PATH, self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            body = json.loads(await request.read())
        except ValueError:
            self._metrics.webhook_reviews.labels("bad_request").inc()
            return web.json_response({"error": "not JSON"}, status=400)
        try:
            answer = self.answer(body)
        except Exception:  # a bug must never cost a pod: allow it unchanged, count, log
            self._metrics.webhook_reviews.labels("error").inc()
            self._log.exception("admission review failed; pod allowed unchanged")  # type: ignore[attr-defined]
            uid = ((body or {}).get("request") or {}).get("uid", "")
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True},
            }
        self._metrics.webhook_seconds.observe(time.perf_counter() - started)
        if not answer:
            return web.json_response({"error": "not an AdmissionReview"}, status=400)
        return web.json_response(answer)

    def answer(self, body: object) -> dict[str, object]:
        now = self._now()
        horizon = now - timedelta(seconds=RECENT_SECONDS)
        self.admitted = recent(self.admitted, horizon=horizon)
        result = review(body, self._view(), self.admitted)
        self._metrics.webhook_reviews.labels(result.outcome).inc()
        decision, workload = result.decision, result.workload
        if decision is not None and workload is not None and not result.dry_run:
            uid = str(result.response["response"]["uid"])
            self.admitted.append(
                Admitted(now, workload.key, decision.pool, decision.zone, decision.spot, uid)
            )
            capacity = "spot" if decision.spot else "on_demand"
            self._metrics.placements.labels(workload.namespace, workload.name, capacity).inc()
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
    runner = web.AppRunner(webhook.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    return runner

"""The one HTTP server of each process: /metrics, /healthz (alive) and /readyz (can do its job)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str = ""


HealthCheck = Callable[[], Health]


def build_app(
    *, registry: CollectorRegistry, liveness: HealthCheck, readiness: HealthCheck
) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def probe(check: HealthCheck) -> Callable[[web.Request], object]:
        async def handler(_: web.Request) -> web.Response:
            health = check()
            text = "ok" if health.ok else f"not ok: {health.reason}"
            return web.Response(text=text + "\n", status=200 if health.ok else 503)

        return handler

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(liveness))  # type: ignore[arg-type]
    app.router.add_get("/readyz", probe(readiness))  # type: ignore[arg-type]
    return app


async def start_server(app: web.Application, *, host: str, port: int) -> web.AppRunner:
    """Start serving; the caller cleans up with `await runner.cleanup()`."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful when 0 was asked for)."""
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("server has no TCP address")


@asynccontextmanager
async def serving(
    *,
    registry: CollectorRegistry,
    liveness: HealthCheck,
    readiness: HealthCheck,
    host: str,
    port: int,
    log: Any,
) -> AsyncIterator[int]:
    """Serve a process's probes and metrics for the duration of the block; yields the port."""
    app = build_app(registry=registry, liveness=liveness, readiness=readiness)
    runner = await start_server(app, host=host, port=port)
    port = bound_port(runner)
    log.info("serving probes and metrics", port=port)
    try:
        yield port
    finally:
        log.info("shutting down")
        await runner.cleanup()

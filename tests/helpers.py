"""Small helpers for tests: servers on ephemeral ports, bounded waiting."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from tests.ports import free_port  # noqa: F401  (re-exported: tests import it from here)

# The kubectl scripts/install-tools installs (v1.32, exported as KUBECTL by scripts/test); a
# pytest run without it falls back to the one on PATH.
_INSTALLED_KUBECTL = Path(__file__).resolve().parent.parent / ".cache" / "tools" / "bin" / "kubectl"
KUBECTL = os.environ.get("KUBECTL") or (
    str(_INSTALLED_KUBECTL) if _INSTALLED_KUBECTL.exists() else shutil.which("kubectl") or "kubectl"
)


@asynccontextmanager
async def serve(
    app: web.Application, *, ssl_context: ssl.SSLContext | None = None, port: int = 0
) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 on `port` (0: a free one), over TLS with `ssl_context`; yields
    the base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def wait_for(predicate: Callable[[], bool], *, timeout: float = 10.0, what: str = "") -> None:
    """Poll until `predicate()` holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        await asyncio.sleep(0.02)

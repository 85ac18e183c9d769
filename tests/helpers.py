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


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a process that binds it later.

    Taken below the kernel's ephemeral range: a port from bind(0) is in that range, where any
    client connection of any process (pytest-xdist runs several) may take it as its source port
    before our server binds it."""
    import random
    import socket

    low, _ = _ephemeral_range()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below {low}")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default

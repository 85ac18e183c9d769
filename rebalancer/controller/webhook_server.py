"""The webhook's listening socket: TLS and HTTP under limits that a slow or hostile client cannot
stretch. What a request's body may be (size, time, depth) is the handler's (`webhook.py`).

aiohttp's own TCPSite hands every accepted socket to asyncio's TLS and keeps it for as long as
the client likes: 1500 stalled connections took 440 MiB more (asyncio
gives each TLS connection a 256 KiB read buffer) and 1500 files, past a minute. Here:

- at most `max_connections` at once, counted from the TCP accept, TLS handshakes included. At
  the cap a new connection takes the place of the oldest one never answered (still in its
  handshake, or yet to send a whole request), which is reset; only when every connection has
  been answered at least once (the API server's kept-alive ones) is the new one reset instead.
  So a flood of stalled connections cannot keep the API server out, only one that sends valid
  reviews as fast as they are answered can;
- the TLS handshake must end within `handshake_timeout_seconds` (asyncio's
  `ssl_handshake_timeout`, through `loop.start_tls`), and closing waits as long for the client's
  close_notify;
- then aiohttp's own limits: request line and header lines of at most 8 KiB, 32 headers, and the
  headers within `request_timeout_seconds`: aiohttp's keep-alive timer runs from the connection's
  start and from each answer, and closes a connection that has not sent a whole request head by
  then (so it is also how long an idle keep-alive connection stays);
- a client that stops reading its answers (our writes stay paused) is cut off after the same
  `request_timeout_seconds`: aiohttp has no write timeout.

TLS starts on our own accepted socket (not `create_server(ssl=...)`) because only then is a
connection seen, counted and released whatever becomes of its handshake: asyncio tells the
application nothing about a handshake that fails.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from rebalancer.controller.settings import ControllerSettings
from rebalancer.metrics import ControllerMetrics

MAX_LINE_BYTES = 8190  # aiohttp's default for the request line and each header line
MAX_HEADERS = 32  # the API server sends about ten


@dataclass(frozen=True)
class Limits:
    handshake_timeout_seconds: float = 5.0
    request_timeout_seconds: float = 5.0
    body_timeout_seconds: float = 5.0
    max_connections: int = 256
    max_body_bytes: int = 3 * 1024 * 1024
    max_json_depth: int = 64

    @classmethod
    def of(cls, settings: ControllerSettings) -> Limits:
        return cls(
            handshake_timeout_seconds=settings.webhook_handshake_timeout_seconds,
            request_timeout_seconds=settings.webhook_request_timeout_seconds,
            body_timeout_seconds=settings.webhook_body_timeout_seconds,
            max_connections=settings.webhook_max_connections,
            max_body_bytes=settings.webhook_max_body_bytes,
            max_json_depth=settings.webhook_max_json_depth,
        )

    def handler_args(self) -> dict[str, Any]:
        """aiohttp's per-connection settings (`AppRunner(**handler_args)`)."""
        return {
            "keepalive_timeout": self.request_timeout_seconds,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            "max_headers": MAX_HEADERS,
            # A body left unread (an early answer) is drained at most this long, then closed.
            "lingering_time": self.body_timeout_seconds,
        }


class Connections:
    """The connections open on the webhook's port, from accept to close, oldest first, and
    whether each has been answered (a response under 400 prepared on it)."""

    def __init__(self, limits: Limits, metrics: ControllerMetrics) -> None:
        self._limits = limits
        self._metrics = metrics
        self._answered: dict[asyncio.Transport, bool] = {}  # TCP transport -> answered
        self._tcp_of: dict[asyncio.BaseTransport, asyncio.Transport] = {}  # TLS -> TCP
        self._tls_of: dict[asyncio.Transport, asyncio.BaseTransport] = {}

    def __len__(self) -> int:
        return len(self._answered)

    def __contains__(self, tcp: object) -> bool:
        return tcp in self._answered

    def admit(self, tcp: asyncio.Transport) -> bool:
        """Make room for a new connection; False: there is none (it was reset)."""
        if len(self._answered) >= self._limits.max_connections:
            oldest = next((t for t, answered in self._answered.items() if not answered), None)
            if oldest is None:
                self._metrics.webhook_connections_closed.labels("over_cap").inc()
                tcp.abort()  # a reset: no TLS, no buffers, the file is free at once
                return False
            self._metrics.webhook_connections_closed.labels("displaced").inc()
            self.release(oldest)
            oldest.abort()
        self._answered[tcp] = False
        self._metrics.webhook_connections.set(len(self._answered))
        return True

    def secured(self, tcp: asyncio.Transport, tls: asyncio.BaseTransport) -> None:
        self._tcp_of[tls], self._tls_of[tcp] = tcp, tls

    def release(self, tcp: asyncio.Transport) -> None:
        if self._answered.pop(tcp, None) is not None:
            self._metrics.webhook_connections.set(len(self._answered))
        tls = self._tls_of.pop(tcp, None)
        if tls is not None:
            del self._tcp_of[tls]

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """aiohttp's signal: a connection that got a good answer is no longer displaced."""
        tcp = self._tcp_of.get(request.transport) if request.transport is not None else None
        if tcp in self._answered and response.status < 400:
            self._answered[tcp] = True


class GuardedSite(web.BaseSite):
    """An HTTPS site of an aiohttp runner with a connection cap and a handshake timeout."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        limits: Limits,
        connections: Connections,
        metrics: ControllerMetrics,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port = host, port
        self._tls = ssl_context
        self._limits = limits
        self._metrics = metrics
        self.connections = connections
        self._handshakes: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Accepted(self), self._host, self._port, backlog=self._backlog
        )

    async def stop(self) -> None:
        """Stop listening and drop the connections still in their handshake; the ones aiohttp
        serves, it shuts down itself (the runner's cleanup)."""
        await super().stop()
        for task in list(self._handshakes):
            task.cancel()
        await asyncio.gather(*self._handshakes, return_exceptions=True)

    def _admit(self, transport: asyncio.Transport) -> bool:
        if not self.connections.admit(transport):
            return False
        # Nothing may be read before TLS takes the socket (the ClientHello would be lost).
        transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._secure(transport))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)
        return True

    def _release(self, transport: asyncio.Transport) -> None:
        self.connections.release(transport)

    def _cut_off(self, transport: asyncio.Transport) -> None:
        """A client that has not read its answers for a request timeout."""
        if transport in self.connections:
            self._metrics.webhook_connections_closed.labels("write_timeout").inc()
        self._release(transport)
        transport.abort()

    async def _secure(self, raw: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        secured = _Secured(
            lambda: self._release(raw),
            stuck=lambda: self._cut_off(raw),
            write_timeout=self._limits.request_timeout_seconds,
        )
        timeout = self._limits.handshake_timeout_seconds
        try:
            transport = await loop.start_tls(
                raw, secured, self._tls, server_side=True,
                ssl_handshake_timeout=timeout, ssl_shutdown_timeout=timeout,
            )  # fmt: skip
        except asyncio.CancelledError:
            raw.abort()
            self._release(raw)
            raise
        except (OSError, ValueError, RuntimeError) as error:  # not TLS, refused by it, or gone
            if raw in self.connections:  # not displaced (that was counted already)
                # ConnectionAbortedError is what asyncio's handshake timeout raises.
                timed_out = isinstance(error, ConnectionAbortedError)
                reason = "handshake_timeout" if timed_out else "handshake_failed"
                self._metrics.webhook_connections_closed.labels(reason).inc()
            self._release(raw)
            return
        server = self._runner.server
        if secured.lost or transport is None or server is None or raw not in self.connections:
            raw.abort()
            self._release(raw)
            return
        self.connections.secured(raw, transport)
        secured.attach(server(), transport)


class _Accepted(asyncio.Protocol):
    """A TCP connection just accepted: admitted under the cap, or reset. TLS takes the socket
    over from here (`start_tls` sets its own protocol), so the methods below only see a
    connection that went before that."""

    def __init__(self, site: GuardedSite) -> None:
        self._site = site
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._site._admit(transport):
            self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._site._release(self._transport)


class _Secured(asyncio.Protocol):
    """Between asyncio's TLS and aiohttp's request handler: forwards what TLS delivers, holds
    what arrives before the handler is attached, releases the connection's place when it
    closes, and cuts off a client that stops reading its answers: aiohttp has no write timeout,
    and a connection whose answers pile up (pipelined requests, never read) would hold its place
    for good. `stuck` runs when writing stayed paused for `write_timeout` seconds."""

    def __init__(
        self, release: Callable[[], None], *, stuck: Callable[[], None], write_timeout: float
    ) -> None:
        self._release = release
        self._stuck = stuck
        self._write_timeout = write_timeout
        self._stuck_timer: asyncio.TimerHandle | None = None
        self._handler: asyncio.Protocol | None = None
        self._early: list[bytes] = []
        self._eof = False
        self.lost = False

    def attach(self, handler: asyncio.Protocol, transport: asyncio.Transport) -> None:
        self._handler = handler
        handler.connection_made(transport)
        for data in self._early:
            handler.data_received(data)
        self._early.clear()
        if self._eof:
            handler.eof_received()

    def data_received(self, data: bytes) -> None:
        if self._handler is None:
            self._early.append(data)  # one read at most: attach follows within a loop turn
        else:
            self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        if self._handler is None:
            self._eof = True
            return None
        return self._handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._stuck_timer is not None:
            self._stuck_timer.cancel()
        self._release()
        if self._handler is not None:
            self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        loop = asyncio.get_running_loop()
        self._stuck_timer = loop.call_later(self._write_timeout, self._stuck)
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._stuck_timer is not None:
            self._stuck_timer.cancel()
            self._stuck_timer = None
        if self._handler is not None:
            self._handler.resume_writing()


async def serve_guarded(
    app: web.Application,
    host: str,
    port: int,
    *,
    context: ssl.SSLContext,
    limits: Limits,
    metrics: ControllerMetrics,
) -> web.AppRunner:
    """Serve `app` over HTTPS under `limits`; the caller cleans up with `runner.cleanup()`."""
    connections = Connections(limits, metrics)
    app.on_response_prepare.append(connections.on_response_prepare)
    runner = web.AppRunner(app, access_log=None, **limits.handler_args())
    await runner.setup()
    site = GuardedSite(
        runner, host, port, ssl_context=context, limits=limits, connections=connections,
        metrics=metrics,
    )  # fmt: skip
    await site.start()
    return runner

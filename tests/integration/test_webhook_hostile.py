"""The admission webhook against slow and hostile clients, over real HTTPS on 127.0.0.1.

Short limits come in through `Limits` (the settings `webhook_*`); each close is awaited (the
client reads until the server ends the connection), never slept for.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import structlog

from rebalancer import names
from rebalancer.controller.webhook import PATH, PlacementWebhook, serve
from rebalancer.controller.webhook_server import Limits
from rebalancer.controller.webhook_tls import issue, server_context, service_names
from rebalancer.metrics import ControllerMetrics
from tests.unit.test_placement import cluster, request, view_of

HOST = service_names("rebalancer-webhook", "spot-rebalancer")[2]
MATERIAL = issue(service_names("rebalancer-webhook", "spot-rebalancer"), dt.datetime.now(dt.UTC))
TRUST = ssl.create_default_context(cadata=MATERIAL.ca.decode())
LONG = 60.0  # a limit that is not under test
# An upper bound on waiting for a close: a hang fails instead of blocking. Generous: the server
# may answer thousands of pipelined requests before its buffers fill, slowly on a loaded machine.
AWAIT_CLOSE = 120.0


class Served:
    def __init__(self, port: int, metrics: ControllerMetrics) -> None:
        self.port, self.metrics = port, metrics

    def closed(self, reason: str) -> float:
        return float(self.metrics.webhook_connections_closed.labels(reason)._value.get())

    def refused(self, reason: str) -> float:
        return float(self.metrics.webhook_requests_refused.labels(reason)._value.get())

    def open_connections(self) -> float:
        return float(self.metrics.webhook_connections._value.get())

    async def post(
        self, body: bytes | dict[str, Any], session: aiohttp.ClientSession | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with _session(session) as client:
            async with client.post(
                f"https://127.0.0.1:{self.port}{PATH}", data=data, ssl=TRUST,
                server_hostname=HOST, headers={"Content-Type": "application/json"},
            ) as response:  # fmt: skip
                return response.status, await response.json()


@asynccontextmanager
async def _session(given: aiohttp.ClientSession | None) -> AsyncIterator[aiohttp.ClientSession]:
    if given is not None:
        yield given
        return
    async with aiohttp.ClientSession() as session:
        yield session


@asynccontextmanager
async def webhook(policy: dict[str, str] | None = None, **limits: Any) -> AsyncIterator[Served]:
    limit = Limits(
        **{"handshake_timeout_seconds": LONG, "request_timeout_seconds": LONG,
           "body_timeout_seconds": LONG, **limits}
    )  # fmt: skip
    metrics = ControllerMetrics()
    view = view_of(cluster(policy if policy is not None else {names.SPREAD: "zone"}))
    hook = PlacementWebhook(
        lambda: view, metrics=metrics, now=lambda: view.snapshot.now,
        log=structlog.get_logger(), limits=limit,
    )  # fmt: skip
    runner = await serve(hook, "127.0.0.1", 0, server_context(MATERIAL))
    try:
        yield Served(runner.addresses[0][1], metrics)
    finally:
        await runner.cleanup()


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it ends the connection (a reset counts as an end)."""
    received = b""
    async with asyncio.timeout(AWAIT_CLOSE):
        try:
            while chunk := await reader.read(65536):
                received += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
    return received


async def until(condition: Callable[[], bool]) -> None:
    """Turns of the event loop until the server has done what `condition` checks."""
    async with asyncio.timeout(AWAIT_CLOSE):
        while not condition():  # noqa: ASYNC110 - the server says it in its metrics only
            await asyncio.sleep(0.01)


async def test_a_connection_that_never_starts_tls_is_closed_after_the_handshake_timeout() -> None:
    async with webhook(handshake_timeout_seconds=0.5) as served:
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"\x16\x03\x01")  # the first bytes of a ClientHello, and then nothing
        assert await until_closed(reader) == b""
        assert time.monotonic() - started >= 0.45
        writer.close()
        await until(lambda: served.closed("handshake_timeout") == 1)
        await until(lambda: served.open_connections() == 0)


async def test_a_connection_that_never_finishes_its_headers_is_closed_after_the_timeout() -> None:
    async with webhook(request_timeout_seconds=0.5) as served:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", served.port, ssl=TRUST, server_hostname=HOST
        )
        started = time.monotonic()
        writer.write(f"POST {PATH} HTTP/1.1\r\nHost: webhook\r\nContent-Type: applic".encode())
        await writer.drain()
        assert await until_closed(reader) == b""  # closed without an answer
        assert time.monotonic() - started >= 0.45
        writer.close()
        await until(lambda: served.open_connections() == 0)
        # The port still serves.
        status, answer = await served.post(request("after"))
        assert status == 200 and answer["response"]["uid"] == "after"


async def test_at_the_cap_a_new_connection_displaces_the_oldest_never_answered_one() -> None:
    async with webhook(max_connections=3) as served:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as api_server:
            status, _ = await served.post(request("first"), api_server)  # answered, kept alive
            assert status == 200
            stalled = [await asyncio.open_connection("127.0.0.1", served.port) for _ in range(2)]
            await until(lambda: served.open_connections() == 3)
            # One more stalled connection: the oldest stalled one goes, never the answered one.
            late = await asyncio.open_connection("127.0.0.1", served.port)
            assert await until_closed(stalled[0][0]) == b""
            assert served.closed("displaced") == 1
            # A new client gets in the same way, and the kept-alive connection is still answered.
            status, answer = await served.post(request("new"))
            assert status == 200 and answer["response"]["uid"] == "new"
            assert await until_closed(stalled[1][0]) == b""
            assert served.closed("displaced") == 2
            status, answer = await served.post(request("second"), api_server)
            assert status == 200 and answer["response"]["uid"] == "second"
            assert served.closed("over_cap") == 0
            for _, writer in [*stalled, late]:
                writer.close()


async def test_over_the_cap_of_answered_connections_a_new_one_is_reset() -> None:
    async with webhook(max_connections=2) as served:
        sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in "ab"]
        try:
            for session in sessions:
                status, _ = await served.post(request(), session)
                assert status == 200
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            assert await until_closed(reader) == b""  # reset before any TLS
            writer.close()
            assert served.closed("over_cap") == 1
            assert served.closed("displaced") == 0
            status, _ = await served.post(request("kept"), sessions[0])
            assert status == 200
        finally:
            for session in sessions:
                await session.close()


async def test_an_oversized_body_is_answered_413_whether_its_length_is_said_or_not() -> None:
    big = request("big")
    big["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * 8192}
    async with webhook(max_body_bytes=4096) as served:
        status, answer = await served.post(big)
        assert (status, answer) == (413, {"error": "body over 4096 bytes"})

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
            yield json.dumps(big).encode()

        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"https://127.0.0.1:{served.port}{PATH}", data=chunks(), ssl=TRUST,
                server_hostname=HOST,
            ) as response:  # fmt: skip
                assert response.status == 413
                assert await response.json() == {"error": "body over 4096 bytes"}
        assert served.refused("too_large") == 2
        status, _ = await served.post(request("small"))
        assert status == 200


async def test_a_body_that_does_not_arrive_is_answered_408_after_the_timeout() -> None:
    async with webhook(body_timeout_seconds=0.5) as served:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", served.port, ssl=TRUST, server_hostname=HOST
        )
        writer.write(
            f"POST {PATH} HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
            'Content-Length: 1000\r\n\r\n{"apiVersion":'.encode()
        )
        await writer.drain()
        answer = await until_closed(reader)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert b'{"error": "body not received within 0.5 s"}' in answer
        assert served.refused("body_timeout") == 1


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested deeper than 64"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "JSON nested deeper than 64"),
        (b"[" * 100_000, "JSON nested deeper than 64"),
        (b"\xff\xfe not json", "not JSON"),
        (b"1" * 5000, "not JSON"),  # over Python's 4300-digit limit for int()
    ],
    ids=["100k-deep", "65-deep", "100k-open", "not-utf8", "5000-digits"],
)
async def test_deep_or_broken_json_gets_a_400_naming_why_and_the_port_keeps_serving(
    body: bytes, why: str
) -> None:
    async with webhook() as served:
        status, answer = await served.post(body)
        assert (status, answer) == (400, {"error": why})
        status, answer = await served.post(request("next"))
        assert status == 200 and answer["response"]["uid"] == "next"


async def test_a_review_just_inside_the_depth_limit_is_answered() -> None:
    deep = request("deep")
    node: dict[str, Any] = {}
    deep["request"]["object"]["metadata"]["annotations"] = {}
    deep["request"]["object"]["spec"]["overhead"] = node
    for _ in range(59):  # review, request, object, spec, overhead: 5 levels, 59 more: 64
        node["x"] = {}
        node = node["x"]
    async with webhook() as served:
        status, answer = await served.post(deep)
        assert status == 200 and answer["response"]["allowed"] is True


async def test_full_width_digits_are_never_read_as_numbers_and_the_pod_is_allowed_unchanged() -> (
    None
):
    full_width = request("fw")  # FULLWIDTH DIGIT ONE: float() reads it as 1, and it fits
    full_width["request"]["object"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "\uff11"}
    }
    async with webhook() as served:
        status, answer = await served.post(full_width)
        assert status == 200
        assert answer["response"] == {"uid": "fw", "allowed": True}  # no patch: not placed
        assert served.metrics.webhook_reviews.labels("unreadable")._value.get() == 1
        status, answer = await served.post(request("ascii"))  # the same pod with "1" is placed
        assert answer["response"]["patchType"] == "JSONPatch"
    async with webhook({names.MIN_ON_DEMAND: "\uff13"}) as served:  # in a policy: refused
        status, answer = await served.post(request("policy"))
        assert answer["response"] == {"uid": "policy", "allowed": True}
        assert served.metrics.webhook_reviews.labels("no_policy")._value.get() == 1


async def test_a_client_that_never_reads_its_answers_is_cut_off() -> None:
    async with webhook(request_timeout_seconds=0.5) as served:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.setblocking(False)
        await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", served.port))
        _, writer = await asyncio.open_connection(sock=raw, ssl=TRUST, server_hostname=HOST)
        # Pipelined requests whose answers (404s) pile up on the server: never read here.
        writer.write(b"GET /nothing HTTP/1.1\r\nHost: webhook\r\n\r\n" * 30_000)
        await until(lambda: served.closed("write_timeout") == 1)
        writer.transport.abort()
        await until(lambda: served.open_connections() == 0)

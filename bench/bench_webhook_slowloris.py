"""The admission webhook under a slowloris flood: memory, open files and legitimate latency.

The real `PlacementWebhook` serves in a process of its own (over HTTPS on 127.0.0.1, the view of
`bench_webhook`: 1000 nodes, 100 Deployments with a policy), with the controller's default limits
(`Limits()`, the settings `webhook_*`). This process then opens `--connections` connections that
stall, alternately during the TLS handshake (three bytes of a ClientHello, then nothing) and
after it (a request line and half a header, then nothing), at most 100 connects in flight. While
they stand (at the cap each new one displaces the oldest never answered), two legitimate clients
send reviews: one over a connection kept alive from before the flood (as the API server keeps
its connections), one on a fresh connection each time. The server's resident memory and open
files are sampled every 100 ms from /proc; after the flood the stalled clients wait for the
server to close them.

    .venv/bin/python -m bench.bench_webhook_slowloris [--connections 1500] [--unguarded]

`--unguarded` serves as the webhook did before the limits (aiohttp's TCPSite, asyncio's TLS and
aiohttp's defaults), for the comparison. Only 127.0.0.1; bounded in count and in time (about
15 s guarded; 80 s unguarded, whose header stalls are never closed: the clients give up at 70 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import structlog

from bench.bench_webhook import review, world
from rebalancer.controller.webhook import PATH, PlacementWebhook, serve
from rebalancer.controller.webhook_tls import Material, issue, server_context, service_names
from rebalancer.metrics import ControllerMetrics

HOST = service_names("bench", "bench")[2]
CONNECTS_IN_FLIGHT = 100
STALL_SECONDS_MAX = 70.0  # a stalled client gives up after this (the unguarded server never ends)
AT_ONCE_SECONDS = 1.0


def raise_file_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---- the server process ----------------------------------------------------------------------


async def run_server(directory: Path, unguarded: bool) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    material = Material(*((directory / n).read_bytes() for n in ("ca.pem", "cert.pem", "key.pem")))
    view = world(1000, 100)
    metrics = ControllerMetrics()
    hook = PlacementWebhook(
        lambda: view, metrics=metrics, now=lambda: dt.datetime.now(dt.UTC),
        log=structlog.get_logger(),
    )  # fmt: skip
    context = server_context(material)
    if unguarded:  # as before the limits: aiohttp's TCPSite and defaults
        from aiohttp import web

        runner = web.AppRunner(hook.app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    else:
        runner = await serve(hook, "127.0.0.1", 0, context)
    started = {"port": runner.addresses[0][1], "limits": vars(hook.limits)}
    print("started", json.dumps(started), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until told to end
    counters = {
        f"{s.name}{{{','.join(f'{k}={v}' for k, v in s.labels.items())}}}": s.value
        for family in metrics.registry.collect()
        if family.name.startswith("rebalancer_webhook_") and family.type != "histogram"
        for s in family.samples
        if not s.name.endswith("_created")
    }
    print("counters", json.dumps(counters), flush=True)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            await runner.cleanup()


# ---- the flood -------------------------------------------------------------------------------


@dataclass
class Flood:
    total: int
    opened: dict[str, int] = field(default_factory=lambda: {"handshake": 0, "headers": 0})
    refused: int = 0  # reset or closed before the stall began
    closed_after: list[float] = field(default_factory=list)  # seconds stalled until closed
    still_open: int = 0
    all_attempted: asyncio.Event = field(default_factory=asyncio.Event)

    def attempted(self, kind: str | None) -> None:
        if kind is None:
            self.refused += 1
        else:
            self.opened[kind] += 1
        if self.refused + sum(self.opened.values()) == self.total:
            self.all_attempted.set()


async def stall(
    kind: str, port: int, trust: ssl.SSLContext, flood: Flood, gate: asyncio.Semaphore
) -> None:
    try:
        async with gate:
            if kind == "handshake":
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"\x16\x03\x01")
            else:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=trust, server_hostname=HOST,
                    ssl_handshake_timeout=STALL_SECONDS_MAX,
                )  # fmt: skip
                writer.write(f"POST {PATH} HTTP/1.1\r\nHost: webhook\r\nContent-Ty".encode())
            await writer.drain()
    except (OSError, ssl.SSLError, TimeoutError):
        flood.attempted(None)
        return
    flood.attempted(kind)
    started = time.monotonic()
    try:
        async with asyncio.timeout(STALL_SECONDS_MAX):
            while await reader.read(65536):
                pass
        flood.closed_after.append(time.monotonic() - started)
    except TimeoutError:  # before OSError, which it is a kind of
        flood.still_open += 1
    except (OSError, ssl.SSLError):
        flood.closed_after.append(time.monotonic() - started)
    finally:
        writer.transport.abort()


@dataclass
class Legit:
    latencies: list[float] = field(default_factory=list)
    failures: int = 0


async def keep_reviewing(
    port: int, trust: ssl.SSLContext, stop: asyncio.Event, *, fresh: bool, every: float
) -> Legit:
    legit = Legit()
    index = 0
    session = None if fresh else aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
    try:
        while not stop.is_set():
            index += 1
            started = time.perf_counter()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    client = session or await stack.enter_async_context(aiohttp.ClientSession())
                    async with asyncio.timeout(2.0):  # the chart's webhook timeout
                        async with client.post(
                            f"https://127.0.0.1:{port}{PATH}", json=review(index, "model001"),
                            ssl=trust, server_hostname=HOST,
                        ) as response:  # fmt: skip
                            await response.json()
                            response.raise_for_status()
                legit.latencies.append(time.perf_counter() - started)
            except (aiohttp.ClientError, OSError, TimeoutError):
                legit.failures += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
    finally:
        if session is not None:
            await session.close()
    return legit


async def said(stdout: asyncio.StreamReader, what: str) -> str:
    """The server's line that starts with `what` (its log lines, if any, are passed on)."""
    while line := (await stdout.readline()).decode():
        if line.startswith(what + " "):
            return line.removeprefix(what + " ")
        print("server:", line.rstrip(), file=sys.stderr)
    raise RuntimeError(f"the server ended without saying {what}")


def sample(pid: int) -> tuple[float, int]:
    """Resident memory (MiB) and open files of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = next(
        int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
    )
    return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd"))


async def sampling(pid: int, into: list[tuple[float, float, int]], stop: asyncio.Event) -> None:
    start = time.monotonic()
    while not stop.is_set():
        rss, fds = sample(pid)
        into.append((time.monotonic() - start, rss, fds))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def quantiles(latencies: list[float]) -> str:
    if len(latencies) < 2:
        return f"{len(latencies)} answered"
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return (
        f"{len(latencies)} answered, p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms"
    )


async def run(connections: int, unguarded: bool) -> None:
    raise_file_limit()
    material = issue(service_names("bench", "bench"), dt.datetime.now(dt.UTC))
    trust = ssl.create_default_context(cadata=material.ca.decode())
    with tempfile.TemporaryDirectory(prefix="bench-slowloris-") as tmp:
        directory = Path(tmp)
        for name, data in (
            ("ca.pem", material.ca),
            ("cert.pem", material.cert),
            ("key.pem", material.key),
        ):
            (directory / name).write_bytes(data)
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.bench_webhook_slowloris", "--serve", str(directory),
            *(["--unguarded"] if unguarded else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert server.stdin is not None and server.stdout is not None
        started = json.loads(await said(server.stdout, "started"))
        port = started["port"]
        samples: list[tuple[float, float, int]] = []
        stop_sampling, stop_legit = asyncio.Event(), asyncio.Event()
        sampler = asyncio.create_task(sampling(server.pid, samples, stop_sampling))
        baseline = sample(server.pid)
        kept = asyncio.create_task(keep_reviewing(port, trust, stop_legit, fresh=False, every=0.05))
        fresh = asyncio.create_task(keep_reviewing(port, trust, stop_legit, fresh=True, every=0.2))
        await asyncio.sleep(1.0)  # both legitimate clients are under way before the flood

        flood = Flood(connections)
        gate = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        flood_started = time.monotonic()
        kinds = ("handshake", "headers")
        stalls = [
            asyncio.create_task(stall(kinds[i % 2], port, trust, flood, gate))
            for i in range(connections)
        ]
        await flood.all_attempted.wait()
        opened_in = time.monotonic() - flood_started
        during = sample(server.pid)
        await asyncio.sleep(2.0)
        during_later = sample(server.pid)
        stop_legit.set()
        kept_result, fresh_result = await kept, await fresh
        await asyncio.gather(*stalls)
        after = sample(server.pid)
        flood_seconds = time.monotonic() - flood_started
        stop_sampling.set()
        await sampler
        server.stdin.close()
        counters = json.loads(await said(server.stdout, "counters"))
        await server.wait()

    peak_rss = max(s[1] for s in samples)
    peak_fds = max(s[2] for s in samples)
    print(
        f"server: {'unguarded (as before the limits)' if unguarded else 'guarded'}; limits "
        f"{'aiohttp and asyncio defaults' if unguarded else started['limits']}"
    )
    print(
        f"flood: {connections} connections attempted in {opened_in:.1f} s (TCP connected to "
        f"stall in the handshake: {flood.opened['handshake']}, TLS connected to stall after "
        f"partial headers: {flood.opened['headers']}, refused before: {flood.refused})"
    )
    print(
        f"server memory (RSS): {baseline[0]:.0f} MiB before, {during[0]:.0f} MiB once all "
        f"attempted, {during_later[0]:.0f} MiB 2 s later, peak {peak_rss:.0f} MiB, "
        f"{after[0]:.0f} MiB after"
    )
    print(
        f"server open files: {baseline[1]} before, {during[1]} once all attempted, "
        f"{during_later[1]} 2 s later, peak {peak_fds}, {after[1]} after"
    )
    at_once = [t for t in flood.closed_after if t < AT_ONCE_SECONDS]
    later = sorted(t for t in flood.closed_after if t >= AT_ONCE_SECONDS)
    print(
        f"stalled connections closed by the server: {len(at_once)} within "
        f"{AT_ONCE_SECONDS:g} s of their stall, {len(later)} later"
        + (
            f" (after {later[len(later) // 2]:.1f} s median, {later[-1]:.1f} s max)"
            if later
            else ""
        )
        + f", {flood.still_open} still open when the client gave up at {STALL_SECONDS_MAX:.0f} s"
    )
    print(
        f"legitimate reviews on a kept-alive connection: {quantiles(kept_result.latencies)}, "
        f"failed {kept_result.failures}"
    )
    print(
        f"legitimate reviews on a fresh connection each: {quantiles(fresh_result.latencies)}, "
        f"failed {fresh_result.failures}"
    )
    print(f"flood and drain took {flood_seconds:.0f} s")
    print("server counters: " + ", ".join(f"{k} {v:g}" for k, v in counters.items() if v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=1500)
    parser.add_argument("--unguarded", action="store_true")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.connections <= 5000:
        parser.error("--connections: 1 to 5000")
    if args.serve:
        raise_file_limit()
        asyncio.run(run_server(args.serve, args.unguarded))
    else:
        asyncio.run(run(args.connections, args.unguarded))


if __name__ == "__main__":
    main()

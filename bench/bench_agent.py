"""Agent benchmark: event visible in IMDS -> Node condition written; RSS and CPU while polling.

Runs the real `rebalancer agent` process against the IMDS emulator and a Node API on 127.0.0.1.

    .venv/bin/python -m bench.bench_agent --events 100 --soak-seconds 600

Goals (issue "Foundation and the node agent"): p99 latency <= poll interval + 100 ms; RSS <= 60 MB
and CPU <= 1 % of a core while polling at 1 Hz.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rebalancer.node_signal import CONDITION_TYPE, parse_message
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.imds import ImdsEmulator
from tests.helpers import free_port, serve
from tests.tap import api_server, node_condition

NODE = "aks-spot-12345678-vmss000000"
VM = "aks-spot-12345678-vmss_0"
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/mc/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/aks-spot-12345678-vmss/virtualMachines/0"
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def main(events: int, soak_seconds: float, interval: float) -> None:
    imds = ImdsEmulator()
    node = {"metadata": {"name": NODE}, "spec": {"providerID": PROVIDER_ID}}
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            serve(imds.app()) as imds_url,
            api_server(Path(tmp), (R.NODES, node)) as (kube, _),
        ):
            kubeconfig = kube.kubeconfig_path
            env = {
                **os.environ,
                "NODE_NAME": NODE,
                "REBALANCER_IMDS_URL": f"{imds_url}/vms/{VM}",
                "REBALANCER_KUBECONFIG": str(kubeconfig),
                "REBALANCER_HTTP_HOST": "127.0.0.1",
                "REBALANCER_HTTP_PORT": str(free_port()),
                "REBALANCER_POLL_INTERVAL_SECONDS": str(interval),
                "REBALANCER_LOG_FORMAT": "json",
                "REBALANCER_LOG_LEVEL": "warning",
            }
            # Started once, before anything is measured: blocking the loop for the fork is harmless.
            process = subprocess.Popen([sys.executable, "-m", "rebalancer.cli", "agent"], env=env)  # noqa: ASYNC220
            try:
                await measure(process, imds, kube, events, soak_seconds, interval)
            finally:
                process.terminate()
                process.wait(10)


def condition_event(kube: ClusterEmulator) -> tuple[str, str]:
    condition = node_condition(kube, NODE, CONDITION_TYPE) or {}
    return condition.get("status", ""), parse_message(condition.get("message", "")).get(
        "EventId", ""
    )


async def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition never appeared")
        await asyncio.sleep(0.002)


async def measure(
    process: subprocess.Popen[bytes],
    imds: ImdsEmulator,
    kube: ClusterEmulator,
    events: int,
    soak_seconds: float,
    interval: float,
) -> None:
    await wait_until(lambda: node_condition(kube, NODE, CONDITION_TYPE) is not None, 30)
    latencies = []
    for _ in range(events):
        event = imds.schedule("Preempt", [VM], notice_seconds=30)
        started = time.monotonic()
        await wait_until(lambda event=event: condition_event(kube) == ("True", event.event_id))
        latencies.append(time.monotonic() - started)
        imds.cancel(event.event_id)
        await wait_until(lambda: condition_event(kube)[0] == "False")
        # Land the next event at a random phase of the agent's poll cycle.
        await asyncio.sleep(interval * (0.137 * len(latencies) % 1.0))
    print(f"event visible -> Node condition written, {events} events, poll {interval:g}s:")
    print(
        f"  p50 {statistics.median(latencies) * 1000:.0f} ms   "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms   "
        f"max {max(latencies) * 1000:.0f} ms   (goal p99 <= {interval * 1000 + 100:.0f} ms)"
    )

    imds.prune(0)
    cpu_before = cpu_seconds(process.pid)
    rss_samples = []
    started = time.monotonic()
    while time.monotonic() - started < soak_seconds:
        await asyncio.sleep(min(5.0, soak_seconds))
        rss_samples.append(rss_mb(process.pid))
    elapsed = time.monotonic() - started
    cpu = (cpu_seconds(process.pid) - cpu_before) / elapsed * 100
    polls = imds.vms[VM].requests
    print(f"soak: {elapsed:.0f}s of polling at {interval:g}s ({polls} IMDS requests in all)")
    print(
        f"  RSS start {rss_samples[0]:.1f} MB, end {rss_samples[-1]:.1f} MB, "
        f"max {max(rss_samples):.1f} MB (goal <= 60 MB)"
    )
    print(f"  CPU {cpu:.2f} % of one core (goal <= 1 %)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--soak-seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.soak_seconds, args.interval))

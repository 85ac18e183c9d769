"""Agent memory: RSS of the real `rebalancer agent` process through a notice.

The cluster emulator (API and IMDS, on 127.0.0.1) runs in this process with one spot node;
the agent runs as a real process against it, as in a DaemonSet pod. Phases, each bounded:
start (until the agent's condition is on its Node), idle polling, then a Preempt: published on
the Node, marked drained (as the controller marks it), acknowledged to IMDS by the agent.

    .venv/bin/python -m bench.bench_agent_memory               # about 30 s
    .venv/bin/python -m bench.bench_agent_memory --idle-seconds 60

Printed: RSS once ready, steady RSS (median and max of samples while polling idle and after the
notice), and the peak (the kernel's high-water mark, VmHWM, read just before the agent stops).
Goal (issue "Ready for users", item 9): <= 60 MB.

The image installs requirements.lock only; this virtualenv also has the test tools, one of which
(rich) structlog imports when present. By default the agent runs with the test-only packages it
would otherwise import hidden, so the figure is the image's; `--with-test-packages` runs it as
the virtualenv is.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rebalancer import names
from rebalancer.node_signal import CONDITION_TYPE, NodeEvents
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.helpers import free_port

SCENARIO: dict[str, Any] = {
    "name": "bench-agent",
    "cluster": {"name": "bench-agent", "region": "eastus"},
    "pools": [
        {"name": "system", "priority": "regular", "mode": "system", "vmSize": "Standard_D4s_v5",
         "zones": ["1"], "cpu": 4, "memory": "16Gi", "gpus": 0, "count": 1},
        {"name": "gpuspot", "priority": "spot", "vmSize": "Standard_NC24ads_A100_v4",
         "zones": ["1"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 1},
    ],
}  # fmt: skip
# Imported by structlog when installed; in requirements-test.lock, not in requirements.lock.
TEST_ONLY = ("rich",)
STEP_TIMEOUT_SECONDS = 30.0


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MB (2**20 bytes)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def agent_command(hide: tuple[str, ...]) -> list[str]:
    if not hide:
        return [sys.executable, "-m", "rebalancer.cli", "agent"]
    blocked = "".join(f"sys.modules[{name!r}] = None; " for name in hide)
    return [
        sys.executable,
        "-c",
        f"import sys; {blocked}from rebalancer.cli import main; sys.exit(main(['agent']))",
    ]


class Sampler:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.samples: dict[str, list[float]] = {}

    async def until(
        self, predicate: Callable[[], bool], *, what: str, phase: str | None = None
    ) -> None:
        """Wait for `predicate`, sampling RSS every 0.25 s into `phase`; bounded."""
        deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the agent exited ({self.process.returncode}) waiting for {what}")
            if phase is not None:
                self.samples.setdefault(phase, []).append(memory_mb(self.process.pid)["VmRSS"])
            if predicate():
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {STEP_TIMEOUT_SECONDS:.0f}s waiting for {what}")
            await asyncio.sleep(0.25)

    async def hold(self, seconds: float, phase: str) -> None:
        ends = time.monotonic() + seconds
        await self.until(lambda: time.monotonic() >= ends, what=f"{seconds:g}s", phase=phase)


async def main(idle_seconds: float, hide: tuple[str, ...]) -> None:
    cluster = ClusterEmulator(parse_scenario(copy.deepcopy(SCENARIO)), tick_seconds=0.05)
    with tempfile.TemporaryDirectory() as workdir:
        await cluster.start(kubeconfig_dir=workdir)
        (spot,) = [n["metadata"]["name"] for n in cluster.nodes("gpuspot")]
        env = {
            **os.environ,
            "NODE_NAME": spot,
            "REBALANCER_IMDS_URL": cluster.imds_url_for(spot),
            "REBALANCER_KUBECONFIG": str(cluster.kubeconfig_path),
            "REBALANCER_HTTP_HOST": "127.0.0.1",
            "REBALANCER_HTTP_PORT": str(free_port()),
            "REBALANCER_LOG_FORMAT": "json",
            "REBALANCER_LOG_LEVEL": "warning",
        }
        # Started once, before anything is measured: blocking the loop for the fork is harmless.
        process = subprocess.Popen(agent_command(hide), env=env)  # noqa: ASYNC220
        try:
            await measure(cluster, spot, Sampler(process), idle_seconds, hide)
        finally:
            process.terminate()
            process.wait(10)
            await cluster.stop()


def node(cluster: ClusterEmulator, name: str) -> dict[str, Any]:
    found = cluster.store.get(R.NODES, "", name)
    assert found is not None, f"node {name} is gone"
    return found


def condition(cluster: ClusterEmulator, name: str) -> str | None:
    for item in node(cluster, name)["status"].get("conditions") or []:
        if item["type"] == CONDITION_TYPE:
            return str(item["status"])
    return None


def acknowledged(cluster: ClusterEmulator, name: str, event_id: str) -> bool:
    """The agent wrote the acknowledgement on its Node (after sending it to IMDS); a Node
    already gone went with the event the acknowledgement started."""
    if cluster.store.get(R.NODES, "", name) is None:
        return bool(cluster.imds.events[event_id].acknowledged_by)
    text = (node(cluster, name)["metadata"].get("annotations") or {}).get(names.EVENTS_ANNOTATION)
    if not text:
        return False
    events = NodeEvents.from_json(text).events
    return any(e.event_id == event_id and e.acknowledged_at is not None for e in events)


async def measure(
    cluster: ClusterEmulator,
    spot: str,
    sampler: Sampler,
    idle_seconds: float,
    hide: tuple[str, ...],
) -> None:
    started = time.monotonic()
    await sampler.until(lambda: condition(cluster, spot) == "False", what="the agent's condition")
    ready_after = time.monotonic() - started
    at_ready = memory_mb(sampler.process.pid)["VmRSS"]
    await sampler.hold(idle_seconds, "steady")

    event = cluster.preempt(spot, notice_seconds=120)
    await sampler.until(
        lambda: condition(cluster, spot) == "True", what="the Preempt on the Node", phase="notice"
    )
    drained = copy.deepcopy(node(cluster, spot))
    drained["metadata"].setdefault("annotations", {})[names.DRAINED_FOR_ANNOTATION] = event.event_id
    cluster.store.update(R.NODES, drained)
    await sampler.until(
        lambda: acknowledged(cluster, spot, event.event_id),
        what="the acknowledgement",
        phase="notice",
    )
    assert cluster.imds.events[event.event_id].acknowledged_by, "IMDS saw no acknowledgement"
    # The emulated VM goes a few ticks after the acknowledgement; sample what is left of that.
    await sampler.until(
        lambda: (
            cluster.store.get(R.NODES, "", spot) is None
            or time.monotonic() - started > STEP_TIMEOUT_SECONDS * 3
        ),
        what="the VM to go",
        phase="notice",
    )
    memory = memory_mb(sampler.process.pid)
    steady = sampler.samples["steady"] + sampler.samples["notice"]
    print(
        f"rebalancer agent, one spot node on the cluster emulator, poll 1s"
        f" ({'test-only packages hidden: ' + ', '.join(hide) if hide else 'the virtualenv as is'}):"
    )
    print(f"  ready after {ready_after:.1f}s, RSS then {at_ready:.1f} MB")
    print(
        f"  steady RSS (idle {idle_seconds:g}s, then a Preempt published, drained, acknowledged;"
        f" {len(steady)} samples): median {statistics.median(steady):.1f} MB,"
        f" max {max(steady):.1f} MB"
    )
    print(f"  peak RSS (VmHWM) {memory['VmHWM']:.1f} MB   (goal <= 60 MB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument(
        "--with-test-packages",
        action="store_true",
        help="do not hide the test-only packages the agent would import (rich)",
    )
    args = parser.parse_args()
    hidden = () if args.with_test_packages else TEST_ONLY
    asyncio.run(main(args.idle_seconds, hidden))

"""The real `rebalancer agent` process: settings, probes, metrics, a Preempt, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from rebalancer.node_signal import CONDITION_TYPE, parse_message
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.imds import ImdsEmulator
from tests.helpers import free_port, serve, wait_for
from tests.tap import api_server, node_condition

pytestmark = pytest.mark.e2e

NODE = "aks-spot-12345678-vmss000000"
VM = "aks-spot-12345678-vmss_0"
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/mc/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/aks-spot-12345678-vmss/virtualMachines/0"
)


def rebalancer(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rebalancer.cli", *args],
        env={**os.environ, "REBALANCER_LOG_FORMAT": "json", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_bad_setting_stops_with_one_line() -> None:
    process = rebalancer("agent", "--poll-interval-seconds", "0.01")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "poll_interval_seconds" in lines[0] and "REBALANCER_POLL_INTERVAL_SECONDS" in lines[0]


def test_bad_setting_from_the_environment() -> None:
    process = rebalancer("agent", env={"REBALANCER_ACK_EVENT_TYPES": '["Preempt","Explode"]'})
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "ack_event_types" in err and "Explode" in err


@pytest.fixture
async def cluster(
    tmp_path: Path,
) -> AsyncIterator[tuple[ImdsEmulator, ClusterEmulator, str, Path]]:
    imds = ImdsEmulator()
    node = {"metadata": {"name": NODE}, "spec": {"providerID": PROVIDER_ID}}
    async with serve(imds.app()) as imds_url, api_server(tmp_path, (R.NODES, node)) as (kube, _):
        yield imds, kube, imds_url, kube.kubeconfig_path


async def test_agent_process_publishes_a_preempt_and_stops_on_sigterm(
    cluster: tuple[ImdsEmulator, ClusterEmulator, str, Path],
) -> None:
    imds, kube, imds_url, kubeconfig = cluster
    port = free_port()
    process = rebalancer(
        "agent",
        "--http-port",
        str(port),
        env={
            "NODE_NAME": NODE,
            "REBALANCER_IMDS_URL": f"{imds_url}/vms/{VM}",
            "REBALANCER_KUBECONFIG": str(kubeconfig),
            "REBALANCER_HTTP_HOST": "127.0.0.1",
        },
    )
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:

            async def status(path: str) -> int:
                try:
                    async with session.get(base + path) as response:
                        return response.status
                except aiohttp.ClientError:
                    return -1

            deadline = time.monotonic() + 20
            while await status("/readyz") != 200:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "agent never became ready"
                await asyncio.sleep(0.1)
            assert await status("/healthz") == 200

            event = imds.schedule("Preempt", [VM])
            seen_at = time.monotonic()

            def published() -> bool:
                condition = node_condition(kube, NODE, CONDITION_TYPE)
                return condition is not None and condition["status"] == "True"

            await wait_for(published, timeout=5, what="the Preempt on the Node")
            latency = time.monotonic() - seen_at
            assert latency < 2.0, f"published after {latency:.2f}s with 1 s polling"
            condition = node_condition(kube, NODE, CONDITION_TYPE)
            assert condition is not None
            assert parse_message(condition["message"])["EventId"] == event.event_id

            async with session.get(base + "/metrics") as response:
                text = await response.text()
            assert 'rebalancer_agent_scheduled_events_seen_total{event_type="Preempt"} 1.0' in text
            assert 'rebalancer_build_info{component="agent"' in text

        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(process.wait, 10)
        assert process.returncode == 0
        assert time.monotonic() - stopping < 5.0
        logs = process.stderr.read() if process.stderr else ""
        assert '"event": "shutting down"' in logs
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

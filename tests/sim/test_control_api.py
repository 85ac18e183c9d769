"""Events posted to the IMDS emulator's control API are carried out by the emulated cloud, as
those of the timeline and `ClusterEmulator.preempt` are (one path): a Preempt takes the VM, its
Node and its pods; a cancelled one takes nothing. Seen through the real kubectl."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp

from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from tests.helpers import KUBECTL

from .conftest import eventually


async def _kubectl(cluster: ClusterEmulator, home: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        env=dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path), HOME=str(home)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def _post_event(cluster: ClusterEmulator, body: dict[str, Any]) -> dict[str, Any]:
    assert cluster.urls is not None
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{cluster.urls.imds}/control/events", json=body) as response,
    ):
        assert response.status == 201, await response.text()
        summary: dict[str, Any] = await response.json()
        return summary


def _spot_node_with_a_pod(cluster: ClusterEmulator) -> str:
    for node in cluster.nodes("gpuspot"):
        name = node["metadata"]["name"]
        if any(p["metadata"]["namespace"] == "default" for p in cluster.pods(node=name)):
            return str(name)
    raise AssertionError("no spot node runs an inference replica")


async def test_a_preempt_posted_to_the_control_api_takes_the_vm_its_node_and_pods(
    served: ClusterEmulator, tmp_path: Path
) -> None:
    served.cloud.node_delete_delay_seconds = 0.5
    await eventually(
        lambda: len([p for p in served.pods("default") if p["spec"].get("nodeName")]) == 3,
        message="the inference replicas bound",
    )
    doomed = _spot_node_with_a_pod(served)
    pods = {p["metadata"]["name"] for p in served.pods("default", node=doomed)}
    code, out = await _kubectl(served, tmp_path, "get", "node", doomed)
    assert code == 0, out
    summary = await _post_event(
        served,
        {"type": "Preempt", "resources": [served.vm_name_for(doomed)], "noticeSeconds": 1},
    )
    assert summary["state"] == "scheduled"

    await eventually(
        lambda: served.store.get(R.NODES, "", doomed) is None,
        within=10,
        message="the preempted node deleted with its VM",
    )
    code, out = await _kubectl(served, tmp_path, "get", "node", doomed)
    assert code == 1 and f'nodes "{doomed}" not found' in out, out
    assert served.cloud.preempted == [doomed]
    # Its pods go with it (garbage collection of a deleted node's pods); the Deployment
    # replaces them elsewhere.
    await eventually(
        lambda: not pods & {p["metadata"]["name"] for p in served.pods("default")},
        message="the preempted node's pods gone",
    )
    code, out = await _kubectl(served, tmp_path, "get", "pods", "-o", "name")
    assert code == 0, out
    assert not pods & {line.removeprefix("pod/") for line in out.split()}


async def test_a_control_api_preempt_cancelled_before_notbefore_takes_nothing(
    served: ClusterEmulator,
) -> None:
    served.cloud.node_delete_delay_seconds = 0.1
    spared, doomed = sorted(n["metadata"]["name"] for n in served.nodes("gpuspot"))[:2]
    cancelled = await _post_event(
        served,
        {"type": "Preempt", "resources": [served.vm_name_for(spared)], "noticeSeconds": 1},
    )
    assert served.urls is not None
    async with (
        aiohttp.ClientSession() as session,
        session.delete(f"{served.urls.imds}/control/events/{cancelled['eventId']}") as response,
    ):
        assert response.status == 204
    # A second Preempt with the same notice, posted after the first, marks when the first
    # would have been carried out.
    await _post_event(
        served,
        {"type": "Preempt", "resources": [served.vm_name_for(doomed)], "noticeSeconds": 1},
    )
    await eventually(
        lambda: served.store.get(R.NODES, "", doomed) is None,
        within=10,
        message="the second preempted node deleted",
    )
    assert served.store.get(R.NODES, "", spared) is not None
    assert served.cloud.preempted == [doomed]

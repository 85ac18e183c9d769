"""Fixtures for the cluster emulator's tests: small scenarios, a served cluster, real clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from rebalancer.clock import ManualClock
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import Scenario, parse_scenario
from tests.controlplane import ControlPlane

from .backend import Backend, eventually, kubeconfig_in, namespace_for

__all__ = ["eventually"]

SPOT_TOLERATION = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
GPU_TOLERATION = "sku=gpu:NoSchedule"


def small_scenario(*, startup_seconds: float = 2, **changes: Any) -> Scenario:
    """Three spot GPU nodes, an on-demand GPU pool that may grow to 2, one system node, and an
    inference Deployment of 3 one-GPU replicas with a PDB maxUnavailable 1."""
    data: dict[str, Any] = {
        "name": "small",
        "settings": {"nodeDeleteDelaySeconds": 5, "shutdownSeconds": 1, "nodeAutoDrain": False},
        "pools": [
            {"name": "system", "mode": "system", "cpu": 4, "memory": "16Gi", "count": 1},
            {
                "name": "gpuspot",
                "priority": "spot",
                "vmSize": "Standard_NC24ads_A100_v4",
                "zones": ["1", "2", "3"],
                "cpu": 24,
                "memory": "220Gi",
                "gpus": 1,
                "count": 3,
                "spotPricePerHour": 0.9,
                "pricePerHour": 3.67,
            },
            {
                "name": "gpu",
                "vmSize": "Standard_NC24ads_A100_v4",
                "cpu": 24,
                "memory": "220Gi",
                "gpus": 1,
                "count": 0,
                "maxCount": 2,
                "provisioningSeconds": 5,
                "pricePerHour": 3.67,
            },
        ],
        "workloads": [
            {
                "name": "inference",
                "replicas": 3,
                "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1},
                "tolerations": [SPOT_TOLERATION, GPU_TOLERATION],
                "preferSpot": 100,
                "startupSeconds": startup_seconds,
                "pdb": {"maxUnavailable": 1},
            }
        ],
    }
    data.update(changes)
    return parse_scenario(data)


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    """A test that leaves asyncio tasks running fails (STYLE.md 15)."""
    before = asyncio.all_tasks()
    yield
    for _ in range(3):
        await asyncio.sleep(0)
    leftover = [
        task
        for task in asyncio.all_tasks() - before
        if not task.done() and task is not asyncio.current_task()
    ]
    assert not leftover, f"tasks left running: {leftover}"


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_cluster(manual_clock: ManualClock) -> Callable[..., ClusterEmulator]:
    """A cluster on a ManualClock, not served: for controller tests in virtual time."""

    def make(scenario: Scenario | None = None, **kwargs: Any) -> ClusterEmulator:
        return ClusterEmulator(scenario or small_scenario(), clock=manual_clock, **kwargs)

    return make


@pytest.fixture
async def served() -> AsyncIterator[ClusterEmulator]:
    """The small scenario (plus a node-agent DaemonSet in kube-system) served over HTTP on
    ephemeral ports, loops ticking in real time."""
    scenario = small_scenario(startup_seconds=0.2)
    scenario.workloads += small_scenario(
        workloads=[
            {
                "name": "node-agent",
                "namespace": "kube-system",
                "kind": "DaemonSet",
                "tolerations": [SPOT_TOLERATION, GPU_TOLERATION],
                "requests": {"cpu": "10m"},
            }
        ]
    ).workloads
    cluster = ClusterEmulator(scenario, tick_seconds=0.02, bookmark_interval_seconds=0.2)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def api(served: ClusterEmulator) -> AsyncIterator[k8s.ApiClient]:
    """A real kubernetes_asyncio client configured from the emulator's kubeconfig."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(served.kubeconfig_path), client_configuration=configuration
    )
    api_client = k8s.ApiClient(configuration)
    try:
        yield api_client
    finally:
        await api_client.close()


def aks_like_scenario() -> Scenario:
    """The node pools tests/cluster/start.sh creates on the real cluster, and nothing else."""
    gpu = {"vmSize": "Standard_NC24ads_A100_v4", "cpu": 24, "memory": "220Gi", "gpus": 1}
    return parse_scenario(
        {
            "name": "conformance",
            "pools": [
                {"name": "system", "mode": "system", "cpu": 4, "memory": "16Gi", "count": 1},
                {"name": "gpuspot", "priority": "spot", "count": 3, **gpu},
                {"name": "gpuondemand", "count": 2, **gpu},
            ],
        }
    )


async def _api_client(kubeconfig: Path) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return k8s.ApiClient(configuration)


@pytest.fixture(
    params=["emulator", pytest.param("real", marks=pytest.mark.k8s)],
)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The API server under test, as the admin, with a namespace of the test's own: a fresh
    emulator shaped like the real cluster, or the session's real control plane."""
    namespace = namespace_for(request.node.name)
    cluster: ClusterEmulator | None = None
    if request.param == "real":
        plane: ControlPlane = request.getfixturevalue("control_plane")
        kubeconfig = kubeconfig_in(plane.admin_kubeconfig, tmp_path / "kubeconfig", namespace)
        session = aiohttp.ClientSession()
        server, ssl_context = plane.server, plane.ssl_context()
    else:
        cluster = ClusterEmulator(aks_like_scenario(), tick_seconds=0.02)
        urls = await cluster.start()
        kubeconfig = kubeconfig_in(urls.kubeconfig, tmp_path / "kubeconfig", namespace)
        session = aiohttp.ClientSession(headers={"Authorization": "Bearer x"})
        server, ssl_context = urls.api, None
    backend = Backend(
        request.param,
        server,
        kubeconfig,
        namespace,
        session,
        await _api_client(kubeconfig),
        ssl_context,
    )
    try:
        await backend.open_namespace()
        yield backend
    finally:
        try:
            await backend.close()
        finally:
            await backend.api.close()
            await session.close()
            if cluster is not None:
                await cluster.stop()

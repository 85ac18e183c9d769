"""The doctor in the controller: the real `Controller` in-process against the cluster emulator
running `spot-gpu-misconfigured` (its informers, leader election and Event recorder over real
HTTP). Each finding becomes one Warning Event on the object to change, when it appears and not at
every run; the gauge counts the findings per check; a fixed DaemonSet drops out of both, and a
finding that comes back is said again."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import structlog

from rebalancer.clock import SystemClock
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.kube.client import KubeClient
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import Check, EventReason
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.e2e.test_plugin import shipped
from tests.helpers import wait_for

PLUGIN = ("kube-system", "nvidia-device-plugin-daemonset")
AGENT = ("spot-rebalancer", "spot-rebalancer-agent")


def warnings(cluster: ClusterEmulator) -> list[tuple[str, str]]:
    """(kind/name of the object, first word of the message) of our Misconfigured Events."""
    return sorted(
        (f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}", e["message"].split(":")[0])
        for e in cluster.store.items(R.EVENTS)
        if e.get("reason") == EventReason.MISCONFIGURED and e.get("type") == "Warning"
    )


def gauge(metrics: ControllerMetrics) -> dict[str, float]:
    return {
        sample.labels["check"]: sample.value
        for family in metrics.registry.collect()
        if family.name == "rebalancer_doctor_findings"
        for sample in family.samples
    }


def set_tolerations(cluster: ClusterEmulator, key: tuple[str, str], tolerations: list[Any]) -> None:
    daemonset = copy.deepcopy(cluster.store.get(R.DAEMONSETS, *key))
    assert daemonset is not None
    daemonset["spec"]["template"]["spec"]["tolerations"] = tolerations
    cluster.store.update(R.DAEMONSETS, daemonset)


async def test_findings_become_warning_events_once_and_a_gauge(tmp_path: Path) -> None:
    cluster = ClusterEmulator(parse_scenario(shipped("spot-gpu-misconfigured")), tick_seconds=0.05)
    await cluster.start(kubeconfig_dir=tmp_path)
    settings = ControllerSettings(
        kubeconfig=str(cluster.kubeconfig_path),
        namespace="spot-rebalancer",
        identity="controller-0",
        lease_duration_seconds=4,
        renew_deadline_seconds=3,
        retry_period_seconds=1,
        doctor_interval_seconds=0.3,
    )
    client = await KubeClient.connect(settings.kubeconfig)
    metrics = ControllerMetrics()
    controller = Controller(
        settings=settings, client=client, metrics=metrics, clock=SystemClock(),
        log=structlog.get_logger(), identity=settings.identity,
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    broken = [
        ("DaemonSet/nvidia-device-plugin-daemonset", str(Check.DEVICE_PLUGIN_NOT_ON_SPOT)),
        ("DaemonSet/spot-rebalancer-agent", str(Check.AGENT_NOT_ON_SPOT)),
        ("Deployment/embedder", str(Check.WORKLOAD_NOT_ON_SPOT)),
    ]
    try:
        # Before the autoscaler's on-demand nodes come, no GPU replica has an on-demand pool
        # either; once they are up, the scenario's three mistakes remain.
        await wait_for(
            lambda: (
                gauge(metrics).get(str(Check.NO_ON_DEMAND_FALLBACK)) == 0
                and sum(gauge(metrics).values()) == 3
            ),
            timeout=20,
            what="the three findings",
        )
        await wait_for(lambda: set(broken) <= set(warnings(cluster)), timeout=10, what="Events")
        said = warnings(cluster)
        runs = controller.doctor.runs
        await wait_for(lambda: controller.doctor.runs >= runs + 3, timeout=20, what="3 more runs")
        assert warnings(cluster) == said  # nothing said twice
        assert all(said.count(item) == 1 for item in broken)

        plugin = cluster.store.get(R.DAEMONSETS, *PLUGIN)
        assert plugin is not None
        before = plugin["spec"]["template"]["spec"]["tolerations"]
        fixed = [*before, {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                           "value": "spot", "effect": "NoSchedule"}]  # fmt: skip
        set_tolerations(cluster, PLUGIN, fixed)
        await wait_for(
            lambda: gauge(metrics)[str(Check.DEVICE_PLUGIN_NOT_ON_SPOT)] == 0,
            timeout=10,
            what="the device plugin fixed",
        )
        assert gauge(metrics)[str(Check.GPUS_NOT_ADVERTISED)] == 0  # its GPUs came
        agent = cluster.store.get(R.DAEMONSETS, *AGENT)
        assert agent is not None
        broken_agent = agent["spec"]["template"]["spec"]["tolerations"]
        set_tolerations(cluster, AGENT, [*broken_agent, *fixed[-1:]])
        await wait_for(lambda: gauge(metrics)[str(Check.AGENT_NOT_ON_SPOT)] == 0, timeout=10)
        set_tolerations(cluster, AGENT, broken_agent)  # broken again: said again
        await wait_for(
            lambda: warnings(cluster).count(broken[1]) == 2, timeout=10, what="said again"
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await client.close()
        await cluster.stop()
    assert set(gauge(metrics)) == {str(check) for check in Check}  # every check exported

"""An emulated AKS GPU cluster with the real agent and controller processes, for end-to-end tests.

The cluster emulator runs in the test's event loop (real time); `rebalancer agent` (one per spot
node) and `rebalancer controller` run as subprocesses against it, as they would in a cluster.
A sampler records the lowest Ready count of each watched workload, which is what users feel.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources as package_resources
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from rebalancer import names
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.measure import ReadyDeficit
from rebalancer_sim.scenario import parse_scenario
from tests.helpers import free_port

SPOT_TOLERATIONS = ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule", "sku=gpu:NoSchedule"]

BASE_SCENARIO: dict[str, Any] = {
    "name": "e2e",
    "cluster": {"name": "e2e", "region": "eastus"},
    "settings": {"nodeDeleteDelaySeconds": 2, "shutdownSeconds": 0.5, "nodeAutoDrain": False},
    "pools": [
        {"name": "system", "priority": "regular", "mode": "system", "vmSize": "Standard_D4s_v5",
         "zones": ["1"], "cpu": 4, "memory": "16Gi", "gpus": 0, "count": 1},
        {"name": "gpuspot", "priority": "spot", "vmSize": "Standard_NC24ads_A100_v4",
         "zones": ["1"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 3},
        {"name": "gpuondemand", "priority": "regular", "vmSize": "Standard_NC24ads_A100_v4",
         "zones": ["1"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 2},
    ],
    "workloads": [
        {"name": "llm", "namespace": "inference", "replicas": 3,
         "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
         "tolerations": SPOT_TOLERATIONS, "preferSpot": 100, "startupSeconds": 3,
         "terminationGracePeriodSeconds": 10, "pdb": {"maxUnavailable": 1}},
    ],
}  # fmt: skip


def shipped(name: str, **settings: Any) -> dict[str, Any]:
    """A shipped scenario (sim/rebalancer_sim/scenarios) as data, without its timeline (the
    test schedules the events once its processes run), with these settings changed."""
    resource = package_resources.files("rebalancer_sim") / "scenarios" / f"{name}.yaml"
    data: dict[str, Any] = yaml.safe_load(resource.read_text())
    data["timeline"] = []
    data["settings"] = {**(data.get("settings") or {}), **settings}
    return data


def workload(data: dict[str, Any], name: str = "llm") -> dict[str, Any]:
    return next(w for w in data["workloads"] if w["name"] == name)


def pool(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in data["pools"] if p["name"] == name)


def scenario(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_SCENARIO)
    data.update(changes)
    return data


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or []
    )


@dataclass
class ProcessRig:
    """The real agent and controller processes, and what a test observes of them; the cluster
    they run against (the emulator here, a real control plane in tests/k8s) is a subclass's."""

    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    min_ready: dict[tuple[str, str], int] = field(default_factory=dict)
    max_replicas: dict[tuple[str, str], int] = field(default_factory=dict)  # spec.replicas
    # Ready replica-seconds short of the count at the start of sampling (measure.ReadyDeficit).
    deficit: dict[tuple[str, str], ReadyDeficit] = field(default_factory=dict)
    watched: list[tuple[str, str]] = field(default_factory=list)
    # How a process starts: the checkout's code; tests/release runs a released wheel's entry point.
    command: tuple[str, ...] = (sys.executable, "-m", "rebalancer.cli")

    # ---- what a subclass provides ------------------------------------------------------------

    def now(self) -> float:
        """Seconds on the clock the cluster and the processes run on (here: real time)."""
        return time.monotonic()

    def wall(self) -> float:
        """The cluster's wall clock (a notice's deadline is on it), in seconds since the epoch."""
        return time.time()

    def running_names(self) -> list[str]:
        """The agents and controllers running now, by name."""
        return list(self.processes)

    def check_running(self) -> None:
        """Fail at once, with its log, when a process has exited."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(
                    f"{name} exited ({process.returncode}):\n{self.log(name)[-3000:]}"
                )

    def process_env(self, component: str) -> dict[str, str]:
        """REBALANCER_KUBECONFIG and the like for `agent` or `controller`."""
        raise NotImplementedError

    def imds_url_for(self, node_name: str) -> str:
        raise NotImplementedError

    def node(self, name: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def pool_nodes(self, pool: str) -> list[str]:
        """The names of a node pool's nodes, sorted."""
        raise NotImplementedError

    def spot_nodes(self) -> list[str]:
        return self.pool_nodes("gpuspot")

    def pods(self, namespace: str = "inference") -> list[dict[str, Any]]:
        """The pods of a namespace that are not being deleted."""
        raise NotImplementedError

    def deployment(self, name: str = "llm", namespace: str = "inference") -> dict[str, Any]:
        raise NotImplementedError

    # ---- processes ---------------------------------------------------------------------------

    def spawn(self, name: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        port = free_port()
        self.ports[name] = port
        log = (self.workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [*self.command, *args],
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",  # the log is read while the process runs
                "REBALANCER_LOG_FORMAT": "json",
                **self.process_env(args[0]),
                "REBALANCER_HTTP_HOST": "127.0.0.1",
                "REBALANCER_HTTP_PORT": str(port),
                **env,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes[name] = process
        return process

    def start_agent(self, node_name: str, **env: str) -> None:
        self.spawn(
            f"agent-{node_name}",
            ["agent"],
            NODE_NAME=node_name,
            REBALANCER_IMDS_URL=self.imds_url_for(node_name),
            **env,
        )

    def start_agents(self, pool: str = "gpuspot", **env: str) -> None:
        for node_name in self.pool_nodes(pool):
            self.start_agent(node_name, **env)

    def start_controller(self, name: str = "controller-0", **env: str) -> None:
        self.spawn(name, ["controller"], REBALANCER_IDENTITY=name, **env)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        process.send_signal(sig)
        try:
            process.wait(timeout=20)  # the controller's own bound is 12 s
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    async def metrics(self, name: str) -> str:
        """The component's /metrics page."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.ports[name]}/metrics") as response,
        ):
            return await response.text()

    async def metric(self, name: str, sample: str) -> float:
        """The value of one sample line (`name{labels}`), summed over matching lines; 0 if none."""
        total = 0.0
        for line in (await self.metrics(name)).splitlines():
            if line.startswith(sample):
                total += float(line.rsplit(" ", 1)[1])
        return total

    # ---- cluster state -----------------------------------------------------------------------

    def writable_state(self, pools: tuple[str, ...] = ("gpuspot", "gpuondemand")) -> Any:
        """What the controller could write, as data to compare before and after: the nodes'
        labels, annotations and spec (taints, cordon), the Deployment's annotations and spec,
        each pod's node and annotations (deletion cost), the PDBs it would see. Status is left
        out: kubelets and the node-problem-detector write it, not the controller."""
        nodes = {}
        for pool in pools:
            for name in self.pool_nodes(pool):
                node = self.node(name) or {"metadata": {}}
                meta = node["metadata"]
                nodes[name] = (meta.get("labels"), meta.get("annotations"), node.get("spec"))
        deployment = self.deployment()
        pods = {
            p["metadata"]["name"]: (p["spec"].get("nodeName"), p["metadata"].get("annotations"))
            for p in self.pods()
        }
        return copy.deepcopy(
            {
                "nodes": nodes,
                "deployment": (deployment["metadata"].get("annotations"), deployment["spec"]),
                "pods": pods,
            }
        )

    def ready_count(self, namespace: str = "inference", prefix: str = "llm") -> int:
        return sum(
            1 for p in self.pods(namespace) if p["metadata"]["name"].startswith(prefix) and ready(p)
        )

    def drained_for(self, node_name: str) -> str:
        """The event ID the controller marked the node drained for ("" if none yet)."""
        node = self.node(node_name)
        return (
            ""
            if node is None
            else node["metadata"].get("annotations", {}).get(names.DRAINED_FOR_ANNOTATION, "")
        )

    def pool_of(self, node_name: str) -> str:
        node = self.node(node_name)
        return "" if node is None else node["metadata"]["labels"][names.AKS_AGENTPOOL_LABEL]

    async def wait_for(self, predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
        deadline = self.now() + timeout
        while True:
            result = predicate()
            if result:
                return result
            self.check_running()
            if self.now() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.05)

    async def until_ready(self, replicas: int = 3, namespace: str = "inference") -> None:
        """The llm replicas Ready, every agent reporting, every controller synced."""
        await self.wait_for(
            lambda: self.ready_count(namespace) >= replicas,
            timeout=30,
            what=f"{replicas} Ready replicas",
        )

        def agents_report() -> bool:
            for node_name in self.spot_nodes():
                if f"agent-{node_name}" not in self.running_names():
                    continue
                node = self.node(node_name) or {"status": {}}
                types = {c["type"] for c in node["status"].get("conditions") or []}
                if names.CONDITION_TYPE not in types:
                    return False
            return True

        await self.wait_for(agents_report, timeout=30, what="the agents to report")
        for name in [n for n in self.running_names() if n.startswith("controller")]:
            await self.wait_for_metric(name, "rebalancer_controller_cache_synced", 1, timeout=30)

    async def wait_for_metric(
        self, process: str, sample: str, at_least: float, *, timeout: float
    ) -> None:
        deadline = self.now() + timeout
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                if await self.metric(process, sample) >= at_least:
                    return
            self.check_running()
            if self.now() > deadline:
                raise AssertionError(f"{process}: {sample} never reached {at_least}")
            await asyncio.sleep(0.1)

    async def more_passes(self, process: str, passes: int, *, timeout: float = 15) -> None:
        """Wait until the controller has planned `passes` more times: each was a chance to act,
        so what did not happen by then was decided against (a pass runs at least every
        `resync_seconds`)."""
        sample = "rebalancer_controller_reconcile_duration_seconds_count"
        start = await self.metric(process, sample)
        await self.wait_for_metric(process, sample, start + passes, timeout=timeout)

    async def wait_for_leader(self, candidates: list[str], *, timeout: float = 15) -> str:
        """The one controller process that reports itself the leader."""
        deadline = self.now() + timeout
        while self.now() < deadline:
            for name in candidates:
                with contextlib.suppress(aiohttp.ClientError):
                    if (
                        name in self.running_names()
                        and await self.metric(name, "rebalancer_controller_leader") == 1
                    ):
                        return name
            await asyncio.sleep(0.1)
        raise AssertionError(f"none of {candidates} became the leader within {timeout}s")

    async def sample(self) -> None:
        """Track the lowest Ready count and the highest replica count (of a Deployment: a
        second surge shows there, even when a killed leader never wrote its Event) of each
        watched workload, every 20 ms."""
        while True:
            for namespace, prefix in self.watched:
                count = self.ready_count(namespace, prefix)
                key = (namespace, prefix)
                self.min_ready[key] = min(self.min_ready.get(key, count), count)
                self.deficit.setdefault(key, ReadyDeficit(baseline=count)).sample(self.now(), count)
                with contextlib.suppress(KeyError, AssertionError):  # not a Deployment
                    replicas = int(self.deployment(prefix, namespace)["spec"]["replicas"])
                    self.max_replicas[key] = max(self.max_replicas.get(key, replicas), replicas)
            await asyncio.sleep(0.02)


@dataclass
class Rig(ProcessRig):
    """The cluster emulator, in the test's event loop."""

    cluster: ClusterEmulator = field(kw_only=True)

    def process_env(self, component: str) -> dict[str, str]:
        env = {"REBALANCER_KUBECONFIG": str(self.cluster.kubeconfig_path)}
        if component == "controller":
            env["REBALANCER_NAMESPACE"] = "default"
        return env

    def imds_url_for(self, node_name: str) -> str:
        return self.cluster.imds_url_for(node_name)

    def node(self, name: str) -> dict[str, Any] | None:
        return self.cluster.store.get(R.NODES, "", name)

    def pool_nodes(self, pool: str) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.cluster.nodes(pool))

    def pods(self, namespace: str = "inference") -> list[dict[str, Any]]:
        return [
            p
            for p in self.cluster.pods(namespace)
            if p["metadata"].get("deletionTimestamp") is None
        ]

    def deployment(self, name: str = "llm", namespace: str = "inference") -> dict[str, Any]:
        deployment = self.cluster.store.get(R.DEPLOYMENTS, namespace, name)
        assert deployment is not None
        return deployment

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.cluster.store.items(R.EVENTS) if e.get("reason") == reason]

    def register_webhook(self, port: int, **changes: Any) -> dict[str, Any]:
        """Have the emulated API server call a controller's placement webhook on
        127.0.0.1:`port` (its REBALANCER_WEBHOOK_PORT): see `register_placement_webhook`."""
        return register_placement_webhook(self.cluster, port=port, **changes)

    def npd_preemption(self, node_name: str, event_id: str, not_before: str) -> None:
        """Write the condition AKS's node-problem-detector would write for a Preempt."""
        node = copy.deepcopy(self.node(node_name))
        assert node is not None
        node["status"]["conditions"] = npd_conditions(
            node["status"]["conditions"], event_id, not_before
        )
        self.cluster.store.update(R.NODES, node)


def register_placement_webhook(
    cluster: ClusterEmulator,
    *,
    port: int,
    ca_bundle: bytes | None = None,
    namespace: str = "default",
    service: str = "spot-rebalancer-webhook",
    configuration: str = "spot-rebalancer",
    **changes: Any,
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration (templates/controller/webhook.yaml), for a
    webhook served on 127.0.0.1:`port`: its Service `<namespace>/<service>:443` is mapped there
    (cluster.admission.webhook_services), and its certificate must be valid for
    `<service>.<namespace>.svc`. The names are the controller's defaults
    (REBALANCER_WEBHOOK_SERVICE, REBALANCER_WEBHOOK_CONFIGURATION; the rig's controllers run in
    `default`). Without `ca_bundle` the configuration has none until the controller puts its CA
    in, as it does in a cluster; until then calls fail TLS and the pods go unchanged
    (failurePolicy Ignore). `changes`: other arguments of `Admission.register`."""
    arguments: dict[str, Any] = {
        "webhook": "placement.spot-rebalancer.io",
        "path": "/mutate-pods",
        "failure_policy": "Ignore",
        "timeout_seconds": 2,
        "scope": "Namespaced",
        "object_selector": {"matchLabels": {"spot-rebalancer.io/placement": "enabled"}},
        "namespace_selector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [namespace, "kube-system"],
                }
            ]
        },
        **changes,
    }
    return cluster.admission.register(
        configuration,
        address=f"127.0.0.1:{port}",
        ca_bundle=ca_bundle,
        service=f"{namespace}/{service}:443",
        **arguments,
    )


def npd_conditions(
    conditions: list[dict[str, Any]], event_id: str, not_before: str
) -> list[dict[str, Any]]:
    """A node's conditions plus the one AKS's node-problem-detector writes for a Preempt."""
    message = (
        f"Preempt Scheduled: {not_before}. For more information, see "
        f"https://aka.ms/aks/scheduledevents. EventId: {event_id}"
    )
    return [c for c in conditions if c["type"] != "PreemptionScheduled"] + [
        {
            "type": "PreemptionScheduled",
            "status": "True",
            "reason": "SpotEvictionIncoming",
            "message": message,
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    data: dict[str, Any] | None = None,
    *,
    prepare: Callable[[ClusterEmulator], None] | None = None,
) -> AsyncIterator[Rig]:
    cluster = ClusterEmulator(parse_scenario(data or scenario()), tick_seconds=0.05)
    if prepare is not None:
        prepare(cluster)
    await cluster.start(kubeconfig_dir=tmp_path)
    rig = Rig(workdir=tmp_path, cluster=cluster)
    try:
        yield rig
    finally:
        rig.stop_all()
        await cluster.stop()


@contextlib.asynccontextmanager
async def sampling(rig: ProcessRig, *workloads: tuple[str, str]) -> AsyncIterator[None]:
    rig.watched = list(workloads) or [("inference", "llm")]
    rig.min_ready.clear()
    rig.max_replicas.clear()
    rig.deficit.clear()
    task = asyncio.create_task(rig.sample())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for key, deficit in rig.deficit.items():  # up to the end of sampling
            deficit.sample(rig.now(), rig.ready_count(*key))

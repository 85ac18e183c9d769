"""The real agent and controller processes on a real control plane (tests/cluster/).

What differs from tests/e2e/rig.py, which runs the same processes on the cluster emulator:
- the processes authenticate with the chart's ServiceAccounts (tokens) under the chart's RBAC,
  with the environment the chart's DaemonSet and Deployment give them;
- kube-controller-manager's ReplicaSet and disruption controllers, kube-scheduler and kwok's fake
  kubelets do what the emulator's stand-ins do there;
- Azure is played by the test: the IMDS emulator for the agents, and a "cloud" that, at an
  event's NotBefore, deletes the VM's pods and its Node, as a spot eviction ends.

The test observes the cluster through watches (`Mirror`), so its predicates stay synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from rebalancer import names
from rebalancer.agent.vm_name import vm_name_from_provider_id
from rebalancer_sim.imds import EmulatedEvent, ImdsEmulator
from tests.chart.generated import CHART, helm_environment
from tests.controlplane import ControlPlane
from tests.e2e.rig import ProcessRig, npd_conditions
from tests.helpers import serve

RELEASE = "sr"
RELEASE_NAMESPACE = "spot-rebalancer"
SPOT_POOL = "gpuspot"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Conditions kwok keeps on its nodes; any other (ours, AKS's NPD) is a test's and is removed.
KWOK_CONDITIONS = {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}
# The conditions a kubelet posts (the node lifecycle controller sets them Unknown when it stops).
KUBELET_CONDITIONS = {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
# kwok leaves the status of a Node with this annotation alone (start.sh's
# --disregard-status-with-annotation-selector kwok.x-k8s.io/status=custom).
KWOK_STATUS = "kwok.x-k8s.io/status"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status = status


@dataclass
class AdminApi:
    """Plain HTTP to the API server as the cluster admin: setup and observation only."""

    session: aiohttp.ClientSession
    server: str

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        async with self.session.request(
            method,
            self.server + path,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            params=params,
        ) as response:
            text = await response.text()
            if response.status >= 400:
                raise ApiError(response.status, text)
            return json.loads(text) if text else None

    async def update(self, path: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Read, change, write back with the read's resourceVersion; again on a conflict (kwok
        writes node status and leases all the time)."""
        for _ in range(20):
            obj = await self.request("GET", path)
            before = copy.deepcopy(obj)
            change(obj)
            if obj == before:
                return
            try:
                await self.request("PUT", path, obj)
                return
            except ApiError as error:
                if error.status != 409:
                    raise
        raise AssertionError(f"{path}: still conflicting after 20 attempts")

    async def absent(self, path: str) -> None:
        """DELETE, where gone already is fine."""
        with contextlib.suppress(ApiError):
            await self.request("DELETE", path, {"gracePeriodSeconds": 0})


@dataclass
class Mirror:
    """The objects of one list path, kept current by a watch (re-listed when it fails)."""

    api: AdminApi
    path: str
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    # The last state of each object deleted while watched (a pod's annotations as it went).
    gone: dict[str, dict[str, Any]] = field(default_factory=dict)

    @staticmethod
    def key(obj: dict[str, Any]) -> str:
        return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"

    async def run(self) -> None:
        while True:
            try:
                listing = await self.api.request("GET", self.path)
                self.items = {self.key(o): o for o in listing["items"]}
                self.synced.set()
                await self._watch(listing["metadata"]["resourceVersion"])
            except (aiohttp.ClientError, ApiError, ValueError):
                await asyncio.sleep(0.2)

    async def _watch(self, version: str) -> None:
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true"}
        async with self.api.session.get(self.api.server + self.path, params=params) as response:
            if response.status != 200:
                return
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip() and not self._apply(json.loads(line)):
                        return

    def _apply(self, event: dict[str, Any]) -> bool:
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":  # 410 Gone and the like: list again
            return False
        if kind == "DELETED":
            self.items.pop(self.key(obj), None)
            self.gone[self.key(obj)] = obj
        elif kind in ("ADDED", "MODIFIED"):
            self.items[self.key(obj)] = obj
        return True


@dataclass
class ChartRbac:
    """The chart's ServiceAccounts and RBAC, applied once; what its pods would run with."""

    kubeconfigs: dict[str, Path]  # component -> a token kubeconfig of its ServiceAccount
    env: dict[str, dict[str, str]]  # component -> the plain env of its chart container
    objects: list[dict[str, Any]]  # the whole rendering (default values)


def render_chart(*values: str) -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them, with these `--set` values."""
    tools = helm_environment()
    sets = [arg for value in values for arg in ("--set", value)]
    rendered = subprocess.run(
        [tools["HELM4"], "template", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, *sets],
        capture_output=True,
        text=True,
        check=True,
        env=tools,
    ).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def apply_chart_rbac(plane: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """Apply the ServiceAccounts, (Cluster)Roles and bindings of a rendering, nothing else (the
    workloads themselves run here as host processes)."""
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    plane.kubectl("apply", "-n", RELEASE_NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(rbac))


def container_env(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Component -> the plain env of its chart container (DaemonSet, Deployment)."""
    env: dict[str, dict[str, str]] = {}
    for obj in objects:
        if obj["kind"] in ("DaemonSet", "Deployment"):
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            (container,) = obj["spec"]["template"]["spec"]["containers"]
            env[component] = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return env


def install_chart_rbac(plane: ControlPlane, workdir: Path) -> ChartRbac:
    """`helm template` the chart with its default values; apply its RBAC; mint a token for each
    component."""
    objects = render_chart()
    plane.kubectl("create", "namespace", RELEASE_NAMESPACE)
    apply_chart_rbac(plane, objects)
    kubeconfigs: dict[str, Path] = {}
    for obj in objects:
        if obj["kind"] == "ServiceAccount":
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            kubeconfigs[component] = plane.token_kubeconfig(
                workdir / f"{component}.kubeconfig", RELEASE_NAMESPACE, obj["metadata"]["name"]
            )
    env = container_env(objects)
    assert set(kubeconfigs) == set(env) == {"agent", "controller"}, (kubeconfigs, env)
    return ChartRbac(kubeconfigs=kubeconfigs, env=env, objects=objects)


@dataclass
class KubeRig(ProcessRig):
    plane: ControlPlane = field(kw_only=True)
    api: AdminApi = field(kw_only=True)
    chart: ChartRbac = field(kw_only=True)
    imds: ImdsEmulator = field(kw_only=True)
    imds_url: str = field(kw_only=True)
    nodes: Mirror = field(kw_only=True)
    namespaced: dict[str, Mirror] = field(kw_only=True)  # pods, deployments, events
    evictions: list[asyncio.Task[None]] = field(default_factory=list)
    refusals_expected: bool = False  # only the test that proves refusals are caught sets it

    # ---- ProcessRig --------------------------------------------------------------------------

    def process_env(self, component: str) -> dict[str, str]:
        env = {
            **self.chart.env[component],
            "REBALANCER_KUBECONFIG": str(self.chart.kubeconfigs[component]),
        }
        if component == "controller":  # the downward API's, unless the test resolved it
            env.setdefault("POD_NAMESPACE", RELEASE_NAMESPACE)
        return env

    def imds_url_for(self, node_name: str) -> str:
        return f"{self.imds_url}/vms/{self.vm_name(node_name)}"

    def node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.items.get(f"/{name}")

    def pool_nodes(self, pool: str) -> list[str]:
        return sorted(
            n["metadata"]["name"]
            for n in self.nodes.items.values()
            if n["metadata"]["labels"].get(names.AKS_AGENTPOOL_LABEL) == pool
        )

    def pods(self, namespace: str = "inference") -> list[dict[str, Any]]:
        """Live pods: not being deleted, and on a node that still exists (the pods of a deleted
        node linger until the pod garbage collector's 40 s quarantine ends)."""
        return [
            p
            for p in self.namespaced["pods"].items.values()
            if p["metadata"]["namespace"] == namespace
            and p["metadata"].get("deletionTimestamp") is None
            and (not p["spec"].get("nodeName") or self.node(p["spec"]["nodeName"]) is not None)
        ]

    # ---- cluster state -----------------------------------------------------------------------

    def deployment(self, name: str = "llm", namespace: str = "inference") -> dict[str, Any]:
        return self.namespaced["deployments"].items[f"{namespace}/{name}"]

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.namespaced["events"].items.values() if e.get("reason") == reason]

    def vm_name(self, node_name: str) -> str:
        node = self.node(node_name)
        assert node is not None, node_name
        vm = vm_name_from_provider_id(node["spec"]["providerID"])
        assert vm is not None
        return vm

    def forbidden(self) -> list[str]:
        """Log lines of the processes that show an API call refused (403) under the chart's RBAC."""
        return [
            line
            for path in sorted(self.workdir.glob("*.log"))
            for line in path.read_text(errors="replace").splitlines()
            if "HTTP 403" in line or '"forbidden"' in line
        ]

    # ---- what Azure does ---------------------------------------------------------------------

    def preempt(self, node_name: str, notice_seconds: float = 30.0) -> EmulatedEvent:
        """A spot eviction: IMDS announces it; when it starts (at NotBefore, or earlier when the
        agent acknowledges it, as Azure then expedites it) the VM, its pods and its Node go."""
        event = self.imds.schedule(
            "Preempt", [self.vm_name(node_name)], notice_seconds=notice_seconds
        )
        self.evictions.append(asyncio.create_task(self._evict_when_started(node_name, event)))
        return event

    async def _until_not(self, event: EmulatedEvent, state: str) -> str:
        """Wait until the event leaves `state`; its new state."""
        while (now_state := event.state(self.imds.clock.now())) == state:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the IMDS emulator keeps no callbacks: poll its clock
        return now_state

    async def _evict_when_started(self, node_name: str, event: EmulatedEvent) -> None:
        if await self._until_not(event, "scheduled") == "cancelled":
            return
        self.imds.remove_vm(self.vm_name(node_name))
        pods = await self.api.request(
            "GET", "/api/v1/pods", params={"fieldSelector": f"spec.nodeName={node_name}"}
        )
        for pod in pods["items"]:
            meta = pod["metadata"]
            await self.api.absent(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        await self.api.absent(f"/api/v1/nodes/{node_name}")

    def redeploy(
        self, node_name: str, *, notice_seconds: float, down_seconds: float
    ) -> EmulatedEvent:
        """Azure moves the VM to another host: IMDS announces a Redeploy; when it starts (at
        NotBefore, or when the agent acknowledges it) the VM is off for `down_seconds`, its
        agent with it, while Azure keeps the event Started; then the event is gone and the VM
        is back on its new host, with the same name and the same Node."""
        event = self.imds.schedule(
            "Redeploy",
            [self.vm_name(node_name)],
            notice_seconds=notice_seconds,
            started_seconds=down_seconds,
        )
        self.evictions.append(asyncio.create_task(self._restart_when_started(node_name, event)))
        return event

    async def _restart_when_started(self, node_name: str, event: EmulatedEvent) -> None:
        if await self._until_not(event, "scheduled") == "cancelled":
            return
        agent = f"agent-{node_name}"
        had_agent = agent in self.processes
        if had_agent:
            self.stop(agent)  # the guest shuts down: its containers get SIGTERM
        await self.vm_off(node_name)
        await self._until_not(event, "started")
        await self.vm_on(node_name)
        if had_agent:
            self.start_agent(node_name)  # the DaemonSet's pod starts again with the VM

    async def vm_off(self, node_name: str) -> None:
        """What the cluster sees of a VM that is off: kwok stops keeping its Node (the
        annotation start.sh's --disregard-status-with-annotation-selector matches) and its
        conditions go Unknown, as the node lifecycle controller writes them once the kubelet
        stops posting (at once here, not after its 40 s grace period)."""

        def disregarded(node: dict[str, Any]) -> None:
            node["metadata"].setdefault("annotations", {})[KWOK_STATUS] = "custom"

        def silent(node: dict[str, Any]) -> None:
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for condition in node["status"].get("conditions") or []:
                if condition["type"] in KUBELET_CONDITIONS:
                    condition.update(
                        status="Unknown",
                        reason="NodeStatusUnknown",
                        message="Kubelet stopped posting node status.",
                        lastTransitionTime=now,
                    )

        await self.api.update(f"/api/v1/nodes/{node_name}", disregarded)
        await self.api.update(f"/api/v1/nodes/{node_name}/status", silent)

    async def vm_on(self, node_name: str) -> None:
        """The VM runs again: kwok keeps the Node once more (Ready at once), and the node
        lifecycle controller lifts its unreachable taints."""

        def regarded(node: dict[str, Any]) -> None:
            node["metadata"].get("annotations", {}).pop(KWOK_STATUS, None)

        await self.api.update(f"/api/v1/nodes/{node_name}", regarded)
        await self.wait_for(
            lambda: schedulable(self.node(node_name)), timeout=30, what=f"{node_name} back"
        )

    def cancel(self, event: EmulatedEvent) -> None:
        assert self.imds.cancel(event.event_id), "only a Scheduled event can be cancelled"

    async def add_node(
        self, pool: str, index: int, *, zone: str | None = None, cordoned: bool = False
    ) -> str:
        """A new VM in a pool (spot capacity is back, or a scale-up): a Node kwok makes Ready,
        shaped as start.sh shaped the pool's first node; in `zone` (else the first node's), and
        cordoned if asked (so that pods land on several new nodes at once when uncordoned)."""
        template = next(
            n
            for n in self.plane.nodes()
            if n["metadata"]["labels"][names.AKS_AGENTPOOL_LABEL] == pool
        )
        node = copy.deepcopy(template)
        name = f"{node['metadata']['name'][: -len('000000')]}{index:06d}"
        node["metadata"]["name"] = name
        labels = node["metadata"]["labels"]
        labels["kubernetes.io/hostname"] = name
        if zone is not None:
            labels[names.ZONE_LABEL] = labels["failure-domain.beta.kubernetes.io/zone"] = zone
        if cordoned:
            node["spec"]["unschedulable"] = True
        node["spec"]["providerID"] = node["spec"]["providerID"].rsplit("/", 1)[0] + f"/{index}"
        await self.api.request("POST", "/api/v1/nodes", node)
        await self.wait_for(lambda: schedulable(self.node(name)), timeout=30, what=f"{name} Ready")
        self.imds.add_vm(self.vm_name(name))
        return name

    async def npd_preemption(self, node_name: str, event_id: str, not_before: str) -> None:
        """The condition AKS's node-problem-detector writes for a Preempt, on the node's status."""

        def add_condition(node: dict[str, Any]) -> None:
            node["status"]["conditions"] = npd_conditions(
                node["status"]["conditions"], event_id, not_before
            )

        await self.api.update(f"/api/v1/nodes/{node_name}/status", add_condition)

    # ---- workloads ---------------------------------------------------------------------------

    async def deploy(
        self,
        name: str = "llm",
        namespace: str = "inference",
        *,
        replicas: int = 3,
        startup_seconds: float = 3,
        gpus: int = 1,
        node_selector: dict[str, str] | None = None,
        pdb: dict[str, int] | None = None,
        kind: str = "Deployment",
        annotations: dict[str, str] | None = None,
        pod_labels: dict[str, str] | None = None,
        pod_annotations: dict[str, str] | None = None,
        one_per_node: bool = False,
    ) -> None:
        """An inference Deployment (or StatefulSet) as users run one on AKS spot: one GPU per
        replica, tolerating the spot and GPU taints, preferring spot nodes, a
        PodDisruptionBudget (maxUnavailable 1), and replicas that take `startup_seconds` to
        become Ready (kwok's pod-ready delay). `annotations` go on the workload (a placement
        policy), `pod_labels` on its pod template too (the webhook's object selector),
        `pod_annotations` on its pod template alone; `one_per_node`: a required pod
        anti-affinity keeps two of its replicas off one node."""
        labels = {"app": name}
        tolerations = [
            {"key": names.AKS_SPOT_LABEL, "operator": "Equal", "value": "spot",
             "effect": "NoSchedule"},
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ]  # fmt: skip
        prefer_spot = {
            "weight": 100,
            "preference": {
                "matchExpressions": [
                    {"key": names.AKS_SPOT_LABEL, "operator": "In", "values": ["spot"]}
                ]
            },
        }
        workload = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {
                        "labels": {**labels, **(pod_labels or {})},
                        "annotations": {
                            "pod-ready.stage.kwok.x-k8s.io/delay": f"{startup_seconds}s",
                            **(pod_annotations or {}),
                        },
                    },
                    "spec": {
                        "nodeSelector": node_selector or {},
                        "tolerations": tolerations,
                        "affinity": {
                            "nodeAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [prefer_spot]
                            }
                        },
                        "terminationGracePeriodSeconds": 10,
                        "containers": [
                            {
                                "name": "server",
                                "image": "vllm/vllm-openai:v0.6.3",
                                "resources": {
                                    "requests": {"cpu": "4", "memory": "32Gi"},
                                    "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                                },
                            }
                        ],
                    },
                },
            },
        }
        if one_per_node:
            affinity = workload["spec"]["template"]["spec"]["affinity"]
            affinity["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME_LABEL}
                ]
            }
        if kind == "StatefulSet":
            workload["spec"]["serviceName"] = name
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {**(pdb or {"maxUnavailable": 1}), "selector": {"matchLabels": labels}},
        }
        await self.api.request(
            "POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", budget
        )
        await self.api.request(
            "POST", f"/apis/apps/v1/namespaces/{namespace}/{kind.lower()}s", workload
        )


def schedulable(node: dict[str, Any] | None) -> bool:
    """Ready, and the node lifecycle controller's not-ready and unreachable taints lifted."""
    if node is None:
        return False
    conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
    taints = {t["key"] for t in node["spec"].get("taints") or []}
    return conditions.get("Ready") == "True" and not taints & {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }


async def reset_nodes(api: AdminApi, plane: ControlPlane) -> None:
    """Put the AKS-shaped nodes back as start.sh made them: re-create the deleted ones, drop the
    ones a test added, and undo cordons, taints, labels, annotations and conditions."""
    original = {n["metadata"]["name"]: n for n in plane.nodes()}
    current = {
        n["metadata"]["name"]: n for n in (await api.request("GET", "/api/v1/nodes"))["items"]
    }
    for name in current.keys() - original.keys():
        await api.absent(f"/api/v1/nodes/{name}")
    for name, want in original.items():
        if name not in current:
            await api.request("POST", "/api/v1/nodes", want)
            continue

        def restore(node: dict[str, Any], want: dict[str, Any] = want) -> None:
            node["metadata"]["labels"] = want["metadata"]["labels"]
            node["metadata"]["annotations"] = want["metadata"]["annotations"]
            node["spec"]["taints"] = want["spec"]["taints"]
            node["spec"].pop("unschedulable", None)

        def kwok_conditions_only(node: dict[str, Any]) -> None:
            node["status"]["conditions"] = [
                c for c in node["status"].get("conditions") or [] if c["type"] in KWOK_CONDITIONS
            ]

        await api.update(f"/api/v1/nodes/{name}", restore)
        await api.update(f"/api/v1/nodes/{name}/status", kwok_conditions_only)
    for _ in range(240):
        nodes = (await api.request("GET", "/api/v1/nodes"))["items"]
        if len(nodes) == len(original) and all(schedulable(n) for n in nodes):
            return
        await asyncio.sleep(0.25)
    raise AssertionError("the nodes did not come back Ready and untainted within 60 s")


@contextlib.asynccontextmanager
async def kube_rig(
    plane: ControlPlane, chart: ChartRbac, workdir: Path, namespace: str = "inference"
) -> AsyncIterator[KubeRig]:
    """A clean cluster for one test: nodes reset, no Lease and no eviction history, a fresh
    workload namespace; the
    nodes are reset again afterwards, for the conformance tests (tests/sim) that share them."""
    connector = aiohttp.TCPConnector(ssl=plane.ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        api = AdminApi(session, plane.server)
        await reset_nodes(api, plane)
        await api.absent(
            f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases/"
            "spot-rebalancer-controller"
        )
        # The eviction history outlives a leader on purpose; a test starts without the last's.
        await api.absent(
            f"/api/v1/namespaces/{RELEASE_NAMESPACE}/configmaps/spot-rebalancer-controller-history"
        )
        # Node Events live in "default" and outlive a test: start without the last test's.
        await api.request("DELETE", "/api/v1/namespaces/default/events")
        await _fresh_namespace(api, namespace)
        mirrors = {
            "pods": Mirror(api, f"/api/v1/namespaces/{namespace}/pods"),
            "deployments": Mirror(api, f"/apis/apps/v1/namespaces/{namespace}/deployments"),
            "events": Mirror(api, "/api/v1/events"),
        }
        nodes = Mirror(api, "/api/v1/nodes")
        tasks = [asyncio.create_task(m.run()) for m in [nodes, *mirrors.values()]]
        imds = ImdsEmulator()
        try:
            async with serve(imds.app()) as imds_url:
                for m in [nodes, *mirrors.values()]:
                    await asyncio.wait_for(m.synced.wait(), timeout=10)
                rig = KubeRig(
                    workdir=workdir,
                    plane=plane,
                    api=api,
                    chart=chart,
                    imds=imds,
                    imds_url=imds_url,
                    nodes=nodes,
                    namespaced=mirrors,
                )
                for node_name in rig.spot_nodes():
                    imds.add_vm(rig.vm_name(node_name))
                try:
                    yield rig
                finally:
                    rig.stop_all()
                    for task in rig.evictions:
                        task.cancel()
                    await asyncio.gather(*rig.evictions, return_exceptions=True)
                forbidden = rig.forbidden()
                assert rig.refusals_expected or not forbidden, (
                    f"the chart's RBAC refused calls: {forbidden}"
                )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _empty_namespace(api, namespace)
            await reset_nodes(api, plane)  # the session's other tests share these nodes


# Workloads first, so that no controller makes new pods while the rest goes.
WORKLOADS = ("deployments", "statefulsets", "replicasets", "daemonsets")


async def _fresh_namespace(api: AdminApi, namespace: str) -> None:
    """The workload namespace, empty: made once, emptied between tests (`_empty_namespace`)."""
    try:
        await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    except ApiError as error:
        if error.status != 409:
            raise
    await _empty_namespace(api, namespace)


async def _empty_namespace(api: AdminApi, namespace: str) -> None:
    """Delete everything in the namespace but its service accounts (pods need the default one),
    pods without grace (kwok's nodes run nothing to stop), and keep the namespace itself: the
    namespace controller starts deleting one only 5 s after the request (for HA API servers),
    and then waits about half the grace period of pods still terminating: 10 s of every test's
    teardown, a third of the tier's time, went there."""
    paths = await _namespaced_collections(api, namespace)
    for _ in range(20):
        for path in sorted(paths, key=lambda p: p.rsplit("/", 1)[1] not in WORKLOADS):
            await api.request("DELETE", path, params={"gracePeriodSeconds": "0"})
        left = [
            item["metadata"]["name"]
            for kind in (*WORKLOADS, "pods")
            for item in (await api.request("GET", _collection(paths, kind)))["items"]
        ]
        if not left:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"namespace {namespace} still holds {left} after 20 rounds of deletes")


def _collection(paths: list[str], kind: str) -> str:
    return next(p for p in paths if p.rsplit("/", 1)[1] == kind)


_COLLECTIONS: dict[str, list[str]] = {}


async def _namespaced_collections(api: AdminApi, namespace: str) -> list[str]:
    """Every namespaced resource of the API server (its discovery, as the namespace controller
    reads it) that can be deleted as a collection, as paths in `namespace`; once per server."""
    if api.server not in _COLLECTIONS:
        versions = ["/api/v1"] + [
            f"/apis/{group['preferredVersion']['groupVersion']}"
            for group in (await api.request("GET", "/apis"))["groups"]
        ]
        paths = []
        for version in versions:
            for resource in (await api.request("GET", version))["resources"]:
                if (
                    resource["namespaced"]
                    and "/" not in resource["name"]
                    and {"list", "deletecollection"} <= set(resource["verbs"])
                    and resource["name"] != "serviceaccounts"
                ):
                    paths.append(f"{version}/namespaces/{{namespace}}/{resource['name']}")
        _COLLECTIONS[api.server] = paths
    return [p.format(namespace=namespace) for p in _COLLECTIONS[api.server]]

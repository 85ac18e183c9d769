"""`ClusterEmulator`: one emulated AKS cluster — API server, controllers, VMs, IMDS, timeline.

Typical use (tests, the demo, benchmarks)::

    cluster = ClusterEmulator(load_scenario("aks-gpu-small"), clock=clock)
    urls = await cluster.start()            # API server + IMDS on 127.0.0.1, ephemeral ports
    client = await KubeClient.connect(str(urls.kubeconfig))
    event = cluster.preempt(node_name, notice_seconds=30)
    await cluster.wait_for(lambda: cluster.store.get(NODES, "", node_name) is None)
    await cluster.stop()

Control loops run in `step()`: the timeline, the cloud, the scheduler, kubelets, the node
lifecycle, workload and disruption controllers, garbage collection, the autoscaler, AKS node
auto-drain, KEDA's ScaledObject controller, HorizontalPodAutoscalers and the owners that reset
replicas, repeated until nothing changes at this instant. `start()` also runs `step()` every
`tick_seconds` of real time; under a `ManualClock` call `advance(seconds)` to move virtual time
and step through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from rebalancer.clock import Clock, ManualClock, SystemClock
from rebalancer_sim import resources as R
from rebalancer_sim.admission import Admission
from rebalancer_sim.apiserver import ApiServer
from rebalancer_sim.autodrain import NodeAutoDrain
from rebalancer_sim.capacity import Autoscaler
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.deviceplugin import DevicePlugins
from rebalancer_sim.disruption import DisruptionController
from rebalancer_sim.garbage import GarbageCollector
from rebalancer_sim.hpa import HorizontalPodAutoscalers
from rebalancer_sim.imds import EmulatedEvent, ImdsEmulator
from rebalancer_sim.karpenter import Karpenter
from rebalancer_sim.keda import Keda
from rebalancer_sim.kubelet import Kubelets, NodeLifecycle
from rebalancer_sim.npd import CONDITION_TYPES, NodeProblemDetector
from rebalancer_sim.objects import Obj
from rebalancer_sim.scenario import LOAD_ANNOTATION, Scenario, TimelineStep, load_scenario
from rebalancer_sim.scheduler import Scheduler
from rebalancer_sim.store import DEFAULT_HISTORY, Store
from rebalancer_sim.workloads import (
    DaemonSetController,
    DeploymentController,
    PodCreations,
    ReplicaSetController,
    StatefulSetController,
    WorkloadOwners,
)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
TOKEN = "sim-token"  # any token is accepted; kubectl wants one in the kubeconfig


@dataclass(frozen=True)
class ClusterUrls:
    api: str  # http://127.0.0.1:<port>
    imds: str  # http://127.0.0.1:<port>; a VM's IMDS base is <imds>/vms/<vm name>
    kubeconfig: Path


class ClusterEmulator:
    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        *,
        clock: Clock | None = None,
        tick_seconds: float = 0.1,
        history_size: int = DEFAULT_HISTORY,
        bookmark_interval_seconds: float = 60.0,  # upstream's watch cache: about once a minute
        controllers: Collection[str] | None = None,
    ) -> None:
        """`controllers`: the names of the control loops to run (None: all), for a test that
        plays the others itself by writing to the store, as they would: e.g. `{"kubelets",
        "disruption"}` keeps pods loading and stopping and budgets counted while the test is the
        ReplicaSet, the scheduler and Azure."""
        if scenario is None:
            scenario = Scenario(name="empty")
        elif not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        self.scenario = scenario
        self.clock: Clock = clock or SystemClock()
        self.tick_seconds = tick_seconds
        self.store = Store(self.clock, history_size=history_size)
        self.imds = ImdsEmulator(self.clock)
        settings = scenario.settings
        self.cloud = Cloud(
            self.store,
            self.imds,
            cluster=scenario.cluster,
            node_delete_delay_seconds=settings.node_delete_delay_seconds,
            reboot_seconds=settings.reboot_seconds,
        )
        # Mutating admission webhooks on Pod CREATE; tests map a webhook's Service to where it
        # listens in `admission.webhook_services`.
        self.admission = Admission(self.store)
        self.pod_creations = PodCreations(self.store, self.admission)
        self.api = ApiServer(
            self.store,
            bookmark_interval_seconds=bookmark_interval_seconds,
            admission=self.admission,
        )
        for namespace in SYSTEM_NAMESPACES:
            self.store.create(R.NAMESPACES, {"metadata": {"name": namespace}})
        self.scheduler = Scheduler(self.store)
        self.kubelets = Kubelets(
            self.store,
            node_runs=self.cloud.node_runs,
            startup_seconds=settings.startup_seconds,
            shutdown_seconds=settings.shutdown_seconds,
            seed=settings.seed,
        )
        self.cloud.on_node_back = self.kubelets.restart_node
        self.cloud.gpus_from_device_plugin = any(w.device_plugin for w in scenario.workloads)
        self.device_plugins = DevicePlugins(self.cloud)
        self.node_lifecycle = NodeLifecycle(self.store)
        self.deployments = DeploymentController(self.store)
        self.replicasets = ReplicaSetController(self.store, self.pod_creations)
        self.statefulsets = StatefulSetController(self.store, self.pod_creations)
        self.daemonsets = DaemonSetController(self.store, self.pod_creations)
        self.disruption = DisruptionController(self.store)
        self.garbage = GarbageCollector(self.store)
        self.autoscaler = Autoscaler(
            self.cloud,
            self.scheduler,
            scale_down_unneeded_seconds=settings.scale_down_unneeded_seconds,
            gpus_coming=self.device_plugins.pending_registration,
        )
        self.node_problem_detector = NodeProblemDetector(
            self.cloud,
            poll_seconds=settings.node_problem_detector_seconds or 10.0,
            condition_types=settings.node_problem_detector_conditions or CONDITION_TYPES,
        )
        self.auto_drain = NodeAutoDrain(
            self.cloud,
            delay_seconds=settings.node_auto_drain_delay_seconds,
            retry_seconds=settings.node_auto_drain_retry_seconds,
        )
        self.karpenter = Karpenter(self.cloud, self.scheduler, scenario.sizes())
        # KEDA reconciles on the changes its watches see (keda.py), so it has no period.
        self.keda = Keda(self.store)
        self.hpas = HorizontalPodAutoscalers(self.store, sync_seconds=settings.hpa_sync_seconds)
        self.owners = WorkloadOwners(self.store)
        loops: dict[str, Callable[[], int]] = {
            "cloud": self.cloud.reconcile,
            "auto_drain": self.auto_drain.reconcile,
            "node_lifecycle": self.node_lifecycle.reconcile,
            "garbage": self.garbage.reconcile,
            "deployments": self.deployments.reconcile,
            "replicasets": self.replicasets.reconcile,
            "statefulsets": self.statefulsets.reconcile,
            "daemonsets": self.daemonsets.reconcile,
            "scheduler": self.scheduler.reconcile,
            "kubelets": self.kubelets.reconcile,
            "device_plugins": self.device_plugins.reconcile,
            "disruption": self.disruption.reconcile,
            "autoscaler": self.autoscaler.reconcile,
            "karpenter": self.karpenter.reconcile,
            "keda": self.keda.reconcile,  # before the HPAs: a ScaledObject's HPA is up to date
            "hpas": self.hpas.reconcile,
            "owners": self.owners.reconcile,
            "node_problem_detector": self.node_problem_detector.reconcile,
        }
        if not settings.node_auto_drain:
            del loops["auto_drain"]
        if settings.node_problem_detector_seconds <= 0:
            del loops["node_problem_detector"]
        if controllers is not None:
            unknown = set(controllers) - set(loops) - {"auto_drain", "node_problem_detector"}
            if unknown:
                raise ValueError(f"no such control loop: {', '.join(sorted(unknown))}")
            loops = {name: loop for name, loop in loops.items() if name in controllers}
        self._loops: list[Callable[[], int]] = list(loops.values())
        self._timeline = list(scenario.timeline)
        self._timeline_events: dict[str, list[EmulatedEvent]] = {}
        self.started_at = self.clock.now().timestamp()
        self._runners: list[web.AppRunner] = []
        self._ticker: asyncio.Task[None] | None = None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self.urls: ClusterUrls | None = None
        self._load()

    # ---- scenario ----------------------------------------------------------------------------

    def _load(self) -> None:
        for nodepool in self.scenario.nodepools:
            self.store.create(R.NODEPOOLS, nodepool.manifest(self.scenario.cluster.region))
        for pool in self.scenario.pools:
            self.cloud.add_pool(pool)
            for _ in range(pool.count):
                self.cloud.create_vm(pool.name, delay_seconds=0)
        for workload in self.scenario.workloads:
            if self.store.get(R.NAMESPACES, "", workload.namespace) is None:
                self.store.create(R.NAMESPACES, {"metadata": {"name": workload.namespace}})
            resource = {
                "Deployment": R.DEPLOYMENTS,
                "StatefulSet": R.STATEFULSETS,
                "DaemonSet": R.DAEMONSETS,
            }[workload.kind]
            self.store.create(resource, workload.manifest())
            pdb = workload.pdb_manifest()
            if pdb is not None:
                self.store.create(R.PDBS, pdb)
            hpa = workload.hpa_manifest()
            if hpa is not None:
                self.store.create(R.HPAS, hpa)
            scaled_object = workload.scaledobject_manifest()
            if scaled_object is not None:
                self.store.create(R.SCALEDOBJECTS, scaled_object)
            if workload.owner_reset_seconds is not None:
                self.owners.own(
                    workload.namespace,
                    workload.name,
                    replicas=workload.replicas,
                    reset_seconds=workload.owner_reset_seconds,
                )
        self.kubelets.warm = self.scenario.settings.warm_start
        self.step()
        self.kubelets.warm = False

    def _run_timeline(self) -> int:
        elapsed = self.clock.now().timestamp() - self.started_at
        done = 0
        while self._timeline and self._timeline[0].at <= elapsed + 1e-9:
            self._apply(self._timeline.pop(0))
            done += 1
        return done

    def _apply(self, step: TimelineStep) -> None:
        args = step.args
        events: list[EmulatedEvent] = []
        if step.action in ("preempt", "event"):
            event_type = "Preempt" if step.action == "preempt" else str(args["type"])
            nodes = self._select_nodes(args)
            notice = args.get("noticeSeconds")
            spread = float(args.get("spreadSeconds", 0.0))
            for index, node in enumerate(nodes):
                offset = spread * index / max(1, len(nodes) - 1) if spread else 0.0
                when = step.at + offset
                if offset:
                    self._timeline.append(
                        TimelineStep(
                            when,
                            "event",
                            {"type": event_type, "node": node, "noticeSeconds": notice},
                            step.id,
                        )
                    )
                    continue
                events.append(
                    self.cloud.schedule_event(
                        event_type, [node], notice_seconds=None if notice is None else float(notice)
                    )
                )
            self._timeline.sort(key=lambda s: s.at)
        elif step.action == "cancel":
            for event in self._timeline_events.get(str(args["id"]), []):
                self.imds.cancel(event.event_id)
            self._timeline = [s for s in self._timeline if s.id != str(args["id"])]
        elif step.action == "spotCapacity":
            available = args.get("available")
            events = self.cloud.set_spot_capacity(
                str(args["pool"]),
                None if available is None else int(available),
                notice_seconds=float(args.get("noticeSeconds", 30.0)),
            )
        elif step.action == "scale":
            self.scale(
                str(args["workload"]), int(args["replicas"]), namespace=args.get("namespace")
            )
        elif step.action == "load":
            self.set_load(
                str(args["workload"]), float(args["percent"]), namespace=args.get("namespace")
            )
        if step.id:
            self._timeline_events.setdefault(step.id, []).extend(events)

    def _select_nodes(self, args: dict[str, Any]) -> list[str]:
        if "node" in args:
            return [str(args["node"])]
        vms = sorted(
            self.cloud.pool_vms(str(args["pool"]), "running"), key=lambda vm: vm.instance_id
        )
        if "index" in args:
            return [vms[int(args["index"])].node_name]
        return [vm.node_name for vm in vms[: int(args.get("count", 1))]]

    # ---- control loops -----------------------------------------------------------------------

    def step(self, *, max_rounds: int = 50) -> int:
        """Run every control loop until none has anything left to do at this instant."""
        total = 0
        for _ in range(max_rounds):
            writes_before = self.store.writes
            worked = self._run_timeline()
            for loop in self._loops:
                worked += loop()
            total += worked
            if self.store.writes == writes_before and not worked:
                break
        return total

    async def advance(self, seconds: float, *, step_seconds: float | None = None) -> None:
        """Under a ManualClock: move virtual time forward in small steps, reconciling each."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs a ManualClock; with a real clock just wait")
        step = step_seconds or self.tick_seconds
        remaining = seconds
        while remaining > 1e-9:
            delta = min(step, remaining)
            self.clock.advance(delta)
            remaining -= delta
            self.step()
            await asyncio.sleep(0)

    async def wait_for(
        self,
        predicate: Callable[[], Any],
        *,
        timeout: float = 10.0,  # bounds real time and, under a ManualClock, virtual time
        message: str = "condition",
        virtual_step: float | None = None,
    ) -> Any:
        """Poll `predicate` (stepping the loops; under a ManualClock also moving virtual time by
        `virtual_step` or `tick_seconds` per poll) until it is truthy; TimeoutError after
        `timeout` seconds of real time (and, under a ManualClock, of virtual time too)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        virtual_elapsed = 0.0
        while True:
            self.step()
            result = predicate()
            if result:
                return result
            if loop.time() > deadline or virtual_elapsed > timeout:
                raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
            if isinstance(self.clock, ManualClock):
                delta = virtual_step or self.tick_seconds
                self.clock.advance(delta)
                virtual_elapsed += delta
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(min(self.tick_seconds, 0.05))

    async def _tick_forever(self) -> None:
        while True:
            try:
                self.step()
            except Exception as exc:  # a bug in one loop must not stop the cluster silently
                print(f"cluster emulator: control loop error: {type(exc).__name__}: {exc}")
            await asyncio.sleep(self.tick_seconds)

    # ---- serving -----------------------------------------------------------------------------

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        imds_port: int = 0,
        kubeconfig_dir: str | Path | None = None,
        run_loops: bool = True,
    ) -> ClusterUrls:
        """Serve the API and IMDS, write a kubeconfig, and (by default) tick the loops."""
        api_port = await self._serve(self.api.app(), host, port)
        imds_port = await self._serve(self.imds.app(), host, imds_port)
        self.api.server_address = f"{host}:{api_port}"
        if kubeconfig_dir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="sim-cluster-")
            kubeconfig_dir = self._tempdir.name
        path = Path(kubeconfig_dir) / "kubeconfig"
        api_url = f"http://{host}:{api_port}"
        path.write_text(json.dumps(kubeconfig(api_url, self.scenario.cluster.name), indent=2))
        self.urls = ClusterUrls(api=api_url, imds=f"http://{host}:{imds_port}", kubeconfig=path)
        if run_loops:
            self._ticker = asyncio.create_task(self._tick_forever(), name="cluster-emulator-tick")
        return self.urls

    async def _serve(self, app: web.Application, host: str, port: int) -> int:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runners.append(runner)
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        await self.pod_creations.close()
        await self.admission.close()
        await self.api.close()
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    async def __aenter__(self) -> ClusterEmulator:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    # ---- conveniences ------------------------------------------------------------------------

    @property
    def kubeconfig_path(self) -> Path:
        if self.urls is None:
            raise RuntimeError("start() the emulator first")
        return self.urls.kubeconfig

    def vm_name_for(self, node_name: str) -> str:
        return self.cloud.vm_for(node_name).name

    def imds_url_for(self, node_name: str) -> str:
        if self.urls is None:
            raise RuntimeError("start() the emulator first")
        return f"{self.urls.imds}/vms/{self.vm_name_for(node_name)}"

    def preempt(self, node_name: str, notice_seconds: float = 30.0) -> EmulatedEvent:
        """Schedule a spot eviction (IMDS Preempt) of the node's VM; at NotBefore it goes."""
        return self.cloud.schedule_event("Preempt", [node_name], notice_seconds=notice_seconds)

    def schedule_event(
        self, event_type: str, node_names: list[str], notice_seconds: float | None = None
    ) -> EmulatedEvent:
        return self.cloud.schedule_event(event_type, node_names, notice_seconds=notice_seconds)

    def set_spot_capacity(
        self, pool: str, available: int | None, notice_seconds: float = 30.0
    ) -> list[EmulatedEvent]:
        return self.cloud.set_spot_capacity(pool, available, notice_seconds=notice_seconds)

    def scale(self, workload: str, replicas: int, *, namespace: str | None = None) -> None:
        for resource in (R.DEPLOYMENTS, R.STATEFULSETS):
            for obj in self.store.items(resource, namespace):
                if obj["metadata"]["name"] == workload:
                    updated = json.loads(json.dumps(obj))
                    updated["spec"]["replicas"] = replicas
                    self.store.update(resource, updated)
                    self.owners.want(obj["metadata"]["namespace"], workload, replicas)
                    return
        raise KeyError(f"no Deployment or StatefulSet named {workload!r}")

    def set_load(self, workload: str, percent: float, *, namespace: str | None = None) -> None:
        """The HPA metric stand-in: total CPU use of the workload's Ready pods (see hpa.py). On
        the HPA named after the workload, or else on its KEDA ScaledObject, whose annotations
        KEDA copies to the HPA it made (keda.py)."""
        for resource in (R.HPAS, R.SCALEDOBJECTS):
            for obj in self.store.items(resource, namespace):
                if obj["metadata"]["name"] == workload:
                    updated = json.loads(json.dumps(obj))
                    annotations = updated["metadata"].setdefault("annotations", {})
                    annotations[LOAD_ANNOTATION] = f"{percent:g}"
                    self.store.update(resource, updated)
                    return
        raise KeyError(f"no HorizontalPodAutoscaler or ScaledObject named {workload!r}")

    def nodes(self, pool: str | None = None) -> list[Obj]:
        return [
            node
            for node in self.store.items(R.NODES)
            if pool is None
            or (node["metadata"].get("labels") or {}).get("kubernetes.azure.com/agentpool") == pool
        ]

    def pods(self, namespace: str | None = None, *, node: str | None = None) -> list[Obj]:
        """Pods, of one namespace and/or bound to one node."""
        if node is not None:
            return [
                pod
                for pod in self.store.pods_on_node(node)
                if namespace is None or pod["metadata"].get("namespace") == namespace
            ]
        return list(self.store.items(R.PODS, namespace))


def kubeconfig(server: str, name: str = "sim") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": f"{name}-user", "user": {"token": TOKEN}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": f"{name}-user", "namespace": "default"},
            }
        ],
        "current-context": name,
        "preferences": {},
    }

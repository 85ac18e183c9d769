"""Scenario files: the node pools, workloads and timeline of an emulated cluster, in YAML.

Format (every key but `name` under a pool or workload is optional)::

    name: aks-gpu-small
    description: free text
    cluster: {name: sim, resourceGroup: rg-sim, region: eastus}
    settings:
      nodeDeleteDelaySeconds: 5      # VM gone -> Node deleted (Delete eviction policy)
      scaleDownUnneededSeconds: 600  # autoscaler: idle node removed after this long
      startupSeconds: 0              # default pod time from Running to Ready (a workload's own
                                     # startupSeconds wins; the shipped GPU scenarios set 90)
      shutdownSeconds: 1             # default pod time to stop after deletion (capped by grace)
      seed: 0                        # random draws (startupSeconds ranges) are reproducible
      warmStart: false               # true: the workloads start Ready (a cluster that has been
                                     # serving); only pods created later load their model
      nodeAutoDrain: true            # AKS node auto-drain (default on, as in AKS): on a Preempt,
                                     # Redeploy or Terminate event, cordon and evict (Eviction
                                     # API, PDBs apply) at notice time, best effort
      nodeAutoDrainDelaySeconds: 2   # event scheduled -> AKS starts draining (not documented)
      nodeAutoDrainRetrySeconds: 5   # an eviction a PDB refused is retried this often
      rebootSeconds: 60              # Reboot/Redeploy: how long the VM is down once it starts
      hpaSyncSeconds: 15             # the HPA controller's sync period (upstream default 15 s)
      nodeProblemDetectorSeconds: 10 # AKS NPD: Scheduled Events -> Node conditions; 0 (the
                                     # default): off
      nodeProblemDetectorConditions: [VMEventScheduled, PreemptScheduled]  # default: all known
    pools:
      - name: gpuspot                # AKS pool name -> nodes aks-gpuspot-<8 digits>-vmss00000a
        priority: spot               # spot | regular
        mode: user                   # user | system
        vmSize: Standard_NC24ads_A100_v4
        zones: ["1", "2", "3"]       # -> topology.kubernetes.io/zone eastus-1 ...
        cpu: 24
        memory: 220Gi
        gpus: 1                      # nvidia.com/gpu capacity; GPU pools get sku=gpu:NoSchedule
        gpuTaint: true               # set false to leave that taint off
        maxPods: 30
        count: 3                     # nodes at start
        minCount: 0
        maxCount: 6                  # set: the autoscaler may grow the pool up to this
        pricePerHour: 3.67           # on-demand $/h of the size
        spotPricePerHour: 0.98       # spot $/h
        provisioningSeconds: 60      # request -> Ready node
        evictionPolicy: Delete       # spot: Delete | Deallocate
        spotCapacity: 3              # spot VMs Azure can give now (omit: unlimited)
        taints: ["team=ml:NoSchedule"]
        labels: {team: ml}
    nodePools:                       # Karpenter NodePools (karpenter.sh/v1, karpenter.py): no
                                     # node at start; NodeClaims launched for pending pods
      - name: gpu                    # nodes labelled karpenter.sh/nodepool=gpu
        capacityTypes: [spot, on-demand]   # default [on-demand], Karpenter's
        vmSize: Standard_NC24ads_A100_v4   # the size it launches (its instance-type requirement)
        cpu: 24
        memory: 220Gi
        gpus: 1                      # also its karpenter.azure.com/sku-gpu-count requirement
        zones: ["1", "2"]            # its topology.kubernetes.io/zone requirement
        taints: ["sku=gpu:NoSchedule"]   # spec.template.spec.taints (Karpenter adds no spot taint)
        labels: {team: ml}           # spec.template.metadata.labels
        consolidateAfter: 30s        # spec.disruption.consolidateAfter; default Never
        provisioningSeconds: 30      # NodeClaim -> Ready node
        spotCapacity: 2              # spot VMs Azure can give it now (omit: unlimited)
        pricePerHour: 3.67
        spotPricePerHour: 0.98
    workloads:
      - name: inference
        namespace: default           # created if missing
        kind: Deployment             # Deployment | StatefulSet | DaemonSet
        replicas: 3
        image: nvcr.io/nvidia/tritonserver:24.08-py3
        labels: {app: inference}     # default {app: <name>}
        annotations: {}              # pod template annotations
        requests: {cpu: "4", memory: 32Gi, nvidia.com/gpu: 1}
        tolerations:                 # Kubernetes form, or "key=value:Effect" / "key:Effect"
          - kubernetes.azure.com/scalesetpriority=spot:NoSchedule
          - sku=gpu:NoSchedule
        nodeSelector: {kubernetes.azure.com/accelerator: nvidia}
        affinity: {}                 # Kubernetes form
        preferSpot: 100              # shorthand: preferred node affinity to spot, this weight
        startupSeconds: 90           # -> pod annotation sim.spot-rebalancer.io/startup-seconds;
                                     # or [60, 120]: each pod draws its own (seeded)
        shutdownSeconds: 2
        terminationGracePeriodSeconds: 30
        podManagementPolicy: Parallel   # StatefulSet only
        pdb: {maxUnavailable: 1}     # or {minAvailable: "50%"}; a PDB named after the workload
        hpa:                         # an autoscaling/v2 HorizontalPodAutoscaler named after it
          minReplicas: 2
          maxReplicas: 6
          targetCPUUtilization: 60   # percent of the pods' CPU request
          load: 150                  # the metric stand-in: total CPU use of the Ready pods, in
                                     # percent of one pod's request (timeline `load` changes it)
          scaleDownStabilizationSeconds: 300   # behavior.scaleDown (upstream default 300)
        keda:                        # instead of hpa: a KEDA ScaledObject named after it, whose
                                     # HPA (keda-hpa-<name>) keda.py keeps
          minReplicaCount: 2         # KEDA's default 0 (the HPA's minimum is then 1)
          maxReplicaCount: 6         # KEDA's default 100
          cpu: 60                    # a cpu trigger, Utilization of the pods' CPU request
          load: 150                  # the metric stand-in on the ScaledObject, which KEDA copies
                                     # to its HPA; none: no metric, the HPA only keeps the bounds
          scaleDownStabilizationSeconds: 300   # advanced.horizontalPodAutoscalerConfig.behavior
                                               # (none: no behavior, upstream's default 300 s)
        owner: {resetSeconds: 10}    # an operator (KServe, KAITO) that sets spec.replicas back
                                     # to the workload's replicas every 10 s
        devicePlugin: true           # DaemonSet only: the NVIDIA device plugin. With one in the
                                     # scenario, a GPU node advertises nvidia.com/gpu only while
                                     # one of its pods runs there (deviceplugin.py)
    timeline:                        # `at`: seconds after the scenario starts
      - at: 10
        preempt: {pool: gpuspot, index: 0, noticeSeconds: 30}   # or node: <node name>
        id: first                    # names the events, for `cancel`
      - at: 12
        preempt: {pool: spot, count: 20, noticeSeconds: 30, spreadSeconds: 10}
      - at: 15
        event: {type: Reboot, pool: gpuspot, index: 1, noticeSeconds: 900}
      - at: 20
        cancel: first
      - at: 30
        spotCapacity: {pool: gpuspot, available: 0, noticeSeconds: 30}   # null: unlimited
      - at: 60
        scale: {workload: inference, replicas: 5}   # also what an owner resets to
      - at: 90
        load: {workload: inference, percent: 300}   # the HPA's metric stand-in (on the
                                                    # ScaledObject of a `keda:` workload)

`load_scenario` accepts a path or the name of a shipped scenario (`sim/rebalancer_sim/scenarios`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources as package_resources
from pathlib import Path
from typing import Any

import yaml

from rebalancer_sim.karpenter import NodePoolSpec, SizeSpec, seconds
from rebalancer_sim.pools import ClusterInfo, PoolSpec
from rebalancer_sim.scheduling import parse_taint

STARTUP_ANNOTATION = "sim.spot-rebalancer.io/startup-seconds"
LOAD_ANNOTATION = "sim.spot-rebalancer.io/cpu-load-percent"
SHUTDOWN_ANNOTATION = "sim.spot-rebalancer.io/shutdown-seconds"
# On the pods of a device-plugin DaemonSet (`devicePlugin: true`): see deviceplugin.py.
DEVICE_PLUGIN_ANNOTATION = "sim.spot-rebalancer.io/device-plugin"
GPU = "nvidia.com/gpu"
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
ACTIONS = ("preempt", "event", "cancel", "spotCapacity", "scale", "load")
HPA_KEYS = frozenset(
    {"minReplicas", "maxReplicas", "targetCPUUtilization", "load", "scaleDownStabilizationSeconds"}
)
KEDA_KEYS = frozenset(
    {"minReplicaCount", "maxReplicaCount", "cpu", "load", "scaleDownStabilizationSeconds"}
)


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the place."""


@dataclass
class WorkloadSpec:
    name: str
    namespace: str = "default"
    kind: str = "Deployment"
    replicas: int = 1
    image: str = "registry.k8s.io/pause:3.10"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    requests: dict[str, Any] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] = field(default_factory=dict)
    startup_seconds: float | tuple[float, float] | None = None  # a pair: drawn per pod
    shutdown_seconds: float | None = None
    termination_grace_period_seconds: int = 30
    pod_management_policy: str = "OrderedReady"
    pdb: dict[str, Any] | None = None
    hpa: dict[str, Any] | None = None
    keda: dict[str, Any] | None = None  # a KEDA ScaledObject (keda.py) instead of an HPA
    owner_reset_seconds: float | None = None
    device_plugin: bool = False  # a DaemonSet that advertises its nodes' GPUs (deviceplugin.py)

    def selector_labels(self) -> dict[str, str]:
        return dict(self.labels) if self.labels else {"app": self.name}

    def pod_template(self) -> dict[str, Any]:
        requests = {k: str(v) for k, v in self.requests.items()}
        limits = {k: v for k, v in requests.items() if "/" in k}  # extended: limits == requests
        resources: dict[str, Any] = {}
        if requests:
            resources["requests"] = requests
        if limits:
            resources["limits"] = limits
        annotations = dict(self.annotations)
        if isinstance(self.startup_seconds, tuple):
            low, high = self.startup_seconds
            annotations[STARTUP_ANNOTATION] = f"{low:g}..{high:g}"
        elif self.startup_seconds is not None:
            annotations[STARTUP_ANNOTATION] = str(self.startup_seconds)
        if self.shutdown_seconds is not None:
            annotations[SHUTDOWN_ANNOTATION] = str(self.shutdown_seconds)
        if self.device_plugin:
            annotations[DEVICE_PLUGIN_ANNOTATION] = GPU
        metadata: dict[str, Any] = {"labels": self.selector_labels()}
        if annotations:
            metadata["annotations"] = annotations
        spec: dict[str, Any] = {
            "containers": [{"name": self.name, "image": self.image, "resources": resources}],
            "terminationGracePeriodSeconds": self.termination_grace_period_seconds,
        }
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.affinity:
            spec["affinity"] = self.affinity
        return {"metadata": metadata, "spec": spec}

    def manifest(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": self.selector_labels()},
            "template": self.pod_template(),
        }
        if self.kind != "DaemonSet":
            spec["replicas"] = self.replicas
        if self.kind == "StatefulSet":
            spec["serviceName"] = self.name
            spec["podManagementPolicy"] = self.pod_management_policy
        return {
            "apiVersion": "apps/v1",
            "kind": self.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": self.selector_labels(),
            },
            "spec": spec,
        }

    def pdb_manifest(self) -> dict[str, Any] | None:
        if self.pdb is None:
            return None
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {**self.pdb, "selector": {"matchLabels": self.selector_labels()}},
        }

    def hpa_manifest(self) -> dict[str, Any] | None:
        """An autoscaling/v2 HPA on CPU utilisation; its metric is the `load` stand-in."""
        if self.hpa is None:
            return None
        hpa = self.hpa
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": {LOAD_ANNOTATION: f"{float(hpa.get('load', 0)):g}"},
            },
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": self.kind, "name": self.name},
                "minReplicas": int(hpa.get("minReplicas", 1)),
                "maxReplicas": int(hpa["maxReplicas"]),
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {
                                "type": "Utilization",
                                "averageUtilization": int(hpa.get("targetCPUUtilization", 80)),
                            },
                        },
                    }
                ],
                "behavior": {
                    "scaleDown": {
                        "stabilizationWindowSeconds": int(
                            hpa.get("scaleDownStabilizationSeconds", 300)
                        )
                    }
                },
            },
        }

    def scaledobject_manifest(self) -> dict[str, Any] | None:
        """A KEDA ScaledObject with one cpu trigger; KEDA's operator (keda.py) makes its HPA."""
        if self.keda is None:
            return None
        keda = self.keda
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if "load" in keda:
            metadata["annotations"] = {LOAD_ANNOTATION: f"{float(keda['load']):g}"}
        spec: dict[str, Any] = {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": self.kind, "name": self.name}
        }
        for key in ("minReplicaCount", "maxReplicaCount"):
            if key in keda:
                spec[key] = int(keda[key])
        if "scaleDownStabilizationSeconds" in keda:
            window = int(keda["scaleDownStabilizationSeconds"])
            spec["advanced"] = {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": window}}
                }
            }
        spec["triggers"] = [
            {
                "type": "cpu",
                "metricType": "Utilization",
                "metadata": {"value": str(int(keda["cpu"]))},
            }
        ]
        return {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": metadata,
            "spec": spec,
        }


@dataclass
class TimelineStep:
    at: float
    action: str  # one of ACTIONS
    args: dict[str, Any]
    id: str | None = None


@dataclass
class Settings:
    node_delete_delay_seconds: float = 5.0
    scale_down_unneeded_seconds: float = 600.0
    startup_seconds: float = 0.0
    shutdown_seconds: float = 1.0
    node_problem_detector_seconds: float = 0.0
    node_problem_detector_conditions: list[str] | None = None  # None: npd.CONDITION_TYPES
    seed: int = 0
    warm_start: bool = False
    node_auto_drain: bool = True
    node_auto_drain_delay_seconds: float = 2.0
    node_auto_drain_retry_seconds: float = 5.0
    reboot_seconds: float = 60.0
    hpa_sync_seconds: float = 15.0


@dataclass
class Scenario:
    name: str
    description: str = ""
    cluster: ClusterInfo = field(default_factory=ClusterInfo)
    settings: Settings = field(default_factory=Settings)
    pools: list[PoolSpec] = field(default_factory=list)
    workloads: list[WorkloadSpec] = field(default_factory=list)
    timeline: list[TimelineStep] = field(default_factory=list)
    nodepools: list[NodePoolSpec] = field(default_factory=list)

    def sizes(self) -> dict[str, SizeSpec]:
        """The VM sizes a NodePool may launch: those its NodePools and pools describe."""
        found = {
            p.vm_size: SizeSpec(p.vm_size, p.cpu, p.memory, p.gpus, p.max_pods,
                                p.price_per_hour, p.spot_price_per_hour)
            for p in self.pools
        }  # fmt: skip
        return {**found, **{np.size.name: np.size for np in self.nodepools}}


def _toleration(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, dict):
        return dict(item)
    if isinstance(item, str):
        taint = parse_taint(item)
        toleration: dict[str, Any] = {"key": taint["key"], "effect": taint["effect"]}
        if "value" in taint:
            toleration.update(operator="Equal", value=taint["value"])
        else:
            toleration["operator"] = "Exists"
        return toleration
    raise ScenarioError(f"{where}: a toleration is a mapping or 'key=value:Effect'")


def _take(
    data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str
) -> Any:
    value = data.pop(key, default)
    if value is not None and not isinstance(value, kind):
        raise ScenarioError(f"{where}.{key}: expected {kind}, got {value!r}")
    return value


_NUMBER = (int, float)


def _pool(data: Any, index: int) -> PoolSpec:
    where = f"pools[{index}]"
    if not isinstance(data, dict) or not data.get("name"):
        raise ScenarioError(f"{where}: a pool needs a name")
    data = dict(data)
    pool = PoolSpec(
        name=str(data.pop("name")),
        vm_size=_take(data, "vmSize", str, "Standard_D4s_v5", where),
        priority=_take(data, "priority", str, "regular", where).lower(),
        mode=_take(data, "mode", str, "user", where),
        zones=[str(z) for z in _take(data, "zones", list, ["1"], where)],
        cpu=_take(data, "cpu", _NUMBER, 4, where),
        memory=str(_take(data, "memory", (str, int), "16Gi", where)),
        gpus=_take(data, "gpus", int, 0, where),
        max_pods=_take(data, "maxPods", int, 110, where),
        count=_take(data, "count", int, 1, where),
        min_count=_take(data, "minCount", int, 0, where),
        max_count=_take(data, "maxCount", int, None, where),
        price_per_hour=float(_take(data, "pricePerHour", _NUMBER, 0.0, where)),
        spot_price_per_hour=_take(data, "spotPricePerHour", _NUMBER, None, where),
        provisioning_seconds=float(_take(data, "provisioningSeconds", _NUMBER, 60.0, where)),
        eviction_policy=_take(data, "evictionPolicy", str, "Delete", where),
        spot_capacity=_take(data, "spotCapacity", int, None, where),
        taints=[str(t) for t in _take(data, "taints", list, [], where)],
        labels={str(k): str(v) for k, v in _take(data, "labels", dict, {}, where).items()},
        gpu_taint=_take(data, "gpuTaint", bool, True, where),
    )
    if data:
        raise ScenarioError(f"{where}: unknown keys {sorted(data)}")
    if pool.priority not in ("spot", "regular"):
        raise ScenarioError(f"{where}.priority: spot or regular, not {pool.priority!r}")
    if pool.eviction_policy not in ("Delete", "Deallocate"):
        raise ScenarioError(f"{where}.evictionPolicy: Delete or Deallocate")
    if pool.max_count is not None and pool.max_count < pool.count:
        raise ScenarioError(f"{where}: maxCount below count")
    return pool


def _nodepool(data: Any, index: int) -> NodePoolSpec:
    where = f"nodePools[{index}]"
    if not isinstance(data, dict) or not data.get("name"):
        raise ScenarioError(f"{where}: a NodePool needs a name")
    data = dict(data)
    name = str(data.pop("name"))
    size = SizeSpec(
        name=_take(data, "vmSize", str, "Standard_NC24ads_A100_v4", where),
        cpu=_take(data, "cpu", _NUMBER, 24, where),
        memory=str(_take(data, "memory", (str, int), "220Gi", where)),
        gpus=_take(data, "gpus", int, 1, where),
        max_pods=_take(data, "maxPods", int, 110, where),
        price_per_hour=float(_take(data, "pricePerHour", _NUMBER, 0.0, where)),
        spot_price_per_hour=_take(data, "spotPricePerHour", _NUMBER, None, where),
    )
    nodepool = NodePoolSpec(
        name=name,
        size=size,
        capacity_types=[str(c) for c in _take(data, "capacityTypes", list, ["on-demand"], where)],
        zones=[str(z) for z in _take(data, "zones", list, ["1"], where)],
        taints=[str(t) for t in _take(data, "taints", list, [], where)],
        labels={str(k): str(v) for k, v in _take(data, "labels", dict, {}, where).items()},
        consolidate_after=str(_take(data, "consolidateAfter", str, "Never", where)),
        provisioning_seconds=float(_take(data, "provisioningSeconds", _NUMBER, 30.0, where)),
        spot_capacity=_take(data, "spotCapacity", int, None, where),
    )
    if data:
        raise ScenarioError(f"{where}: unknown keys {sorted(data)}")
    if not nodepool.capacity_types or not set(nodepool.capacity_types) <= {"spot", "on-demand"}:
        raise ScenarioError(f"{where}.capacityTypes: spot and/or on-demand")
    if nodepool.consolidate_after != "Never" and seconds(nodepool.consolidate_after) is None:
        raise ScenarioError(f"{where}.consolidateAfter: a duration (30s, 5m) or Never")
    return nodepool


def _workload(data: Any, index: int) -> WorkloadSpec:
    where = f"workloads[{index}]"
    if not isinstance(data, dict) or not data.get("name"):
        raise ScenarioError(f"{where}: a workload needs a name")
    data = dict(data)
    workload = WorkloadSpec(
        name=str(data.pop("name")),
        namespace=_take(data, "namespace", str, "default", where),
        kind=_take(data, "kind", str, "Deployment", where),
        replicas=_take(data, "replicas", int, 1, where),
        image=_take(data, "image", str, "registry.k8s.io/pause:3.10", where),
        labels={str(k): str(v) for k, v in _take(data, "labels", dict, {}, where).items()},
        annotations={
            str(k): str(v) for k, v in _take(data, "annotations", dict, {}, where).items()
        },
        requests=dict(_take(data, "requests", dict, {}, where)),
        tolerations=[
            _toleration(t, f"{where}.tolerations")
            for t in _take(data, "tolerations", list, [], where)
        ],
        node_selector={
            str(k): str(v) for k, v in _take(data, "nodeSelector", dict, {}, where).items()
        },
        affinity=dict(_take(data, "affinity", dict, {}, where)),
        startup_seconds=_startup(data.pop("startupSeconds", None), f"{where}.startupSeconds"),
        shutdown_seconds=_take(data, "shutdownSeconds", _NUMBER, None, where),
        termination_grace_period_seconds=_take(
            data, "terminationGracePeriodSeconds", int, 30, where
        ),
        pod_management_policy=_take(data, "podManagementPolicy", str, "OrderedReady", where),
        pdb=_take(data, "pdb", dict, None, where),
        hpa=_take(data, "hpa", dict, None, where),
        keda=_take(data, "keda", dict, None, where),
        device_plugin=_take(data, "devicePlugin", bool, False, where),
    )
    if workload.device_plugin and workload.kind != "DaemonSet":
        raise ScenarioError(f"{where}.devicePlugin: only a DaemonSet is a device plugin")
    owner = _take(data, "owner", dict, None, where)
    if owner is not None:
        reset = owner.get("resetSeconds")
        if not isinstance(reset, _NUMBER) or reset <= 0 or set(owner) != {"resetSeconds"}:
            raise ScenarioError(f"{where}.owner: {{resetSeconds: <seconds > 0>}}")
        workload.owner_reset_seconds = float(reset)
    if workload.hpa is not None:
        unknown = set(workload.hpa) - HPA_KEYS
        if unknown or "maxReplicas" not in workload.hpa:
            raise ScenarioError(
                f"{where}.hpa: needs maxReplicas; known keys {sorted(HPA_KEYS)}"
                + (f"; unknown {sorted(unknown)}" if unknown else "")
            )
        if workload.kind == "DaemonSet":
            raise ScenarioError(f"{where}.hpa: a DaemonSet has no replicas to scale")
    if workload.keda is not None:
        unknown = set(workload.keda) - KEDA_KEYS
        if unknown or "cpu" not in workload.keda:
            raise ScenarioError(
                f"{where}.keda: needs cpu (the trigger's target utilisation); known keys "
                f"{sorted(KEDA_KEYS)}" + (f"; unknown {sorted(unknown)}" if unknown else "")
            )
        if workload.hpa is not None:
            # KEDA's admission webhook refuses a ScaledObject whose target an HPA scales.
            raise ScenarioError(f"{where}: hpa or keda, not both (two HPAs would fight)")
        if workload.kind == "DaemonSet":
            raise ScenarioError(f"{where}.keda: a DaemonSet has no replicas to scale")
    prefer_spot = _take(data, "preferSpot", (int, bool), None, where)
    if data:
        raise ScenarioError(f"{where}: unknown keys {sorted(data)}")
    if workload.kind not in WORKLOAD_KINDS:
        raise ScenarioError(f"{where}.kind: one of {', '.join(WORKLOAD_KINDS)}")
    if prefer_spot:
        weight = 100 if prefer_spot is True else int(prefer_spot)
        node_affinity = workload.affinity.setdefault("nodeAffinity", {})
        node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {
                "weight": weight,
                "preference": {
                    "matchExpressions": [{"key": SPOT_LABEL, "operator": "In", "values": ["spot"]}]
                },
            }
        )
    if workload.pdb is not None and not (
        ("minAvailable" in workload.pdb) ^ ("maxUnavailable" in workload.pdb)
    ):
        raise ScenarioError(f"{where}.pdb: exactly one of minAvailable, maxUnavailable")
    return workload


def _startup(value: Any, where: str) -> float | tuple[float, float] | None:
    if value is None or (isinstance(value, _NUMBER) and not isinstance(value, bool)):
        return value
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, _NUMBER) and not isinstance(v, bool) for v in value)
        and 0 <= value[0] <= value[1]
    ):
        return float(value[0]), float(value[1])
    raise ScenarioError(f"{where}: seconds, or [low, high] to draw each pod's from")


def _step(data: Any, index: int) -> TimelineStep:
    where = f"timeline[{index}]"
    if not isinstance(data, dict) or "at" not in data:
        raise ScenarioError(f"{where}: a step needs `at` (seconds)")
    data = dict(data)
    at = data.pop("at")
    if not isinstance(at, _NUMBER) or at < 0:
        raise ScenarioError(f"{where}.at: seconds >= 0")
    step_id = data.pop("id", None)
    actions = [key for key in data if key in ACTIONS]
    if len(actions) != 1 or len(data) != 1:
        raise ScenarioError(f"{where}: exactly one of {', '.join(ACTIONS)}; got {sorted(data)}")
    action = actions[0]
    args = data[action]
    if action == "cancel":
        args = {"id": str(args)}
    if not isinstance(args, dict):
        raise ScenarioError(f"{where}.{action}: expected a mapping")
    if action in ("preempt", "event") and not ("node" in args or "pool" in args):
        raise ScenarioError(f"{where}.{action}: needs `node` or `pool`")
    if action == "event" and "type" not in args:
        raise ScenarioError(f"{where}.event: needs `type`")
    if action == "spotCapacity" and ("pool" not in args or "available" not in args):
        raise ScenarioError(f"{where}.spotCapacity: needs `pool` and `available`")
    if action == "scale" and ("workload" not in args or "replicas" not in args):
        raise ScenarioError(f"{where}.scale: needs `workload` and `replicas`")
    if action == "load" and ("workload" not in args or "percent" not in args):
        raise ScenarioError(f"{where}.load: needs `workload` and `percent`")
    return TimelineStep(at=float(at), action=action, args=dict(args), id=step_id)


def parse_scenario(data: Any) -> Scenario:
    if not isinstance(data, dict) or not data.get("name"):
        raise ScenarioError("a scenario is a mapping with a `name`")
    data = dict(data)
    cluster_data = dict(data.pop("cluster", None) or {})
    settings_data = dict(data.pop("settings", None) or {})
    scenario = Scenario(
        name=str(data.pop("name")),
        description=str(data.pop("description", "")),
        cluster=ClusterInfo(
            name=str(cluster_data.pop("name", "sim")),
            resource_group=str(cluster_data.pop("resourceGroup", "rg-sim")),
            region=str(cluster_data.pop("region", "eastus")),
        ),
        settings=Settings(
            node_delete_delay_seconds=float(settings_data.pop("nodeDeleteDelaySeconds", 5.0)),
            scale_down_unneeded_seconds=float(settings_data.pop("scaleDownUnneededSeconds", 600.0)),
            startup_seconds=float(settings_data.pop("startupSeconds", 0.0)),
            shutdown_seconds=float(settings_data.pop("shutdownSeconds", 1.0)),
            node_problem_detector_seconds=float(
                settings_data.pop("nodeProblemDetectorSeconds", 0.0)
            ),
            node_problem_detector_conditions=settings_data.pop(
                "nodeProblemDetectorConditions", None
            ),
            seed=int(settings_data.pop("seed", 0)),
            warm_start=bool(settings_data.pop("warmStart", False)),
            node_auto_drain=bool(settings_data.pop("nodeAutoDrain", True)),
            node_auto_drain_delay_seconds=float(
                settings_data.pop("nodeAutoDrainDelaySeconds", 2.0)
            ),
            node_auto_drain_retry_seconds=float(
                settings_data.pop("nodeAutoDrainRetrySeconds", 5.0)
            ),
            reboot_seconds=float(settings_data.pop("rebootSeconds", 60.0)),
            hpa_sync_seconds=float(settings_data.pop("hpaSyncSeconds", 15.0)),
        ),
        pools=[_pool(p, i) for i, p in enumerate(data.pop("pools", None) or [])],
        workloads=[_workload(w, i) for i, w in enumerate(data.pop("workloads", None) or [])],
        nodepools=[_nodepool(n, i) for i, n in enumerate(data.pop("nodePools", None) or [])],
        timeline=sorted(
            (_step(s, i) for i, s in enumerate(data.pop("timeline", None) or [])),
            key=lambda step: step.at,
        ),
    )
    for leftover, where in (
        (data, "scenario"),
        (cluster_data, "cluster"),
        (settings_data, "settings"),
    ):
        if leftover:
            raise ScenarioError(f"{where}: unknown keys {sorted(leftover)}")
    names = [p.name for p in scenario.pools]
    if len(set(names)) != len(names):
        raise ScenarioError("pools: names must be unique")
    nodepool_names = [n.name for n in scenario.nodepools]
    if len(set(nodepool_names)) != len(nodepool_names):
        raise ScenarioError("nodePools: names must be unique")
    return scenario


def shipped_scenarios() -> list[str]:
    folder = package_resources.files("rebalancer_sim") / "scenarios"
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    )


def load_scenario(path_or_name: str | Path) -> Scenario:
    """A scenario from a YAML file, or a shipped one by name (`aks-gpu-small`)."""
    path = Path(path_or_name)
    if path.is_file():
        text = path.read_text()
    else:
        name = str(path_or_name).removesuffix(".yaml")
        resource = package_resources.files("rebalancer_sim") / "scenarios" / f"{name}.yaml"
        if not resource.is_file():
            raise ScenarioError(
                f"no scenario file {path_or_name!r} and no shipped scenario of that name "
                f"(shipped: {', '.join(shipped_scenarios())})"
            )
        text = resource.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path_or_name}: not YAML: {exc}") from None
    return parse_scenario(data)

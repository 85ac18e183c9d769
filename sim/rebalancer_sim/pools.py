"""AKS node pools: how their nodes look (names, labels, taints, capacity, providerID) and a
cluster-autoscaler stand-in that grows a pool when pods cannot be scheduled.

A pool is a VM scale set `aks-<pool>-<8 digits>-vmss`; its nodes are named
`aks-<pool>-<digits>-vmss<6-char base-36 instance id>`, the Azure VM name (what IMDS lists in
`Resources`) is `aks-<pool>-<digits>-vmss_<decimal id>` (shared reference A.9, B.2). Spot pools
get AKS's `kubernetes.azure.com/scalesetpriority=spot` label and NoSchedule taint; GPU pools the
`kubernetes.azure.com/accelerator=nvidia` label, `nvidia.com/gpu` capacity and, as the AKS docs
set it up, the `sku=gpu:NoSchedule` taint.

The autoscaler adds nodes to the cheapest pool that fits an unschedulable pod, after the pool's
provisioning delay, within min/max and the pool's available spot capacity; it removes nodes
that have run no workload pods for `scale_down_unneeded_seconds`.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any

from rebalancer_sim.objects import Obj, controller_ref, is_terminating, parse_quantity, pod_requests
from rebalancer_sim.scheduling import (
    allocatable,
    insufficient,
    matches_node_selector_and_affinity,
    parse_taint,
    untolerated_taint,
)

SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
GPU_TAINT = "sku=gpu:NoSchedule"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
KUBELET_VERSION = "v1.32.4"
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(number: int, width: int = 6) -> str:
    digits = ""
    while number:
        number, remainder = divmod(number, 36)
        digits = _BASE36[remainder] + digits
    return digits.rjust(width, "0")


@dataclass
class PoolSpec:
    """One AKS node pool, as a scenario describes it."""

    name: str
    vm_size: str = "Standard_D4s_v5"
    priority: str = "regular"  # "spot" | "regular"
    mode: str = "user"  # "user" | "system"
    zones: list[str] = field(default_factory=lambda: ["1"])
    cpu: float = 4
    memory: str = "16Gi"
    gpus: int = 0
    max_pods: int = 110
    count: int = 1
    min_count: int = 0
    max_count: int | None = None  # None: the pool does not autoscale beyond count
    price_per_hour: float = 0.0  # on-demand price of the VM size
    spot_price_per_hour: float | None = None
    provisioning_seconds: float = 60.0
    eviction_policy: str = "Delete"  # spot only: "Delete" | "Deallocate"
    spot_capacity: int | None = None  # spot VMs Azure can give now; None: unlimited
    taints: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    gpu_taint: bool = True  # GPU pools get `sku=gpu:NoSchedule`, as the AKS GPU docs set them up

    @property
    def is_spot(self) -> bool:
        return self.priority == "spot"

    @property
    def hourly_price(self) -> float:
        if self.is_spot and self.spot_price_per_hour is not None:
            return self.spot_price_per_hour
        return self.price_per_hour

    @property
    def scale_set_digits(self) -> str:
        return f"{zlib.crc32(self.name.encode()) % 100_000_000:08d}"

    @property
    def scale_set(self) -> str:
        return f"aks-{self.name}-{self.scale_set_digits}-vmss"

    @property
    def upper_bound(self) -> int:
        return self.max_count if self.max_count is not None else self.count

    def all_taints(self) -> list[dict[str, Any]]:
        texts = list(self.taints)
        if self.is_spot:
            texts.insert(0, f"{SPOT_LABEL}=spot:NoSchedule")
        if self.gpus and self.gpu_taint and GPU_TAINT not in texts:
            texts.append(GPU_TAINT)
        return [parse_taint(text) for text in texts]


@dataclass(frozen=True)
class ClusterInfo:
    name: str = "sim"
    resource_group: str = "rg-sim"
    region: str = "eastus"

    @property
    def node_resource_group(self) -> str:
        return f"MC_{self.resource_group}_{self.name}_{self.region}"


def node_name(pool: PoolSpec, instance_id: int) -> str:
    return f"{pool.scale_set}{base36(instance_id)}"


def vm_name(pool: PoolSpec, instance_id: int) -> str:
    return f"{pool.scale_set}_{instance_id}"


def provider_id(pool: PoolSpec, instance_id: int, cluster: ClusterInfo) -> str:
    return (
        f"azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/"
        f"{cluster.node_resource_group.lower()}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{pool.scale_set}/virtualMachines/{instance_id}"
    )


def zone_of(pool: PoolSpec, instance_id: int, cluster: ClusterInfo) -> str:
    zone = pool.zones[instance_id % len(pool.zones)] if pool.zones else "0"
    return zone if zone == "0" or "-" in zone else f"{cluster.region}-{zone}"


def _reserved_millicores(cpu: float) -> int:
    """AKS kube-reserved CPU: 60m for the first core, 10m the second, 5m each of the next two,
    2.5m each above four."""
    cores = int(cpu)
    reserved = 60 if cores >= 1 else 0
    reserved += 10 if cores >= 2 else 0
    reserved += 5 * max(0, min(cores, 4) - 2)
    reserved += math.ceil(2.5 * max(0, cores - 4))
    return reserved


def capacity(pool: PoolSpec) -> tuple[dict[str, str], dict[str, str]]:
    memory_bytes = parse_quantity(pool.memory)
    capacity_values = {
        "cpu": str(int(pool.cpu)) if float(pool.cpu).is_integer() else f"{int(pool.cpu * 1000)}m",
        "memory": f"{int(memory_bytes // 1024)}Ki",
        "pods": str(pool.max_pods),
        "ephemeral-storage": "129886128Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    reserved_memory = (20 * pool.max_pods + 50 + 100) * 1024 * 1024
    allocatable_values = dict(capacity_values)
    allocatable_values["cpu"] = f"{int(pool.cpu * 1000) - _reserved_millicores(pool.cpu)}m"
    allocatable_values["memory"] = f"{int(max(0, memory_bytes - reserved_memory) // 1024)}Ki"
    allocatable_values["ephemeral-storage"] = "119703055367"
    if pool.gpus:
        capacity_values["nvidia.com/gpu"] = str(pool.gpus)
        allocatable_values["nvidia.com/gpu"] = str(pool.gpus)
    return capacity_values, allocatable_values


def build_node(
    pool: PoolSpec,
    instance_id: int,
    cluster: ClusterInfo,
    *,
    now: str,
    gpus_advertised: bool = True,
) -> Obj:
    """A Node as AKS registers it. `gpus_advertised=False`: no `nvidia.com/gpu` until a device
    plugin registers it (deviceplugin.py)."""
    name = node_name(pool, instance_id)
    zone = zone_of(pool, instance_id, cluster)
    labels = {
        "agentpool": pool.name,
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": pool.vm_size,
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": cluster.region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.azure.com/agentpool": pool.name,
        "kubernetes.azure.com/cluster": cluster.node_resource_group,
        "kubernetes.azure.com/mode": pool.mode,
        "kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202601.01.0",
        "kubernetes.azure.com/os-sku": "Ubuntu",
        "kubernetes.azure.com/role": "agent",
        "kubernetes.azure.com/storageprofile": "managed",
        "kubernetes.azure.com/storagetier": "Premium_LRS",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/role": "agent",
        "node-role.kubernetes.io/agent": "",
        "node.kubernetes.io/instance-type": pool.vm_size,
        "storageprofile": "managed",
        "storagetier": "Premium_LRS",
        "topology.disk.csi.azure.com/zone": zone if zone != "0" else "",
        "topology.kubernetes.io/region": cluster.region,
        "topology.kubernetes.io/zone": zone,
    }
    if pool.is_spot:
        labels[SPOT_LABEL] = "spot"
    if pool.gpus:
        labels["kubernetes.azure.com/accelerator"] = "nvidia"
        labels["accelerator"] = "nvidia"
    labels.update(pool.labels)
    capacity_values, allocatable_values = capacity(pool)
    if not gpus_advertised:
        capacity_values.pop("nvidia.com/gpu", None)
        allocatable_values.pop("nvidia.com/gpu", None)
    address = f"10.224.{(instance_id // 250) % 250}.{instance_id % 250 + 4}"
    spec: Obj = {"providerID": provider_id(pool, instance_id, cluster), "podCIDR": ""}
    taints = pool.all_taints()
    if taints:
        spec["taints"] = taints
    conditions = [
        _condition(
            "NetworkUnavailable", "False", now, "RouteCreated", "RouteController created a route"
        ),
        _condition(
            "MemoryPressure",
            "False",
            now,
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        _condition(
            "DiskPressure", "False", now, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
        ),
        _condition(
            "PIDPressure",
            "False",
            now,
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        _condition("Ready", "True", now, "KubeletReady", "kubelet is posting ready status"),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity_values,
            "allocatable": allocatable_values,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{instance_id:032x}",
                "systemUUID": f"{zlib.crc32(name.encode()):08x}-0000-0000-0000-000000000000",
                "bootID": f"{zlib.crc32(now.encode() + name.encode()):08x}-boot",
                "kernelVersion": "5.15.0-1079-azure",
                "osImage": "Ubuntu 22.04.5 LTS",
                "containerRuntimeVersion": "containerd://1.7.27-1",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def _condition(kind: str, status: str, now: str, reason: str, message: str) -> Obj:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def template_node(pool: PoolSpec, cluster: ClusterInfo) -> Obj:
    """What a new node of the pool would look like (for the autoscaler's fit check)."""
    return build_node(pool, 0, cluster, now="1970-01-01T00:00:00Z")


def pod_fits_pool(pod: Obj, pool: PoolSpec, template: Obj) -> bool:
    spec = pod.get("spec", {})
    if untolerated_taint(spec.get("tolerations") or [], template["spec"].get("taints") or []):
        return False
    if not matches_node_selector_and_affinity(spec, template):
        return False
    return not insufficient(pod_requests(pod), allocatable(template))


def is_workload_pod(pod: Obj) -> bool:
    """Counts against scale-down: anything but DaemonSet pods and finished or terminating ones."""
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "DaemonSet":
        return False
    return not is_terminating(pod) and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )

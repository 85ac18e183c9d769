"""GPUs advertised by a device plugin, as on AKS without its managed GPU setup.

A GPU node's kubelet shows `nvidia.com/gpu` only once the NVIDIA device plugin has registered
with it: a pod of the device-plugin DaemonSet running on that node. Until then (and for ever, when
the DaemonSet does not tolerate the node's taints, the spot taint being the one the field keeps
forgetting) the node advertises no GPU and no GPU pod can be scheduled there. When the plugin's
pod goes, the kubelet keeps the capacity and sets the allocatable count to 0.

On only when a scenario has a device-plugin workload (`devicePlugin: true` on a DaemonSet, whose
pods then carry `DEVICE_PLUGIN_ANNOTATION`); otherwise GPU nodes advertise their GPUs from the
start, as before. The kubelet's registration delay (a few seconds) is not modelled.
"""

from __future__ import annotations

from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.objects import Obj, annotation, is_terminating, pod_phase
from rebalancer_sim.scenario import DEVICE_PLUGIN_ANNOTATION, GPU
from rebalancer_sim.store import Change

POOL_LABEL = "kubernetes.azure.com/agentpool"


def is_device_plugin_pod(pod: Obj | None) -> bool:
    return pod is not None and annotation(pod, DEVICE_PLUGIN_ANNOTATION) == GPU


def registers(pod: Obj) -> bool:
    """A device-plugin pod that has registered with its node's kubelet."""
    return is_device_plugin_pod(pod) and pod_phase(pod) == "Running" and not is_terminating(pod)


class DevicePlugins:
    def __init__(self, cloud: Cloud) -> None:
        self.cloud = cloud
        self.store = cloud.store
        self._dirty: dict[str, None] = {}
        self.store.listeners.append(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.resource is R.NODES and change.type == "ADDED":
            self._dirty[change.new["metadata"]["name"]] = None
        if change.resource is not R.PODS:
            return
        for pod in (change.old, change.new):
            if is_device_plugin_pod(pod) and pod is not None:
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    self._dirty[node] = None

    def pending_registration(self, node_name: str) -> bool:
        """A device-plugin pod is bound to the node and has not registered yet: its GPUs are on
        their way (the cluster autoscaler counts them as coming)."""
        return any(
            is_device_plugin_pod(pod) and not is_terminating(pod) and not registers(pod)
            for pod in self.store.pods_on_node(node_name)
        )

    def reconcile(self) -> int:
        if not self.cloud.gpus_from_device_plugin:
            self._dirty.clear()  # GPUs are advertised from the start
            return 0
        changed = 0
        while self._dirty:
            name = next(iter(self._dirty))
            del self._dirty[name]
            node = self.store.get(R.NODES, "", name)
            if node is None:
                continue
            pool = self.cloud.pools.get(node["metadata"].get("labels", {}).get(POOL_LABEL, ""))
            if pool is None or not pool.gpus:
                continue
            registered = any(registers(pod) for pod in self.store.pods_on_node(name))
            status = node.get("status") or {}
            capacity = dict(status.get("capacity") or {})
            allocatable = dict(status.get("allocatable") or {})
            if registered:
                capacity[GPU] = allocatable[GPU] = str(pool.gpus)
            elif GPU in capacity:
                allocatable[GPU] = "0"
            if capacity == status.get("capacity") and allocatable == status.get("allocatable"):
                continue
            self.store.update(
                R.NODES, dict(node, status=dict(status, capacity=capacity, allocatable=allocatable))
            )
            changed += 1
        return changed

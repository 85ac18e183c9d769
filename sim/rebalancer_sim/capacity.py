"""A cluster-autoscaler stand-in: grow pools for unschedulable pods, shrink idle ones.

Scale-up: each pod the scheduler marked `Unschedulable` is first fitted into nodes already
being provisioned, else a new VM is requested in the cheapest pool whose node template fits it
(taints, selector, affinity, resources) and that may grow (below max, spot capacity left).
A pod counts once it has been unschedulable for `new_pod_scale_up_delay_seconds` (the real
autoscaler's `--new-pod-scale-up-delay`, 0 by default there and here), timed from when this
stand-in first saw it unschedulable, not from its second-precision creation time.
Scale-down: a node above its pool's minimum that has run no workload pod (DaemonSet pods do not
count) for `scale_down_unneeded_seconds` is deleted. Pools without `max_count` never scale.
Nodes of a GPU pool that are about to advertise their GPUs (a device plugin starting there, see
deviceplugin.py) count as capacity on its way, as they would be provisioning.

Status: like cluster-autoscaler 1.30 and later, it keeps the ConfigMap
`kube-system/cluster-autoscaler-status` (key `status`, YAML) up to date with its node groups
(the pools it may scale, named by their VM scale set as on AKS), their min and max and the nodes
registered in each: how a reader learns of a pool that has no node. Rewritten when a figure
changes, not every loop.

`rebalancer simulate`'s autoscaler differs on purpose (spot requests that hang and back off,
balanced pools); rebalancer/simulate/world.py says how and why.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.objects import Obj, condition_true, is_terminating, pod_requests
from rebalancer_sim.pools import PoolSpec, is_workload_pod, pod_fits_pool, template_node
from rebalancer_sim.scheduler import Scheduler
from rebalancer_sim.scheduling import allocatable, insufficient
from rebalancer_sim.store import format_time

STATUS_CONFIGMAP = ("kube-system", "cluster-autoscaler-status")
POOL_LABEL = "kubernetes.azure.com/agentpool"


def node_pool(node: Obj) -> str:
    return str((node.get("metadata") or {}).get("labels", {}).get(POOL_LABEL, ""))


def _node_counts(nodes: list[Obj]) -> dict[str, object]:
    ready = sum(1 for node in nodes if condition_true(node, "Ready"))
    return {
        "registered": {"total": len(nodes), "ready": ready, "notStarted": 0},
        "longUnregistered": 0,
        "unregistered": 0,
    }


class Autoscaler:
    def __init__(
        self,
        store_cloud: Cloud,
        scheduler: Scheduler,
        *,
        scale_down_unneeded_seconds: float = 600.0,
        check_interval_seconds: float = 10.0,
        new_pod_scale_up_delay_seconds: float = 0.0,
        gpus_coming: Callable[[str], bool] | None = None,
    ) -> None:
        """`gpus_coming(node)`: the node's GPUs are about to be advertised (a device plugin is
        starting there): counted as capacity on its way, as the real autoscaler waits for a GPU
        node's GPUs before it calls the node ready."""
        self._gpus_coming = gpus_coming or (lambda _node: False)
        self.cloud = store_cloud
        self.store = store_cloud.store
        self.scheduler = scheduler
        self.scale_down_unneeded_seconds = scale_down_unneeded_seconds
        self.check_interval_seconds = check_interval_seconds
        self.new_pod_scale_up_delay_seconds = new_pod_scale_up_delay_seconds
        self._unschedulable_since: dict[str, float] = {}  # pod uid -> when first seen unschedulable
        self._templates: dict[str, Obj] = {}
        self._empty_since: dict[str, float] = {}
        self._next_scale_down_check = 0.0
        self.scale_ups = 0
        self.scale_downs = 0
        self._published: list[dict[str, object]] | None = None

    def _template(self, pool_name: str) -> Obj:
        if pool_name not in self._templates:
            self._templates[pool_name] = template_node(
                self.cloud.pools[pool_name], self.cloud.cluster
            )
        return self._templates[pool_name]

    def reconcile(self) -> int:
        return self._scale_up() + self._scale_down() + self._publish_status()

    def _publish_status(self) -> int:
        """Rewrite the status ConfigMap when a node group's figures changed."""
        nodes = list(self.store.items(R.NODES))
        groups: list[dict[str, object]] = []
        for pool in sorted(self.cloud.pools.values(), key=lambda p: p.name):
            if pool.max_count is None:
                continue
            members = [n for n in nodes if node_pool(n) == pool.name]
            groups.append(
                {
                    "name": pool.scale_set,
                    "health": {
                        "status": "Healthy",
                        "nodeCounts": _node_counts(members),
                        "cloudProviderTarget": len(self.cloud.pool_vms(pool.name)),
                        "minSize": pool.min_count,
                        "maxSize": pool.max_count,
                    },
                    "scaleUp": {"status": "NoActivity"},
                    "scaleDown": {"status": "NoCandidates"},
                }
            )
        if groups == self._published:
            return 0
        self._published = groups
        now = format_time(self.store.clock.now())
        status = {
            "time": now,
            "autoscalerStatus": "Running",
            "clusterWide": {
                "health": {"status": "Healthy", "nodeCounts": _node_counts(nodes)},
                "scaleUp": {"status": "NoActivity"},
                "scaleDown": {"status": "NoCandidates"},
            },
            "nodeGroups": groups,
        }
        configmap = {
            "metadata": {
                "namespace": STATUS_CONFIGMAP[0],
                "name": STATUS_CONFIGMAP[1],
                "annotations": {"cluster-autoscaler.kubernetes.io/last-updated": now},
            },
            "data": {"status": yaml.safe_dump(status, sort_keys=False)},
        }
        current = self.store.get(R.CONFIGMAPS, *STATUS_CONFIGMAP)
        if current is None:
            self.store.create(R.CONFIGMAPS, configmap)
        else:
            self.store.update(R.CONFIGMAPS, dict(current, **configmap))
        return 1

    def _unschedulable(self) -> list[Obj]:
        now = self.store.clock.now().timestamp()
        pods, seen = [], {}
        for key in self.scheduler.pending_keys():
            pod = self.store.get(R.PODS, *key)
            if pod is None or is_terminating(pod) or pod["spec"].get("nodeName"):
                continue
            for condition in pod.get("status", {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("reason") == (
                    "Unschedulable"
                ):
                    uid = pod["metadata"]["uid"]
                    seen[uid] = self._unschedulable_since.get(uid, now)
                    if now - seen[uid] >= self.new_pod_scale_up_delay_seconds:
                        pods.append(pod)
        self._unschedulable_since = seen
        return pods

    def _scale_up(self) -> int:
        pods = self._unschedulable()
        if not pods:
            return 0
        pools = sorted(
            (p for p in self.cloud.pools.values() if p.max_count is not None),
            key=lambda p: (p.hourly_price, p.name),
        )
        inflight = {pool.name: self._room(pool) for pool in pools}
        requested = 0
        for pod in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            requests = pod_requests(pod)
            fitting = [p for p in pools if pod_fits_pool(pod, p, self._template(p.name))]
            if self._fit_inflight(requests, fitting, inflight):
                continue
            for pool in fitting:
                if self.cloud.can_grow(pool):
                    self.cloud.create_vm(pool.name)
                    free = allocatable(self._template(pool.name))
                    for name, amount in requests.items():
                        free[name] = free.get(name, 0.0) - amount
                    inflight[pool.name].append(free)
                    requested += 1
                    break
        self.scale_ups += requested
        return requested

    def _room(self, pool: PoolSpec) -> list[dict[str, float]]:
        """What the pool's VMs can still take: a VM provisioning (or whose GPUs are not
        advertised yet) its whole template; a running node what its pods leave free. The real
        autoscaler first simulates the pending pods on the nodes there are (a pod marked
        unschedulable may fit a node that became Ready since): only what fits nowhere asks
        for a node. Without the running nodes' room, a busy machine, where the scheduler's
        retry lags, made it ask for nodes nobody needed."""
        rooms = []
        for vm in self.cloud.pool_vms(pool.name):
            if vm.state == "provisioning" or (
                vm.state == "running" and pool.gpus and self._gpus_coming(vm.node_name)
            ):
                rooms.append(allocatable(self._template(pool.name)))
            elif vm.state == "running":
                node = self.store.get(R.NODES, "", vm.node_name)
                if (
                    node is None
                    or node["spec"].get("unschedulable")
                    or is_terminating(node)
                    or not condition_true(node, "Ready")
                    # a taint the pool's nodes are not made with (a drain's, an eviction's)
                    or (node["spec"].get("taints") or [])
                    != (self._template(pool.name)["spec"].get("taints") or [])
                ):
                    continue
                free = allocatable(node)
                for name, amount in self.scheduler.used_on(vm.node_name).items():
                    free[name] = free.get(name, 0.0) - amount
                rooms.append(free)
        return rooms

    @staticmethod
    def _fit_inflight(
        requests: dict[str, float],
        pools: list[PoolSpec],
        inflight: dict[str, list[dict[str, float]]],
    ) -> bool:
        for pool in pools:
            for free in inflight.get(pool.name, []):
                if not insufficient(requests, free):
                    for name, amount in requests.items():
                        free[name] = free.get(name, 0.0) - amount
                    return True
        return False

    def _scale_down(self) -> int:
        now = self.store.clock.now().timestamp()
        if now < self._next_scale_down_check:
            return 0
        self._next_scale_down_check = now + self.check_interval_seconds
        removed = 0
        for pool in self.cloud.pools.values():
            if pool.max_count is None:
                continue
            running = self.cloud.pool_vms(pool.name, "running")
            count = len(self.cloud.pool_vms(pool.name))
            for vm in running:
                busy = any(is_workload_pod(p) for p in self.store.pods_on_node(vm.node_name))
                if busy:
                    self._empty_since.pop(vm.node_name, None)
                    continue
                since = self._empty_since.setdefault(vm.node_name, now)
                if now - since >= self.scale_down_unneeded_seconds and count > pool.min_count:
                    self.cloud.delete_vm(vm.node_name)
                    self._empty_since.pop(vm.node_name, None)
                    count -= 1
                    removed += 1
        self.scale_downs += removed
        return removed

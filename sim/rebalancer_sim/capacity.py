"""A cluster-autoscaler stand-in: grow pools for unschedulable pods, shrink idle ones.

Scale-up: each pod the scheduler marked `Unschedulable` is first fitted into nodes already
being provisioned, else a new VM is requested in the cheapest pool whose node template fits it
(taints, selector, affinity, resources) and that may grow (below max, spot capacity left).
Scale-down: a node above its pool's minimum that has run no workload pod (DaemonSet pods do not
count) for `scale_down_unneeded_seconds` is deleted. Pools without `max_count` never scale.
"""

from __future__ import annotations

from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.objects import Obj, is_terminating, pod_requests
from rebalancer_sim.pools import PoolSpec, is_workload_pod, pod_fits_pool, template_node
from rebalancer_sim.scheduler import Scheduler
from rebalancer_sim.scheduling import allocatable, insufficient


class Autoscaler:
    def __init__(
        self,
        store_cloud: Cloud,
        scheduler: Scheduler,
        *,
        scale_down_unneeded_seconds: float = 600.0,
        check_interval_seconds: float = 10.0,
    ) -> None:
        self.cloud = store_cloud
        self.store = store_cloud.store
        self.scheduler = scheduler
        self.scale_down_unneeded_seconds = scale_down_unneeded_seconds
        self.check_interval_seconds = check_interval_seconds
        self._templates: dict[str, Obj] = {}
        self._empty_since: dict[str, float] = {}
        self._next_scale_down_check = 0.0
        self.scale_ups = 0
        self.scale_downs = 0

    def _template(self, pool_name: str) -> Obj:
        if pool_name not in self._templates:
            self._templates[pool_name] = template_node(
                self.cloud.pools[pool_name], self.cloud.cluster
            )
        return self._templates[pool_name]

    def reconcile(self) -> int:
        return self._scale_up() + self._scale_down()

    def _unschedulable(self) -> list[Obj]:
        pods = []
        for key in self.scheduler.pending_keys():
            pod = self.store.get(R.PODS, *key)
            if pod is None or is_terminating(pod) or pod["spec"].get("nodeName"):
                continue
            for condition in pod.get("status", {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("reason") == (
                    "Unschedulable"
                ):
                    pods.append(pod)
        return pods

    def _scale_up(self) -> int:
        pods = self._unschedulable()
        if not pods:
            return 0
        pools = sorted(
            (p for p in self.cloud.pools.values() if p.max_count is not None),
            key=lambda p: (p.hourly_price, p.name),
        )
        inflight: dict[str, list[dict[str, float]]] = {
            pool.name: [
                allocatable(self._template(pool.name))
                for _ in self.cloud.pool_vms(pool.name, "provisioning")
            ]
            for pool in pools
        }
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

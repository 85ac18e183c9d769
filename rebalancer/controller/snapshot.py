"""One immutable view of the cluster for one planning pass, with the indexes every step needs.

Built by the controller from its informer caches (and by simulations from their own world); read
by the planner and by the measurements. Indexes are computed once, on first use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from rebalancer.azure.prices import PriceTable
from rebalancer.controller.history import History
from rebalancer.controller.model import HoldInfo, NodeInfo, PodInfo, ScalerInfo, WorkloadInfo
from rebalancer.controller.risk import LEVELS, GroupKey, Risk

WorkloadKey = tuple[str, str, str]  # (kind, namespace, name)
PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    nodes: Mapping[str, NodeInfo]
    pods: Mapping[PodKey, PodInfo]
    workloads: Mapping[WorkloadKey, WorkloadInfo]
    replicaset_owners: Mapping[PodKey, str]  # (namespace, replicaset) -> deployment
    history: History = field(default_factory=History)
    holds: Mapping[PodKey, HoldInfo] = field(default_factory=dict)  # our PDBs, by (ns, name)
    scalers: Mapping[PodKey, ScalerInfo] = field(default_factory=dict)  # HPAs, by (ns, name)
    # The eviction risk of each spot group as last assessed (the recorder, every few seconds).
    risks: Mapping[GroupKey, Risk] = field(default_factory=dict)
    # The controller's prices (bundled, the Retail Prices API, an operator's file); None: none.
    prices: PriceTable | None = None

    def level_of(self, node: NodeInfo) -> str:
        """The risk level of a spot node's pool and zone (its riskiest VM size); "" unknown."""
        where = (node.pool, node.zone)
        levels = [r.level for r in self.risks.values() if (r.pool, r.zone) == where]
        return max(levels, key=LEVELS.index) if levels else ""

    def workload_of(self, pod: PodInfo) -> WorkloadInfo | None:
        """The Deployment (through its ReplicaSet) or StatefulSet that owns a pod."""
        if pod.owner is None:
            return None
        if pod.owner.kind == "ReplicaSet":
            deployment = self.replicaset_owners.get((pod.namespace, pod.owner.name))
            if deployment is None:
                return None
            return self.workloads.get(("Deployment", pod.namespace, deployment))
        if pod.owner.kind == "StatefulSet":
            return self.workloads.get(("StatefulSet", pod.namespace, pod.owner.name))
        return None

    @cached_property
    def pods_by_node(self) -> Mapping[str, list[PodInfo]]:
        index: dict[str, list[PodInfo]] = defaultdict(list)
        for pod in self.pods.values():
            if pod.node_name:
                index[pod.node_name].append(pod)
        return index

    @cached_property
    def pods_by_workload(self) -> Mapping[WorkloadKey, list[PodInfo]]:
        index: dict[WorkloadKey, list[PodInfo]] = defaultdict(list)
        for pod in self.pods.values():
            workload = self.workload_of(pod)
            if workload is not None:
                index[workload.key].append(pod)
        return index

    @cached_property
    def scaler_by_target(self) -> Mapping[WorkloadKey, ScalerInfo]:
        """The HPA that scales each workload, (kind, namespace, name) -> it; of two on one
        workload (upstream then acts on neither), the first by name."""
        index: dict[WorkloadKey, ScalerInfo] = {}
        for scaler in sorted(self.scalers.values(), key=lambda s: s.name, reverse=True):
            index[(scaler.target[0], scaler.namespace, scaler.target[1])] = scaler
        return index

    @cached_property
    def owners(self) -> Mapping[PodKey, WorkloadKey]:
        return {
            pod.key: workload for workload, pods in self.pods_by_workload.items() for pod in pods
        }

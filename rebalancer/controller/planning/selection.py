"""Which objects the planner acts on: managed workloads, doomed pods, targeted workloads."""

from __future__ import annotations

from collections.abc import Mapping

from rebalancer.controller.model import PodInfo, WorkloadInfo
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.policy import in_force


def labels_match(labels: Mapping[str, str], selector: Mapping[str, str | None]) -> bool:
    return all(
        key in labels and (value is None or labels[key] == value) for key, value in selector.items()
    )


def managed(workload: WorkloadInfo | None, settings: Settings) -> bool:
    """Failed over make-before-break (the rest of a doomed node is simply drained)."""
    if workload is None or workload.opted_out or workload.refused:
        return False
    if not labels_match(workload.labels, settings.workload_labels):
        return False
    return workload.gpus_per_replica > 0 or not settings.gpu_workloads_only


def doomed(pod: PodInfo) -> bool:
    return not (pod.daemonset or pod.mirror or pod.finished or pod.deleting)


def targeted(workload: WorkloadInfo | None) -> bool:
    if workload is None:
        return False
    policy = in_force(workload.annotations).policy
    return policy is not None and bool(policy.target)

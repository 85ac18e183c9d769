"""Do-not-disrupt given back once a return's new replica (or a replacement for Karpenter's
disruption of a node) has loaded.

The webhook holds a return's (or a move's) new replica from Karpenter's voluntary disruption
while it loads (admission.py, names.HELD_UNTIL_READY): consolidation would otherwise delete its
node mid-load, break before make. Once it is Ready and the return is over (finished, given up or
dropped) it is an ordinary spot replica, and held longer Karpenter could never consolidate or
drift its node (drift waits for a `terminationGracePeriod`, consolidation for ever). A spare's or
a fail-over replacement's hold, and a pod's own value, carry no mark and are left alone.
"""

from __future__ import annotations

from rebalancer.controller.actions import Action, EndLoadHold
from rebalancer.controller.contain import Containment, on_workload
from rebalancer.controller.model import PodInfo, WorkloadInfo
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.returns import active_record
from rebalancer.controller.snapshot import Snapshot


def end_load_holds(snapshot: Snapshot, contain: Containment) -> Proposal:
    actions: list[Action] = []
    for pod in snapshot.pods.values():
        if not pod.held_until_ready or not pod.ready or pod.deleting:
            continue
        workload = snapshot.workload_of(pod)
        if workload is None:
            continue  # its ReplicaSet not in the caches yet: whether a return is on is unknown
        # Each workload on its own: one that cannot be judged keeps its hold, the others not.
        actions += contain.run("load-hold", on_workload(workload.key), [], _loaded, pod, workload)
    return Proposal.of(actions)


def _loaded(pod: PodInfo, workload: WorkloadInfo) -> list[Action]:
    if active_record(workload) is not None:
        return []  # not over yet: the return retires its old replica first
    if workload.surge is not None and not workload.surge.completed:
        return []  # a replacement: the doomed replica goes first
    return [EndLoadHold(pod.key)]

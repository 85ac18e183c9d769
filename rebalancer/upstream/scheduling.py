"""Which of the nodes a pod fits the scheduler prefers: kube-scheduler's default scoring, as the
emulator and `rebalancer simulate` model it.

The real scheduler sums weighted plugin scores, each scaled to 0-100 over the feasible nodes
(pkg/scheduler/apis/config/v1/default_plugins.go): TaintToleration 3 (fewer untolerated
PreferNoSchedule taints), NodeAffinity 2 (preferred node-affinity weights), PodTopologySpread 2
(the system default spreads a controller's pods over hostnames and zones), NodeResourcesFit 1
(least allocated), BalancedAllocation 1, ImageLocality 1. Both models rank instead, in that
order of weight: a node with an untolerated PreferNoSchedule taint loses to one without even
when the pod prefers it (3 x 100 outweighs 2 x 100; tests/sim/test_scheduler_scoring.py checks
this against the real kube-scheduler), then preferred affinity, then the fewer pods of the same
owner already there. The ranking equals the sum wherever one criterion decides by a full scale
step, which covers the controller's cool-down taint and the webhook's pool preference; it can
differ where several partial scores add up (two spread scores against one affinity weight).
"""

from __future__ import annotations


def node_preference(
    *, untolerated_prefer_no_schedule: int, preferred_affinity_weight: int, owner_pods_on_node: int
) -> tuple[int, int, int]:
    """A sort key over the feasible nodes, the scheduler's choice first. Callers append their
    own last tie-breaks (the emulator: least allocated, then the name)."""
    return untolerated_prefer_no_schedule, -preferred_affinity_weight, owner_pods_on_node

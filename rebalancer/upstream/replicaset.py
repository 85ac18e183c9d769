"""Which pods a ReplicaSet deletes when it has more than it wants: upstream's
`getPodsToDelete` (pkg/controller/replicaset) sorting by `controller.ActivePodsWithRanks`
(pkg/controller/controller_utils.go), as of Kubernetes 1.34, with its feature gates at their
defaults (PodDeletionCost on, LogarithmicScaleDown GA and locked on).

The pod to delete first is, rule by rule until one decides:
1. unassigned (no `spec.nodeName`) before assigned;
2. phase Pending before Unknown before Running;
3. not Ready before Ready;
4. lower `controller.kubernetes.io/pod-deletion-cost` first;
5. more active pods of the same owner (all ReplicaSets of its Deployment) on its node first;
6. both Ready: later Ready first, compared by log2 of the time since (equal buckets: the lower
   UID first, and the rules below are not reached);
7. more container restarts first (regular containers, then sidecars);
8. later created first, by log2 bucket the same way (equal buckets: the lower UID).

Upstream sorts with an unstable sort and this comparison is not always transitive (rule 6 can
skip rule 7 for one pair and not for another); here the sort is stable, so pods equal under
every rule keep the caller's order. A caller that wants a fixed order passes them sorted.

Times are seconds on any one scale (epoch seconds, or the simulator's virtual seconds); `None`
stands for upstream's zero time (a field not set), which counts as later than any time.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rebalancer.names import DELETION_COST

# podPhaseToOrdinal; any other phase reads as 0 (a Go map's zero value), as upstream.
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}
_INT32 = range(-(2**31), 2**31)

Pod = TypeVar("Pod")


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the ReplicaSet controller reads of one active pod when it picks what to delete."""

    uid: str
    node: str = ""  # spec.nodeName; "" while unassigned
    phase: str = "Pending"
    ready: bool = False
    ready_since: float | None = None  # the Ready condition's lastTransitionTime (when Ready)
    deletion_cost: int = 0  # parsed with `deletion_cost`
    restarts: int = 0  # the highest restartCount of its regular containers
    sidecar_restarts: int = 0  # the highest of its restartable init containers (sidecars)
    created: float | None = None  # metadata.creationTimestamp


def deletion_cost(annotations: Mapping[str, str]) -> int:
    """`GetDeletionCostFromPodAnnotations`: a base-10 int32 without a plus sign or leading
    zeros; anything else (and no annotation) is 0."""
    text = annotations.get(DELETION_COST)
    if not text:
        return 0
    if not (text[0] == "-" or text == "0" or "1" <= text[0] <= "9"):
        return 0
    digits = text[1:] if text[0] == "-" else text
    if not digits.isascii() or not digits.isdigit():
        return 0
    value = int(text)
    return value if value in _INT32 else 0


def victims(
    pods: Sequence[Pod],
    count: int,
    *,
    facts: Callable[[Pod], PodFacts],
    related_nodes: Iterable[str],
    now: float | None,
) -> list[Pod]:
    """`getPodsToDelete`: the `count` of `pods` (the ReplicaSet's active pods) to delete.
    `related_nodes`: the node ("" if none) of every active pod of the same owner, this
    ReplicaSet's and its sibling ReplicaSets' (upstream's `getIndirectlyRelatedPods`)."""
    if count <= 0:
        return []
    if count >= len(pods):
        return list(pods)
    return deletion_order(pods, facts=facts, related_nodes=related_nodes, now=now)[:count]


def deletion_order(
    pods: Sequence[Pod],
    *,
    facts: Callable[[Pod], PodFacts],
    related_nodes: Iterable[str],
    now: float | None,
) -> list[Pod]:
    """All of `pods`, the first to delete first (see the module's rules)."""
    on_node = Counter(related_nodes)
    ranked = [(facts(pod), pod) for pod in pods]

    def compare(left: tuple[PodFacts, Pod], right: tuple[PodFacts, Pod]) -> int:
        a, b = left[0], right[0]
        rank_a, rank_b = on_node[a.node], on_node[b.node]
        if deletes_first(a, b, rank_a=rank_a, rank_b=rank_b, now=now):
            return -1
        if deletes_first(b, a, rank_a=rank_b, rank_b=rank_a, now=now):
            return 1
        return 0

    return [pod for _, pod in sorted(ranked, key=functools.cmp_to_key(compare))]


def deletes_first(a: PodFacts, b: PodFacts, *, rank_a: int, rank_b: int, now: float | None) -> bool:
    """`ActivePodsWithRanks.Less`: whether `a` goes before `b`. A rank is the count of active
    pods of the owner on the pod's node; `now` None compares times without log2 buckets."""
    if a.node != b.node and (not a.node or not b.node):
        return not a.node
    phase_a, phase_b = _PHASE_ORDINAL.get(a.phase, 0), _PHASE_ORDINAL.get(b.phase, 0)
    if phase_a != phase_b:
        return phase_a < phase_b
    if a.ready != b.ready:
        return not a.ready
    if a.deletion_cost != b.deletion_cost:
        return a.deletion_cost < b.deletion_cost
    if rank_a != rank_b:
        return rank_a > rank_b
    if a.ready and b.ready and a.ready_since != b.ready_since:
        return _later_first(a.ready_since, b.ready_since, a.uid, b.uid, now)
    if a.restarts != b.restarts:
        return a.restarts > b.restarts
    if a.sidecar_restarts != b.sidecar_restarts:
        return a.sidecar_restarts > b.sidecar_restarts
    if a.created != b.created:
        return _later_first(a.created, b.created, a.uid, b.uid, now)
    return False


def _later_first(
    first: float | None, second: float | None, uid_first: str, uid_second: str, now: float | None
) -> bool:
    """Upstream's comparison of two different times under LogarithmicScaleDown."""
    if now is None or first is None or second is None:
        return _after_or_zero(first, second)
    difference = _log2_bucket(first, now) - _log2_bucket(second, now)
    if difference == 0:
        return uid_first < uid_second
    return difference < 0


def _after_or_zero(first: float | None, second: float | None) -> bool:
    """`afterOrZero`: an unset time counts as later than any."""
    if first is None or second is None:
        return first is None
    return first > second


def _log2_bucket(moment: float, now: float) -> int:
    """`logarithmicRankDiff`'s rank: floor(log2(nanoseconds since)), -1 if not before `now`."""
    nanoseconds = round((now - moment) * 1e9)
    return nanoseconds.bit_length() - 1 if nanoseconds > 0 else -1

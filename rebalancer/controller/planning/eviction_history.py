"""The eviction history: every notice recorded once, and the Preempt counts read from it."""

from __future__ import annotations

from collections import defaultdict

from rebalancer.controller.actions import Action, RecordHistory
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.history import WINDOWS, Entry
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.vocabulary import KARPENTER_DISRUPTION, MANUAL


def new_entries(snapshot: Snapshot) -> list[Entry]:
    """Notices on nodes that the history does not know yet (every type: the risk model wants
    them all; counts look at Preempts), as the history admits them (`History.admit`: the
    controller's observation, rate-limited per node)."""
    seen = [
        Entry(
            event_id=notice.event_id,
            event_type=notice.event_type,
            node=node.name,
            pool=node.pool,
            zone=node.zone,
            sku=node.sku,
            spot=node.spot,
            first_seen=snapshot.now,
        )
        for node in snapshot.nodes.values()
        for notice in node.notices
        if notice.event_type not in (MANUAL, KARPENTER_DISRUPTION)
    ]
    return snapshot.history.admit(seen, now=snapshot.now)


def record_history(snapshot: Snapshot, settings: Settings, contain: Containment) -> Proposal:
    """Every notice not yet in the eviction history is written into it (`RecordHistory`): the
    cool-down and the return's quiet time are read from that history, so they survive a new
    leader."""
    return Proposal.of(
        contain.run("history", about("eviction history"), [], _history_one, snapshot, settings)
    )


def _history_one(snapshot: Snapshot, settings: Settings) -> list[Action]:
    new = new_entries(snapshot)
    history = snapshot.history
    if not settings.record_history or (history.since is not None and not new):
        return []
    # No record yet (or an unreadable one): start it now, so the quiet time counts from here.
    return [RecordHistory(history.with_entries(new, now=snapshot.now), tuple(new))]


def preempts_last_hour(snapshot: Snapshot, pool: str, zone: str) -> int:
    """Preempt notices of a pool and zone in the last hour: the history's, and the ones this
    pass sees that it has not recorded yet."""
    return preempt_counts(snapshot).get((pool, zone), 0)


def preempt_counts(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """`preempts_last_hour` of every (pool, zone) at once: one walk of the history and nodes."""
    window = WINDOWS["1h"]
    counts: dict[tuple[str, str], int] = defaultdict(int)
    recorded = snapshot.history.preempts(now=snapshot.now, window=window)
    for entry in (*recorded, *new_entries(snapshot)):
        if entry.preempt and snapshot.now - entry.first_seen <= window:
            counts[(entry.pool, entry.zone)] += 1
    return counts

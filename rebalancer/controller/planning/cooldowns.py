"""Steering away from an evicted pool: the rest of its spot nodes (same pool and zone) are
tainted PreferNoSchedule for a cool-down, longer for a pool evicted again and again."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from rebalancer import names
from rebalancer.controller.actions import Action, EndCooldown, StartCooldown
from rebalancer.controller.contain import Containment, about
from rebalancer.controller.planning.eviction_history import preempt_counts
from rebalancer.controller.planning.proposal import Proposal
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.notices import Notice
from rebalancer.timefmt import parse_iso
from rebalancer.vocabulary import MANUAL, EventType

# Cool-down taints written per pass: a wave's cordons and surges (planned in the next pass) must
# never queue behind them for the request budget.
STEERING_PER_PASS = 10
MAX_COOLDOWN_FACTOR = 4


def cooldown_for(settings: Settings, preempts_last_hour: int) -> float:
    """The base cool-down, times the pool's Preempt notices in the last hour (at most 4x): a pool
    that keeps being evicted is avoided for longer."""
    return settings.cooldown_seconds * min(MAX_COOLDOWN_FACTOR, max(1, preempts_last_hour))


def cooldowns(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice], contain: Containment
) -> Proposal:
    """Taint the other spot nodes of a pool and zone being evicted PreferNoSchedule for a
    cool-down, so that replacements prefer capacity that is not being evicted."""
    found = contain.run("cooldown", about("cool-downs"), [], _cooldowns, snapshot, settings, active)
    return Proposal.of(found[:STEERING_PER_PASS])


def _cooldowns(
    snapshot: Snapshot, settings: Settings, active: Mapping[str, Notice]
) -> list[Action]:
    """PreferNoSchedule on the rest of a spot pool (same pool and zone) that is being evicted."""
    counts = preempt_counts(snapshot)
    evicted_groups: dict[tuple[str, str], datetime] = {}
    for node_name, notice in active.items():
        node = snapshot.nodes[node_name]
        if node.spot and notice.event_type in (EventType.PREEMPT, MANUAL):
            started = notice.seen_at or snapshot.now
            count = counts.get((node.pool, node.zone), 0)
            until = started + timedelta(seconds=cooldown_for(settings, count))
            group = (node.pool, node.zone)
            evicted_groups[group] = max(until, evicted_groups.get(group, until))
    actions: list[Action] = []
    for name, node in sorted(snapshot.nodes.items()):
        if name in active or not node.spot:
            continue
        current = parse_iso(node.annotations.get(names.COOLDOWN_UNTIL))
        wanted = evicted_groups.get((node.pool, node.zone))
        if wanted is not None and (current is None or current < wanted):
            actions.append(StartCooldown(name, wanted, basis=node.as_json(), uid=node.uid))
        elif wanted is None and current is not None and current <= snapshot.now:
            actions.append(EndCooldown(name, basis=node.as_json(), uid=node.uid))
    return actions

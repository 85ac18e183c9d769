"""The planner's part for a workload with an availability target: its replica count, the pods
to give up first, and the record the webhook places new pods by. Pure.

`target.py` decides how many replicas go on spot and how many on on-demand; this turns that into
actions on the Deployment, make-before-break:

- more replicas: at once (the webhook sends a new pod to spot while fewer than the record's
  `spot` are there, not under notice, else to on-demand);
- fewer: only when every replica is Ready, after the ones to go have the lowest
  pod-deletion-cost (on-demand ones first when on-demand is to shrink, else spot ones from the
  fullest zone), so that the ReplicaSet removes exactly those; a ReplicaSet scaling down removes
  replicas that are not Ready first whatever their cost, so shrinking while one loads would
  remove the wrong one;
- the record (`Spare`, sealed): the owner's count, what we added, and how many go on spot.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from rebalancer import names
from rebalancer.controller.actions import Action, Evict, SetDeletionCost, SetSpare, WorkloadBasis
from rebalancer.controller.cost import region_of
from rebalancer.controller.hpa_count import hpa_count, metered, scaler_of
from rebalancer.controller.model import PodInfo, WorkloadInfo
from rebalancer.controller.placement import spot_groups
from rebalancer.controller.policy import Policy
from rebalancer.controller.pools import Pool, pools_of, with_declared
from rebalancer.controller.records import MAX_BELOW_SECONDS, Spare
from rebalancer.controller.returns import LOWEST, lower_cost
from rebalancer.controller.risk import LEVELS
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.target import (
    MAX_TARGET_REPLICAS,
    Account,
    TargetPlan,
    TargetSettings,
    aged,
    decide,
    evidence_of,
    group_of,
    open_zones,
    rates,
    zone_shares,
)
from rebalancer.strict import moment
from rebalancer.timefmt import iso
from rebalancer.vocabulary import Reason

# A cheaper plan replaces the one in force only when its expected unavailability leaves this
# share of the budget unused: near the threshold, the plan would otherwise flip with every
# pass as old losses fade.
DOWN_BAND = 0.8


def accepted_zones(
    snapshot: Snapshot, workload: WorkloadInfo, policy: Policy, declared: Mapping[str, Pool]
) -> dict[str, tuple[str, ...]]:
    """Spot zones the workload may use, with their pools: spot pools its pods fit and its
    policy allows, in groups whose risk its `max-risk` accepts (unknown risk is accepted)."""
    pools = with_declared(pools_of(snapshot.nodes.values()), declared)
    levels = {(g.pool, g.zone): g.level for g in spot_groups(pools.values(), snapshot.risks)}
    zones: dict[str, set[str]] = {}
    for pool in pools.values():
        if not pool.spot or not policy.allows_pool(pool.name):
            continue
        if pool.problems_for(workload.template_spec, workload.gpus_per_replica):
            continue
        labelled = pool.labels.get(names.ZONE_LABEL)
        found = {labelled} if labelled else {snapshot.nodes[n].zone for n in pool.nodes}
        for zone in found or {""}:
            level = levels.get((pool.name, zone), "unknown")
            if level in LEVELS and not policy.accepts(level):
                continue
            zones.setdefault(zone, set()).add(pool.name)
    return {zone: tuple(sorted(p)) for zone, p in sorted(zones.items())}


def held_hours(snapshot: Snapshot) -> dict[str, float]:
    """How long each spot group ("pool/zone") has held capacity: its oldest Ready spot node not
    under notice, in hours."""
    held: dict[str, float] = {}
    for node in snapshot.nodes.values():
        if node.spot and node.ready and not node.notices and node.created is not None:
            group = group_of(node.pool, node.zone)
            hours = max(0.0, (snapshot.now - node.created).total_seconds() / 3600.0)
            held[group] = max(held.get(group, 0.0), hours)
    return held


def waiting_zones(
    snapshot: Snapshot,
    pods: list[PodInfo],
    zones: Mapping[str, tuple[str, ...]],
    record: Spare | None,
    wait_seconds: float,
) -> tuple[str, ...]:
    """The accepted zones without spot capacity, as far as the cluster shows: none of the zone's
    accepted spot pools has a Ready node (under notice or not), and one of the workload's replicas
    sent there has waited `wait_seconds` for a node, or the record already says the zone waits
    (a probe made again after a scale-down is not a fresh start). The plan keeps one replica
    waiting in each, which takes the capacity when it comes back, and sends the rest of its spot
    replicas to zones that have capacity: spot spares in a zone without capacity keep nothing
    Ready, so the on-demand cover paid for them."""
    if wait_seconds <= 0:
        return ()
    # A node under notice still had capacity a moment ago: the notice steers placement away.
    live = {
        node.zone
        for node in snapshot.nodes.values()
        if node.spot and node.ready and node.pool in zones.get(node.zone, ())
    }
    found = {zone for zone in (record.waiting if record is not None else ()) if zone in zones}
    for pod in pods:
        if pod.node_name or not pod.placed or pod.created is None:
            continue
        zone = pod.placed.partition("/")[2]
        if zone in zones and (snapshot.now - pod.created).total_seconds() >= wait_seconds:
            found.add(zone)
    waiting = found - live
    # No zone has capacity: nothing to send the spares to; they wait where the plan puts them,
    # and take the capacity wherever it comes back first.
    return () if waiting >= set(zones) else tuple(sorted(waiting))


def _alive(pods: list[PodInfo]) -> list[PodInfo]:
    return [p for p in pods if not p.deleting and not p.finished]


def spot_share(snapshot: Snapshot, zones: Mapping[str, tuple[str, ...]]) -> float | None:
    """Spot's price as a share of on-demand's for the VM sizes of the workload's accepted spot
    groups (`zones`: zone -> pools), from the controller's price table: the mean over the
    groups that have a spot node, each priced by its VM size and region. None: no such node, or
    the table prices none of them (the plan then takes DEFAULT_SPOT_PRICE_SHARE)."""
    if snapshot.prices is None:
        return None
    wanted = {(pool, zone) for zone, pools in zones.items() for pool in pools}
    shares: dict[tuple[str, str], float] = {}
    for node in snapshot.nodes.values():
        where = (node.pool, node.zone)
        if not node.spot or where not in wanted or where in shares:
            continue
        region = region_of(node.labels)
        spot = snapshot.prices.price(node.sku, region, spot=True)
        on_demand = snapshot.prices.price(node.sku, region, spot=False)
        share = spot / on_demand if spot and on_demand else math.nan
        if math.isfinite(share) and share > 0:  # a table may say NaN or less than nothing
            shares[where] = min(1.0, share)
    return sum(shares.values()) / len(shares) if shares else None


def plan_target(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    policy: Policy,
    settings: TargetSettings,
    declared: Mapping[str, Pool],
) -> list[Action]:
    target = policy.target_percent
    assert target is not None
    record = workload.spare
    basis = WorkloadBasis.of(workload)
    replicas = workload.replicas
    if record is not None and record.gave_up:
        return []
    pods = _alive(snapshot.pods_by_workload.get(workload.key, []))
    reverted = record.reverted if record is not None else 0
    scaler = scaler_of(snapshot, workload)
    counted = None
    if scaler is not None:  # the HPA owns N; its bounds hold ours (planning/bounds.py)
        counted = hpa_count(
            scaler, ready=metered(pods, snapshot.now), record=record, replicas=replicas,
            now=snapshot.now,
        )  # fmt: skip
        base = counted.base
    elif record is None:
        base = replicas
    elif replicas == record.base + record.added:
        base = record.base
    elif replicas == record.base and record.added > 0:
        reverted += 1
        if reverted >= 2:
            given_up = Spare(record.base, 0, reverted, gave_up=True)
            return [
                SetSpare(workload.key, None, given_up, basis=basis, reason=Reason.SPARE_NOT_HELD)
            ]
        base = record.base
    else:  # the owner chose a new count
        base = replicas
    if base > MAX_TARGET_REPLICAS:
        return []
    if base == 0:
        return [SetSpare(workload.key, None, None, basis=basis, why="")] if record else []

    zones = accepted_zones(snapshot, workload, policy, declared)
    nodes = snapshot.nodes
    waiting = waiting_zones(snapshot, pods, zones, record, settings.capacity_wait_seconds)
    # The plan's groups: the accepted ones with capacity (a waiting zone gets its one probe).
    groups = [
        group_of(pool, zone) for zone, pools in zones.items() if zone not in waiting
        for pool in pools
    ]  # fmt: skip
    ready_spot: Counter[str] = Counter()
    for pod in pods:
        node = nodes.get(pod.node_name)
        if pod.ready and node is not None and node.spot and not node.notices:
            ready_spot[group_of(node.pool, node.zone)] += 1
    seen = rates(
        snapshot.history.entries,
        groups,
        now=snapshot.now,
        since=snapshot.history.since,
        settings=settings,
        evidence=evidence_of(snapshot.risks.values()),
    )
    fresh = aged(seen, held_hours(snapshot), settings)
    if not settings.spot_price_share:
        settings = replace(settings, spot_price_share=spot_share(snapshot, zones) or 0.0)
    ready_now = sum(1 for p in pods if p.ready)
    owner = Spare(base, 0, reverted)
    if counted is not None:
        rising_from, rising_since = _rising(
            record, base, ready_now, snapshot.now, settings.recovery_seconds
        )
        owner = replace(
            owner, lower_since=counted.lower_since, lower_high=counted.lower_high,
            rising_from=rising_from, rising_since=rising_since,
        )  # fmt: skip
    below = ready_now < (owner.rising_from or base)
    owner = _account(owner, record, below=below, now=snapshot.now)
    account = account_of(owner, target, snapshot.now, settings.recovery_seconds)
    # Set when the account goes over, kept until a recovery is in hand: written as it changes.
    owner = replace(owner, overdrawn=account.missed)
    held = account.held_target()

    def plan(percent: float, ready: Mapping[str, int]) -> TargetPlan:
        decided = decide(
            base, percent, groups=groups, ready_spot=ready, rates=seen, settings=settings,
            min_on_demand=policy.min_on_demand, cover_rates=fresh, account=account,
            stated=None if percent == held else held,
        )  # fmt: skip
        if not waiting:
            return decided
        probes = f"; 1 more on spot waiting for capacity in {', '.join(waiting)}"
        return replace(
            decided, spot=decided.spot + len(waiting), waiting=waiting, why=decided.why + probes
        )

    decision = plan(held, ready_spot)
    if (
        record is not None
        and record.spot is not None
        and record.base == base
        and decision.spot < record.spot
    ):
        # Fewer spot replicas only as the plan for a budget with room to spare (DOWN_BAND),
        # for the same N (a new N is a new plan: a stricter budget may hold fewer on spot).
        decision = plan(100 - (100 - held) * DOWN_BAND, ready_spot)
    scaled = f"; {counted.why}" if counted else ""
    decision = replace(decision, why=f"{decision.why}; {account.words()}{scaled}")
    spot_pools = {pool for pools in zones.values() for pool in pools}
    actions = _converge(snapshot, workload, pods, decision, owner, record, spot_pools, list(zones))
    if not actions:

        def on_demand_with(ready: Mapping[str, int]) -> int:
            return plan(held, ready).on_demand

        actions = _respread(
            snapshot, pods, decision, base, list(zones), ready_spot, on_demand_with, record
        )
    if (
        record is not None
        and _account_of(record) != _account_of(owner)
        and not any(isinstance(a, SetSpare) for a in actions)
    ):
        # A stretch below began or ended in a pass that writes nothing else: recorded now, so
        # that the seconds below are counted to this pass, not to the next write.
        kept = _with_account(record, owner)
        actions.append(
            SetSpare(workload.key, None, kept, basis=basis, reason=Reason.TARGET_ACCOUNT)
        )
    return actions


def _rising(
    record: Spare | None, base: int, ready: int, now: datetime, recovery_seconds: float
) -> tuple[int, str | None]:
    """With an HPA: N before the HPA raised it and since when, until the new N is first all
    Ready or one recovery (a node and a load) has passed ((0, None): no rise loading). The
    account measures against it meanwhile: a rise's load is the autoscaler's own lag (which
    the spares, Ready, often absorb), as a rollout's first load is not a miss; a replica still
    missing after a recovery is."""
    if record is None or ready >= base:
        return 0, None
    if record.rising_since is not None:
        before, since = record.rising_from, record.rising_since
    elif base > record.base:
        before, since = record.base, iso(now)
    else:
        return 0, None
    if before >= base or (now - moment(since)).total_seconds() >= recovery_seconds:
        return 0, None
    return before, since


# The record's bookkeeping: the target's account, and an HPA's stretches below and above N.
_BOOKKEEPING = (
    "watched_since", "below_seconds", "below_since", "overdrawn", "lower_since", "lower_high",
    "rising_from", "rising_since",
)  # fmt: skip


def _account_of(record: Spare) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in _BOOKKEEPING)


def _with_account(record: Spare, source: Spare) -> Spare:
    """`record` with the bookkeeping of `source`."""
    return replace(record, **{name: getattr(source, name) for name in _BOOKKEEPING})


def _account(owner: Spare, record: Spare | None, *, below: bool, now: datetime) -> Spare:
    """`owner` with the target's account carried over from `record` and brought up to
    `now`: a stretch below the owner's count begins, or ends and is added to the seconds below.
    The account opens when the owner's count is first all Ready: a rollout's load is not a miss."""
    if record is None or record.watched_since is None:
        return replace(owner, watched_since=None if below else iso(now), below_since=None)
    seconds, since = record.below_seconds, record.below_since
    if below and since is None:
        since = iso(now)
    elif not below and since is not None:
        stretch = max(0, round((now - moment(since)).total_seconds()))
        seconds = min(MAX_BELOW_SECONDS, seconds + stretch)  # stays a record we read back
        since = None
    return replace(
        owner, watched_since=record.watched_since, below_seconds=seconds, below_since=since,
        overdrawn=record.overdrawn,
    )  # fmt: skip


def account_of(
    account: Spare, target: float, now: datetime, recovery_seconds: float = 0.0
) -> Account:
    """The target's account on a record, brought up to `now` (a stretch below in progress
    counts to now): what the planner holds the target to and what the metrics show."""
    if account.watched_since is None:
        return Account(target, 0.0, 0.0)
    watched = max(0.0, (now - moment(account.watched_since)).total_seconds())
    below = float(account.below_seconds)
    if account.below_since is not None:
        below += max(0.0, (now - moment(account.below_since)).total_seconds())
    return Account(target, watched, below, account.overdrawn, recovery_seconds)


def _converge(
    snapshot: Snapshot,
    workload: WorkloadInfo,
    pods: list[PodInfo],
    decision: TargetPlan,
    owner: Spare,
    record: Spare | None,
    spot_pools: set[str],
    zones: list[str],
) -> list[Action]:
    """The actions that bring the workload to the decision, one step a pass; `zones`: the
    accepted spot zones."""
    basis = WorkloadBasis.of(workload)
    replicas = workload.replicas
    # Spot replicas beyond the plan stay until the on-demand ones that take their place are
    # Ready (make-before-break): the count rises by those first.
    spot, on_demand = _sides(snapshot, pods, spot_pools)
    ready_on_demand = sum(1 for p in on_demand if p.ready)
    swap = min(len(spot) - decision.spot, decision.on_demand - ready_on_demand)
    wanted = decision.replicas + max(0, swap)
    fresh = replace(owner, added=wanted - owner.base, spot=decision.spot, waiting=decision.waiting)
    if wanted > replicas or (wanted == replicas and record != fresh):
        # The same plan, only the target's account moved: bookkeeping, not a change.
        same = record is not None and _with_account(record, fresh) == fresh
        reason = Reason.TARGET_ACCOUNT if wanted == replicas and same else Reason.SPARE
        return [
            *_restore_costs(pods),
            SetSpare(workload.key, wanted, fresh, basis=basis, why=decision.why, reason=reason),
        ]
    if wanted < replicas:
        # A ReplicaSet scaling down removes replicas that are not Ready first, whatever their
        # cost: the unscheduled (they serve nothing; one the plan keeps is made again), then
        # those loading, which must not be ones the plan keeps. Beyond those, the ones to go
        # get the lowest cost first.
        excess = replicas - wanted
        unready = [p for p in pods if not p.ready]
        unscheduled = sum(1 for p in unready if not p.node_name)
        if excess > unscheduled and _kept_one_loads(snapshot, pods, decision, spot_pools):
            return []  # it would go before any Ready one: shrink once it is Ready
        if len(unready) < excess:
            ready = [p for p in pods if p.ready]
            victims = _victims(snapshot, ready, decision, excess - len(unready), spot_pools)
            unmarked = [p for p in victims if p.deletion_cost != LOWEST]
            if unmarked:
                return [lower_cost(p, Reason.SPARE) for p in unmarked]
        return [SetSpare(workload.key, wanted, fresh, basis=basis, why=decision.why)]
    return _recompose(snapshot, pods, decision, owner.base, spot_pools, zones)


def _recompose(
    snapshot: Snapshot,
    pods: list[PodInfo],
    decision: TargetPlan,
    base: int,
    spot_pools: set[str],
    zones: list[str],
) -> list[Action]:
    """The right count, the wrong mix: on-demand replicas the plan no longer needs while spot
    ones are missing (the ReplicaSet, scaling down, removed spot replicas that were not Ready
    yet). One is evicted a pass (a PodDisruptionBudget is respected); the ReplicaSet's
    replacement goes to spot. A Ready one goes only if the owner's count stays Ready without
    it. The other way: a replica sent to spot that waits for capacity the plan no longer asks
    for, while on-demand ones are missing (the plan gave spot up after they were placed), is
    evicted (it serves nothing) and its replacement goes to on-demand; without this the
    owner's count stayed short for as long as spot had no capacity. (Spot replicas beyond the
    plan that run are a swap in `_converge`: they stay until their replacements are Ready.)"""
    spot, on_demand = _sides(snapshot, pods, spot_pools)
    # Only where the webhook places this workload's pods (its newest carries the placement):
    # with the webhook off or failing (failure policy Ignore) the replacement would land
    # where the last one did, and be evicted again, every pass.
    if not _newest(pods, snapshot).placed:
        return []
    waiting = sorted((p for p in spot if not p.node_name), key=lambda p: p.name)
    if len(spot) > decision.spot and len(on_demand) < decision.on_demand and waiting:
        pod = waiting[0]
        return [Evict(pod.key, pod.uid, pod.node_name, "", reason=Reason.SPARE)]
    # The webhook sends no replica to a spot group under notice, nor to a zone waiting for
    # capacity that holds its one: the replacement must have a zone it may go to.
    kept = _kept_by_zone(snapshot, pods, zones)
    goes_to_spot = open_zones(decision.spot, kept, zones, decision.waiting) or any(
        zone not in decision.waiting for zone in kept
    )
    if not (len(on_demand) > decision.on_demand and len(spot) < decision.spot and goes_to_spot):
        return []
    ready = sum(1 for p in pods if p.ready)
    for pod in sorted(on_demand, key=lambda p: (p.ready, p.name)):
        if not pod.ready or ready - 1 >= base:
            return [Evict(pod.key, pod.uid, pod.node_name, "", reason=Reason.SPARE)]
    return []


def _respread(
    snapshot: Snapshot,
    pods: list[PodInfo],
    decision: TargetPlan,
    base: int,
    zones: list[str],
    ready_spot: Mapping[str, int],
    on_demand_with: Callable[[Mapping[str, int]], int],
    record: Spare | None,
) -> list[Action]:
    """A zone holding more than its share of the plan's spot replicas while another accepted
    zone holds fewer (spot capacity was in one zone when they were placed): one Ready replica
    of the fullest is evicted, and the webhook places its replacement in the other, where it
    waits for capacity if there is none. Spot replicas piled in one zone lower the on-demand
    cover little (that zone's one loss takes them all) but are paid for all along. Only when
    the owner's count stays Ready without it, on-demand now does not rise for it, and the
    webhook is seen placing the workload's pods (without it the replacement lands anywhere)."""
    nodes = snapshot.nodes
    kept = _kept_by_zone(snapshot, pods, zones)
    shares = zone_shares(decision.spot, zones, decision.waiting)
    placed = _newest(pods, snapshot).placed
    noticed = {(n.pool, n.zone) for n in nodes.values() if n.spot and n.notices}
    in_force = record.waiting if record is not None and record.spot == decision.spot else ()
    for zone in decision.waiting:
        # More than the one probe waits there (sent before the zone was known to wait): one
        # goes, and its replacement is sent to a zone that has capacity. Counted as the webhook
        # counts: not those sent to a pool under notice there.
        there = sorted(
            (
                p
                for p in pods
                if not p.node_name
                and p.placed.partition("/")[2] == zone
                and tuple(p.placed.split("/", 1)) not in noticed
            ),
            key=lambda p: p.name,
        )
        # Only once the record says so: the webhook places by the record.
        if placed and len(there) > shares.get(zone, 1) and zone in in_force:
            pod = there[-1]
            return [Evict(pod.key, pod.uid, pod.node_name, "", reason=Reason.SPARE)]
    if not kept or not any(count < shares[zone] for zone, count in kept.items()):
        return []
    fullest = max(kept, key=lambda zone: (kept[zone] - shares[zone], kept[zone], zone))
    if kept[fullest] <= shares[fullest] or not placed or sum(p.ready for p in pods) - 1 < base:
        return []
    candidates = [
        p
        for p in pods
        if p.ready
        and p.node_name in nodes
        and nodes[p.node_name].spot
        and not nodes[p.node_name].notices
        and nodes[p.node_name].zone == fullest
    ]
    if not candidates:
        return []
    victim = max(candidates, key=lambda p: p.name)  # the others of the zone weigh the same
    node = nodes[victim.node_name]
    after = Counter(ready_spot)
    after[group_of(node.pool, node.zone)] -= 1
    if on_demand_with(after) > decision.on_demand:
        return []
    return [Evict(victim.key, victim.uid, victim.node_name, "", reason=Reason.SPARE)]


def _kept_by_zone(snapshot: Snapshot, pods: list[PodInfo], zones: list[str]) -> dict[str, int]:
    """The workload's spot replicas per accepted zone without a spot node under notice, as the
    webhook counts them: a pod not yet scheduled where it was sent."""
    nodes = snapshot.nodes
    evicting = {n.zone for n in nodes.values() if n.spot and n.notices}
    kept = dict.fromkeys((zone for zone in zones if zone not in evicting), 0)
    for pod in pods:
        node = nodes.get(pod.node_name) if pod.node_name else None
        if node is not None and node.spot and not node.notices:
            zone = node.zone
        elif node is None and pod.placed:
            zone = pod.placed.partition("/")[2]
        else:
            continue
        if zone in kept:
            kept[zone] += 1
    return kept


def _newest(pods: list[PodInfo], snapshot: Snapshot) -> PodInfo:
    """The workload's newest pod: whether it carries the webhook's placement tells whether the
    webhook places the workload's pods now."""
    return max(pods, key=lambda p: (p.created is not None, p.created or snapshot.now, p.name))


def _sides(
    snapshot: Snapshot, pods: list[PodInfo], spot_pools: set[str]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """The replicas kept on spot (not under notice) and those on on-demand; a pod not yet
    scheduled counts where the webhook sent it."""
    nodes = snapshot.nodes
    spot: list[PodInfo] = []
    on_demand: list[PodInfo] = []
    for pod in pods:
        node = nodes.get(pod.node_name) if pod.node_name else None
        if node is not None:
            if not node.spot:
                on_demand.append(pod)
            elif not node.notices:
                spot.append(pod)
        elif pod.placed:
            (spot if pod.placed.partition("/")[0] in spot_pools else on_demand).append(pod)
    return spot, on_demand


def _kept_one_loads(
    snapshot: Snapshot, pods: list[PodInfo], decision: TargetPlan, spot_pools: set[str]
) -> bool:
    """Whether a replica the plan keeps is loading on its node (scheduled, not Ready): a
    ReplicaSet scaling down removes the unscheduled first, then those, whatever their cost."""
    spot, on_demand = _sides(snapshot, pods, spot_pools)
    kept = [*spot] if len(spot) <= decision.spot else []
    kept += on_demand if len(on_demand) <= decision.on_demand else []
    return any(p.node_name and not p.ready for p in kept)


def _victims(
    snapshot: Snapshot, ready: list[PodInfo], decision: TargetPlan, count: int, spot_pools: set[str]
) -> list[PodInfo]:
    """The `count` Ready replicas to give up: spot ones beyond the plan's from the fullest zone
    first, then on-demand ones (by name, last first)."""
    spot, on_demand = _sides(snapshot, ready, spot_pools)
    nodes = snapshot.nodes
    chosen: list[PodInfo] = []
    by_zone = Counter(nodes[p.node_name].zone for p in spot if p.node_name in nodes)
    for _ in range(min(max(0, len(spot) - decision.spot), count)):
        zone = max(by_zone, key=lambda z: (by_zone[z], z))
        chosen.append(next(p for p in spot if nodes[p.node_name].zone == zone and p not in chosen))
        by_zone[zone] -= 1
    chosen += sorted(on_demand, key=lambda p: p.name, reverse=True)[: count - len(chosen)]
    return chosen


def _restore_costs(pods: list[PodInfo]) -> list[Action]:
    """Pods we marked to go that stay after all get their cost back."""
    return [
        SetDeletionCost(p.key, p.original_deletion_cost or None, restore=True, reason=Reason.SPARE)
        for p in pods
        if p.deletion_cost == LOWEST and p.original_deletion_cost is not None
    ]

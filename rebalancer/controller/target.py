"""Availability targets: how many spot and how many on-demand replicas a workload keeps so that
its owner's count is Ready for the share of time it asks for, at the least expected cost. Pure.

A workload states `spot-rebalancer.io/availability-target: "99.9"`: the owner's count N Ready
99.9 % of the time. The controller keeps S replicas on spot, spread over the spot groups (pool
and zone) its policy accepts, and D on on-demand, S + D >= N; the S + D - N beyond the owner's
count are spares. Each pass it decides both from the cluster's eviction history, before any
notice, in five steps that the log, the Event and `kubectl spot-rebalancer status` repeat:

1. **Waves.** The Preempt notices of the history within `wave_seconds` of each other are one
   wave; a wave takes some groups (one pool, a zone, several zones at once).
2. **Rates**, each the mean of a posterior over the history's last 24 h, every wave weighted
   2^(-age / half-life) so that this morning's counts less than the last hour's:

       waves per hour      W       = (w * W0 + waves) / (w + hours watched)        Gamma
       group g's share     q_g     = (a * q0 + waves that hit g) / (a + waves)     Beta
       pair g, h's share   q_gh    = (a * q0^2 + waves that hit both) / (a + waves)
       losses per hour     lambda_g = W * q_g,   lambda_gh = W * q_gh

   W0 and q0 are the priors (a wave a day; a wave hits a group 3 times in 10) and w, a their
   weights: a cluster with no record is assumed neither safe nor hopeless, and its own waves
   soon outweigh the assumption. Groups that go together (one zone, one region) show it in
   q_gh; about zones, only that a zone of three groups or more may go whole (step 3). Where
   Azure says something fresh of a group (its eviction-rate bucket, its Spot Placement Score:
   the snapshot's risk, `Evidence`), the group's q0 is q0 times f_g, how many times riskier
   that makes the group's prior in the risk model than the risk settings' prior alone (bucket
   rate x placement factor / prior), held within 1/4 to 4 times and a share of at most 1;
   pairs start from q0_g * q0_h.
3. **Exposure.** A replica lost is missing until its replacement on on-demand is Ready:
   `recovery_seconds` (T: the node's provisioning plus the model's load, less the notice). The
   share of time below N with a configuration is about

       U = sum over groups g whose loss alone leaves fewer than N Ready:  lambda_g * T
         + sum over pairs g, h whose loss together does:  lambda_gh * T + lambda_g * lambda_h * T^2

   (a pair lost in one wave, or one after the other within T), plus the waves of three groups
   or more the record holds, each at its own rate, for each zone of three groups or more
   its whole loss in one wave, at the prior of its least likely pair, and for every three
   zones their loss in one wave, at W * a / (a + waves) * q0^3 (below, `rates`).
4. **Account.** The time watched and the seconds below N so far are kept on the workload's
   record (written when a stretch below begins or ends, or when it goes over or gets a
   recovery back in hand), and said with the plan: what the target allowed and what was
   spent, the owner's view of whether it is met.
5. **Choice.** The cheapest (S spot at `spot_price_share` of on-demand, D on-demand) with
   U <= 1 - target/100, spot spread over the groups as placement spreads it; if none, N on
   on-demand. That is the standing plan, decided before a notice. Now: with the spot replicas
   Ready now (not under notice), on-demand replicas are the fewest >= D that make N Ready now and
   keep U within the budget, at most N: a lost or missing spot replica is covered on on-demand
   at once, and given back as soon as spot replicas are Ready again (dynamic fallback). While
   the target is met, the plan's and the cover's budget also hold the account's allowance in
   hand paced over a day (`Account.pace`): whole replicas would otherwise leave it unspent, and
   a target the budget alone keeps all on on-demand (one zone) would never use spot. The
   words name what binds: the plan one step cheaper that was refused, and its costliest loss
   (`losses`: a group, a pair, a wave of the record, a zone's prior, three zones' prior).

Why this and not a learned model: a cluster has a day of its own history and no training data;
every number here is a count a reader can check against the history ConfigMap and a formula.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from pydantic.dataclasses import dataclass as pydantic_dataclass

from rebalancer.controller.history import RETENTION, Entry
from rebalancer.controller.risk import Risk
from rebalancer.setting_groups import SETTINGS_CONFIG, setting
from rebalancer.strict import shown

TARGET_LOW, TARGET_HIGH = 50.0, 99.999
# The most replicas a target plans for: the search is quadratic in them, and one tenant's
# Deployment must not hold up every other decision (issue 18). Above it, the target is not
# acted on (docs/targets.md).
MAX_TARGET_REPLICAS = 100

MAX_GROUPS = 16  # pairs of at most this many groups: 120, well under a millisecond
MAX_ZONES = 8  # three zones at once among at most this many: 56 (`zones_priors`)
DEFAULT_SPOT_PRICE_SHARE = 0.2
# The share of its budget a target missed so far is planned for (99.9 is planned as 99.99).
MISSED_PACE = 0.1
# The share of what a target allows that the account keeps in reserve: without it, a target
# held at the edge ended its run just under (98.993 % for 99 on two shared trace sets).
RESERVE = 0.1  # A100 spot is 12-17 % of on-demand in the bundled table


@pydantic_dataclass(frozen=True, config=SETTINGS_CONFIG)
class TargetSettings:
    """The availability targets' model (REBALANCER_TARGET_* are its settings)."""

    # A replacement on on-demand: a node (5 min) plus the model's load (90 s), less the 30 s
    # notice during which the old replica still serves.
    recovery_seconds: float = setting(
        360.0,
        ge=0,
        description="Availability targets: how long a lost spot replica is missing until its "
        "replacement on on-demand is Ready (node provisioning + model load - notice).",
    )
    # 0: the price table's for the workload's spot nodes (`target_plan.spot_share`),
    # DEFAULT_SPOT_PRICE_SHARE where it has none.
    spot_price_share: float = setting(
        0.0,
        ge=0,
        le=1,
        description="Availability targets: spot's price as a share of on-demand's, to compare "
        "plans by cost; 0: the price table's for the VM size of the workload's spot nodes "
        "(bundled prices, the Retail Prices API, REBALANCER_PRICES_FILE), 0.2 where it has none.",
    )
    wave_rate_per_hour: float = 0.05  # waves of Preempts in the cluster, before its own record
    wave_weight_hours: float = 24.0  # how many hours of experience that prior counts for
    hit_share: float = 0.3  # the share of waves that hit a group, before the record
    hit_weight: float = 2.0  # how many waves of experience that prior counts for
    # Azure's evidence moves a group's prior hit share at most this many times either way
    # (`prior_shares`).
    azure_prior_max_factor: float = setting(
        4.0,
        ge=1,
        le=16,
        description="Availability targets: a spot group's prior share of the waves that hit "
        "it (3 in 10) is multiplied by how many times riskier Azure's fresh eviction-rate "
        "bucket and Spot Placement Score make the group than the risk settings' prior alone, "
        "held within 1/this to this (and a share of at most 1); 1 turns it off.",
    )
    half_life_seconds: float = 6 * 3600.0
    wave_seconds: float = 600.0
    max_spares: int = 4
    # The cover holds spot capacity younger than this riskier (`aged`), up to `fresh_factor`.
    fresh_seconds: float = setting(
        3600.0,
        ge=0,
        le=86400,
        description="Availability targets: spot capacity up for less than this (its oldest "
        "Ready node) counts riskier in the on-demand cover, by this / its age, at most 4 "
        "times; 0 turns it off.",
    )
    fresh_factor: float = 4.0
    # A zone whose replica has waited this long for spot capacity plans without it
    # (`target_plan.waiting_zones`).
    capacity_wait_seconds: float = setting(
        600.0,
        ge=0,
        le=86400,
        description="Availability targets: a spot zone where one of the workload's replicas "
        "has waited this long for a node, and that has no Ready spot node, is planned as "
        "without capacity: its replica waits there for it, the plan's other spot replicas go "
        "to the zones that have capacity; 0 turns it off.",
    )
    # The plan and the cover spend the account's allowance in hand over this horizon
    # (`Account.pace`).
    pace_seconds: float = setting(
        86400.0,
        ge=0,
        le=30 * 86400,
        description="Availability targets: while a target is met, its plan and on-demand cover "
        "may spend its allowance in hand (allowed so far less a tenth in reserve, the seconds "
        "spent and one recovery) over this horizon, up to 4 times the budget; 0 turns it off.",
    )
    pace_factor: float = 4.0

    @property
    def fresh_hours(self) -> float:
        return self.fresh_seconds / 3600.0


def parse_target(text: str) -> float:
    """A percentage such as "99.9": ASCII digits and one point, 50 to 99.999; ValueError else."""
    stripped = text.strip()
    whole, _, fraction = stripped.partition(".")
    if (
        not whole
        or len(stripped) > 8
        or not (whole.isascii() and whole.isdigit())
        or (fraction and not (fraction.isascii() and fraction.isdigit()))
        or (stripped.endswith(".") and not fraction)
    ):
        raise ValueError(f"{shown(text)} is not a percentage such as 99.9")
    value = float(stripped)
    if not TARGET_LOW <= value <= TARGET_HIGH:
        raise ValueError(f"{shown(text)} is not between {TARGET_LOW:g} and {TARGET_HIGH:g}")
    return value


@dataclass(frozen=True)
class Wave:
    at: datetime
    groups: frozenset[str]  # "pool/zone" of every node it took


def group_of(pool: str, zone: str) -> str:
    return f"{pool}/{zone}"


def zone_of(group: str) -> str:
    """The zone of a group named by `group_of`."""
    return group.rpartition("/")[2]


def by_zone(groups: Iterable[str]) -> dict[str, list[str]]:
    """The groups of each zone, in the order given."""
    zones: dict[str, list[str]] = {}
    for group in groups:
        zones.setdefault(zone_of(group), []).append(group)
    return zones


def waves(entries: Iterable[Entry], wave_seconds: float) -> list[Wave]:
    """The history's spot Preempts grouped into waves: a notice within `wave_seconds` of the
    previous one joins its wave."""
    found: list[Wave] = []
    last: datetime | None = None
    wave = timedelta(seconds=wave_seconds)
    for entry in sorted((e for e in entries if e.spot and e.preempt), key=lambda e: e.first_seen):
        group = group_of(entry.pool, entry.zone)
        if found and last is not None and entry.first_seen - last <= wave:
            found[-1] = Wave(found[-1].at, found[-1].groups | {group})
        else:
            found.append(Wave(entry.first_seen, frozenset({group})))
        last = entry.first_seen
    return found


@dataclass(frozen=True)
class Evidence:
    """What Azure says of a spot group ("pool/zone") beyond the cluster's own record: how many
    times riskier its fresh eviction-rate bucket and placement score make the group's prior
    than the risk settings' prior alone (`Risk.azure_factor`), and those data in words."""

    factor: float
    said: str  # "Azure's eviction rate 10-15 %, placement score Low"


def evidence_of(risks: Iterable[Risk]) -> dict[str, Evidence]:
    """Each spot group's evidence from the snapshot's risks (assessed where the snapshot is
    built; stale data are not used there), its riskiest VM size's where it has several.
    Groups Azure says nothing fresh of are left out: their prior stays the settings'."""
    found: dict[str, Evidence] = {}
    for risk in risks:
        if not (risk.bucket or risk.placement_score):
            continue
        parts = [f"eviction rate {risk.bucket} %"] if risk.bucket else []
        if risk.placement_score:
            parts.append(f"placement score {risk.placement_score}")
        evidence = Evidence(risk.azure_factor, "Azure's " + ", ".join(parts))
        group = group_of(risk.pool, risk.zone)
        if group not in found or evidence.factor > found[group].factor:
            found[group] = evidence
    return found


def prior_shares(evidence: Mapping[str, Evidence], settings: TargetSettings) -> dict[str, float]:
    """Each group's prior hit share moved by Azure's evidence: q0 times its factor, held
    within 1/`azure_prior_max_factor` to `azure_prior_max_factor` times and at most 1 (a wave
    cannot hit a group more often than always). Azure's bucket is a regional average of days
    and the score a coarse word: they place the prior, the cluster's own waves correct it.
    x0.25 is the least Azure can say against the default prior (0-5 % with High), x4 a prior
    of 0.2/h (15-20 % with Medium is x3.5, 10-15 % with Low x5); the fresh-capacity factor
    stops at 4 as well. A settings' prior of 0 gives no ratio (factor 1)."""
    bound = settings.azure_prior_max_factor
    q = settings.hit_share
    return {
        group: min(1.0, q * min(bound, max(1.0 / bound, found.factor)))
        for group, found in evidence.items()
    }


class Wide(NamedTuple):
    """A wave of three groups or more at once, at its rate: one the record holds, which may come
    again, a zone's prior (`zone_priors`) or three zones' (`zones_priors`)."""

    groups: frozenset[str]
    rate: float
    kind: Literal["wave", "zone", "zones"]  # in the record, or which prior


@dataclass(frozen=True)
class Rates:
    """Losses per hour of each spot group (pool and zone), and of each pair together."""

    wave_rate: float  # waves per hour
    waves: int  # waves in the record (for the words)
    group: Mapping[str, float]
    pair: Mapping[frozenset[str], float]
    hits: Mapping[str, int]  # waves in the record that hit each group
    window_hours: float
    # Waves of the record that took three groups or more at once: such a wave, seen once, may
    # come again (the pairs' priors do not cover it); and each zone of three groups or more,
    # lost whole in one wave, at its least likely pair's prior.
    wide: tuple[Wide, ...] = ()
    # Groups whose prior hit share Azure's evidence moved: (the factor it moved by, within its
    # bounds; what Azure said), for the words.
    priors: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    pair_hits: Mapping[frozenset[str], int] = field(default_factory=dict)  # for the words

    def of(self, group: str) -> float:
        return self.group.get(group, 0.0)

    def of_pair(self, first: str, second: str) -> float:
        return self.pair.get(frozenset((first, second)), 0.0)


def rates(
    entries: Iterable[Entry],
    groups: Sequence[str],
    *,
    now: datetime,
    since: datetime | None,
    settings: TargetSettings,
    evidence: Mapping[str, Evidence] | None = None,
) -> Rates:
    """Waves per hour, and the share of waves that hit each group and each pair of groups,
    each the mean of a posterior over the record (Gamma for the rate, Beta for the shares);
    `evidence`: Azure's, by group, which moves the groups' prior shares (`prior_shares`)."""
    found = [w for w in waves(entries, settings.wave_seconds) if now - RETENTION <= w.at <= now]
    half_life_hours = settings.half_life_seconds / 3600.0
    tau = half_life_hours / math.log(2)
    # No record yet is no time watched: the priors alone, never a quiet day nobody saw.
    watched = min(RETENTION, now - since) if since is not None else timedelta(0)
    watched_hours = max(0.0, watched.total_seconds() / 3600.0)
    exposure = tau * (1.0 - math.exp(-watched_hours / tau))

    def weight(wave: Wave) -> float:
        return float(2.0 ** (-((now - wave.at).total_seconds() / 3600.0) / half_life_hours))

    weights = [(wave, weight(wave)) for wave in found]
    seen = sum(w for _, w in weights)
    rate = (settings.wave_weight_hours * settings.wave_rate_per_hour + seen) / (
        settings.wave_weight_hours + exposure
    )
    a, q = settings.hit_weight, settings.hit_share
    moved = prior_shares(evidence or {}, settings)
    share = {group: moved.get(group, q) for group in groups}
    group_rates: dict[str, float] = {}
    hits: dict[str, int] = {}
    for group in groups:
        hit = sum(w for wave, w in weights if group in wave.groups)
        group_rates[group] = rate * (a * share[group] + hit) / (a + seen)
        hits[group] = sum(1 for wave in found if group in wave.groups)
    pair_rates: dict[frozenset[str], float] = {}
    pair_hits: dict[frozenset[str], int] = {}
    for first, second in itertools.combinations(groups[:MAX_GROUPS], 2):
        pair = frozenset((first, second))
        both = [w for wave, w in weights if pair <= wave.groups]
        # Independent before the record, as q0^2: the record shows what goes together.
        prior = a * share[first] * share[second]
        pair_rates[pair] = rate * (prior + sum(both)) / (a + seen)
        pair_hits[pair] = len(both)
    wide = []
    capped = set(groups[:MAX_GROUPS])  # as the pairs: a hostile count of pools costs nothing
    for wave, w in weights:
        taken = wave.groups & capped
        if len(taken) >= 3:
            wide.append(Wide(frozenset(taken), rate * w / (a + seen), "wave"))
    wide += zone_priors(groups[:MAX_GROUPS], share, rate * a / (a + seen))
    wide += zones_priors(groups[:MAX_GROUPS], share, rate * a / (a + seen))
    priors = {
        group: (share[group] / q, evidence[group].said)
        for group in groups
        if evidence and group in evidence and share[group] != q
    }
    return Rates(
        rate,
        len(found),
        group_rates,
        pair_rates,
        hits,
        watched_hours,
        tuple(wide),
        priors,
        pair_hits,
    )


def zone_priors(groups: Sequence[str], share: Mapping[str, float], weight: float) -> list[Wide]:
    """Each zone of three groups or more (several spot pools of one zone), lost whole in one
    wave, at the prior of its least likely pair (the product of its two smallest prior
    shares, times `weight`: the wave rate's share of the prior). Without it a plan counts only
    pairs until the record holds such a wave, and a plan spread 3 + 2 over eight pools of two
    zones lost the three together after a quiet day, several times in a run (the shared
    two-zone set played backwards missed 99.9: docs/targets-measured.md). A pair of a zone's
    groups lost together is here assumed to take the zone's other groups with it; the
    record's own waves then say how often that happens."""
    out = []
    for members in by_zone(groups).values():
        if len(members) >= 3:
            low, second = sorted(share[g] for g in members)[:2]
            out.append(Wide(frozenset(members), weight * low * second, "zone"))
    return out


def zones_priors(groups: Sequence[str], share: Mapping[str, float], weight: float) -> list[Wide]:
    """Every three zones lost whole in one wave, at the product of each zone's smallest prior
    share, times `weight`: independent before the record, as the pairs start. Without it a
    plan spread so that only three zones at once take it below (2 spot in each of three zones
    and 1 on-demand, say) rated that loss zero until the record held such a wave, and at 99.99
    missed on four of eight public clusters nobody had tuned on, where the four zones of
    us-east-1 went down together (docs/targets-measured.md). An Azure region has three zones:
    one such wave, a region's spot lost at once, about once a month before any record."""
    members = by_zone(groups)
    out = []
    # An Azure region has 3 zones; the cap bounds a hostile count of zone labels (16 zones:
    # 560 triples, 10 ms a plan; 8: 56).
    for zones in itertools.combinations(sorted(members)[:MAX_ZONES], 3):
        rate = weight * math.prod(min(share[g] for g in members[zone]) for zone in zones)
        out.append(Wide(frozenset(g for zone in zones for g in members[zone]), rate, "zones"))
    return out


def aged(rates: Rates, held_hours: Mapping[str, float], settings: TargetSettings) -> Rates:
    """`rates` with each group's raised while its capacity is fresh: by fresh_hours / held (at
    most `fresh_factor`), held being how long its oldest Ready spot node has been up. In every
    public trace a pool that just got its capacity back loses it again far sooner than the
    average (1.6 losses an hour in its first half hour, 0.4 at 1-2 h, 0.2 at 2-8 h), while the
    record's rate is that average. Groups with no Ready node are left at the record's rate."""
    if settings.fresh_hours <= 0:
        return rates

    def factor(group: str) -> float:
        held = held_hours.get(group)
        if held is None:
            return 1.0
        return min(settings.fresh_factor, max(1.0, settings.fresh_hours / max(held, 1e-9)))

    group = {g: r * factor(g) for g, r in rates.group.items()}
    pair = {}
    for key, r in rates.pair.items():
        first, second = sorted(key)
        pair[key] = r * math.sqrt(factor(first) * factor(second))
    wide = tuple(
        wave._replace(
            rate=wave.rate * math.prod(map(factor, wave.groups)) ** (1 / len(wave.groups))
        )
        for wave in rates.wide
    )
    return replace(rates, group=group, pair=pair, wide=wide)


class Loss(NamedTuple):
    """One way a configuration falls below the count, and the share of time it costs."""

    kind: Literal["group", "pair", "wave", "zone", "zones"]
    groups: tuple[str, ...]
    rate: float  # per hour: of the group, of the pair together, of the wave
    share: float

    def words(self, rates: Rates) -> str:
        """What is lost, at what rate, on what record: "eastus-2 and eastus-3 lost together
        (0.0042/h: hit by 1 of 3 waves)"."""
        if self.kind == "group":
            (group,) = self.groups
            return f"{group} lost ({self.rate:.3f}/h: {_record(rates.hits.get(group, 0), rates)})"
        if self.kind == "pair":
            first, second = self.groups
            record = _record(rates.pair_hits.get(frozenset(self.groups), 0), rates, both=True)
            return f"{first} and {second} lost together ({self.rate:.4f}/h: {record})"
        if self.kind == "wave":
            return (
                f"a wave like the one that took {', '.join(self.groups)} again ({self.rate:.4f}/h)"
            )
        if self.kind == "zones":
            zones = sorted({zone_of(group) for group in self.groups})
            return (
                f"{', '.join(zones[:-1])} and {zones[-1]} lost whole together "
                f"({self.rate:.4f}/h: the prior of three zones at once)"
            )
        zone = zone_of(self.groups[0])
        return (
            f"all {len(self.groups)} groups of {zone} lost together ({self.rate:.4f}/h: the "
            "prior of its least likely pair)"
        )


def _record(hits: int, rates: Rates, *, both: bool = False) -> str:
    """What the rate of a group (or of a pair, `both`) rests on."""
    if not rates.waves:
        return "the prior alone: no wave yet"
    if not hits:
        return f"the prior: none of {rates.waves} waves hit {'both' if both else 'it'}"
    return f"hit by {hits} of {rates.waves} waves"


def losses(
    spot: Mapping[str, int], on_demand: int, needed: int, rates: Rates, recovery_hours: float
) -> list[Loss]:
    """The ways `spot` replicas per group and `on_demand` fall below `needed` Ready, each with
    its share of time: a group whose loss alone leaves fewer is down for its rate times the
    recovery; a pair, for its rate together (one wave) plus one after the other within the
    recovery; a wave of three groups or more (the record's, or a zone's prior), for its rate if
    no one or two of its groups alone leave fewer (those are counted already)."""
    total = sum(spot.values()) + on_demand
    groups = [g for g in sorted(spot) if spot[g] > 0][:MAX_GROUPS]
    t = recovery_hours
    found = []

    def short(*lost: str) -> bool:
        return total - sum(spot.get(g, 0) for g in lost) < needed

    for group in groups:
        if short(group):
            found.append(Loss("group", (group,), rates.of(group), rates.of(group) * t))
    for first, second in itertools.combinations(groups, 2):
        if short(first, second):
            together = rates.of_pair(first, second)
            share = together * t + rates.of(first) * rates.of(second) * t * t
            found.append(Loss("pair", (first, second), together, share))
    for wave in rates.wide:
        # Counted already if any two of its groups alone leave fewer: the two fullest would.
        fullest = sorted(wave.groups, key=lambda g: spot.get(g, 0))[-2:]
        if short(*wave.groups) and not short(*fullest):
            found.append(Loss(wave.kind, tuple(sorted(wave.groups)), wave.rate, wave.rate * t))
    return found


def unavailability(
    spot: Mapping[str, int], on_demand: int, needed: int, rates: Rates, recovery_hours: float
) -> float:
    """The share of time below `needed` Ready with `spot` replicas per group and `on_demand`:
    the sum of its `losses`, at most 1 (and 1 if fewer than `needed` to begin with)."""
    if sum(spot.values()) + on_demand < needed:
        return 1.0
    return min(
        1.0, sum(loss.share for loss in losses(spot, on_demand, needed, rates, recovery_hours))
    )


def spread(count: int, groups: Sequence[str]) -> dict[str, int]:
    """`count` replicas over `groups` ("pool/zone") as placement spreads them: each to the
    zone with the fewest, then the group with the fewest, then the first."""
    placed = dict.fromkeys(groups, 0)
    in_zone: dict[str, int] = {}
    for _ in range(max(0, count)):
        group = min(
            groups,
            key=lambda g: (in_zone.get(zone_of(g), 0), placed[g], groups.index(g)),
        )
        placed[group] += 1
        zone = zone_of(group)
        in_zone[zone] = in_zone.get(zone, 0) + 1
    return placed


def zone_shares(
    target_spot: int, zones: Iterable[str], waiting: Iterable[str] = ()
) -> dict[str, int]:
    """How many of a plan's spot replicas each of its zones holds at most: one in a zone
    waiting for spot capacity (`waiting_zones`: the probe that takes capacity when it comes
    back), an even split of the rest over the others, rounded up, so that a zone with capacity
    while the others have none does not collect them all, which would make its one loss take
    them all."""
    every = sorted(set(zones))
    probes = [zone for zone in every if zone in set(waiting)]
    live = len(every) - len(probes)
    share = math.ceil(max(0, target_spot - len(probes)) / max(live, 1))
    return {zone: 1 if zone in probes else share for zone in every}


def open_zones(
    target_spot: int,
    kept_by_zone: Mapping[str, int],
    zones: Iterable[str],
    waiting: Iterable[str] = (),
) -> list[str]:
    """Zones a new spot replica of a plan may go to: those holding fewer than their share
    (`zone_shares`) of the plan's spot replicas. `kept_by_zone`: the zones open to new replicas
    (not under notice), with their spot replicas now; `zones`: every zone of the plan (a zone
    under notice still counts in the split)."""
    shares = zone_shares(target_spot, [*zones, *kept_by_zone], waiting)
    return sorted(zone for zone, kept in kept_by_zone.items() if kept < shares[zone])


@dataclass(frozen=True)
class Account:
    """What the target allowed below the owner's count since it was first all Ready (a
    rollout's first load is not a miss), against what was spent. It only ever tightens the
    plan, as an error budget policy does: once more was spent than allowed, the plan is held to
    a tenth of the budget (`MISSED_PACE`: 99 planned as 99.9) until the account is back within
    with one recovery in hand (`overdrawn`), because the estimate that let it happen was too
    hopeful (a tenth of the allowance is kept in reserve). Paying back in proportion to the
    overdraft instead still missed 99 on three of eight shared trace sets; the whole tenth meets
    it on all eight (docs/targets-measured.md). It never loosens the plan: spending a quiet week's
    savings in risk was tried on the shared traces and made multi-zone clusters dearer."""

    target: float  # percent
    watched_seconds: float
    below_seconds: float
    # The record says the account went over and has not had one recovery in hand since.
    overdrawn: bool = False
    recovery_seconds: float = 0.0  # what one loss spends at once (`TargetSettings`)

    @property
    def allowed_seconds(self) -> float:
        return (1.0 - self.target / 100.0) * self.watched_seconds

    @property
    def over(self) -> bool:
        """More spent than allowed, less a reserve (`RESERVE`): the stretch below in progress
        when the account tips over still adds to it."""
        return self.below_seconds > (1.0 - RESERVE) * self.allowed_seconds

    @property
    def missed(self) -> bool:
        """Over, or back within after being over with less than one recovery in hand: the
        plan is held stricter. Back at the stated target as soon as it is within, one loss
        spends a recovery at once and tips it over again, which missed 99.9 on two public
        traces (the two zones of us-west-2 lost together twice in 7.4 days, 640 s allowed,
        365 s each; docs/targets-measured.md)."""
        if self.over:
            return True
        return self.overdrawn and self.in_hand_seconds < self.recovery_seconds

    @property
    def in_hand_seconds(self) -> float:
        """What the target allowed so far less the reserve and less what was spent: the
        seconds below the plan and the cover may still spend (none once the target is
        over)."""
        return max(0.0, (1.0 - RESERVE) * self.allowed_seconds - self.below_seconds)

    def pace(self, settings: TargetSettings) -> float:
        """The share of time below the plan and the on-demand cover may expect beyond the
        budget: the allowance in hand beyond one recovery spread over `pace_seconds`, at most
        `pace_factor` - 1 budgets more; none while the target is missed. Both move in whole
        replicas and the first within budget expects a fraction of it, so held to the budget
        alone they spend nothing (none of 1097 s on the shared 4-node three-zone traces, at
        83 % of on-demand; the cover paced over a day: 459 s, 77 %), and a plan whose one
        zone's loss takes every spot replica stays all on on-demand however quiet the zone
        (the single-zone traces at 99.9: 100 % of on-demand; with the plan paced too, 83 to
        97 % at 99.93 %). One recovery stays in hand because one loss spends it at once:
        without it a loss tipped the account into missed and the tightened plan cost more than
        the cover saved (78.5 %)."""
        if settings.pace_seconds <= 0 or self.missed:
            return 0.0
        # One loss spends about a recovery at once: what is paced is the allowance beyond it.
        in_hand = self.in_hand_seconds - settings.recovery_seconds
        budget = 1.0 - self.target / 100.0
        return min((settings.pace_factor - 1.0) * budget, max(0.0, in_hand) / settings.pace_seconds)

    def held_target(self) -> float:
        """The target the plan is held to: the stated one, or stricter while it is missed."""
        if not self.missed:
            return self.target
        return 100.0 - (100.0 - self.target) * MISSED_PACE

    def words(self) -> str:
        share = 1.0 - self.target / 100.0
        ready = 100.0 * (1.0 - self.below_seconds / max(self.watched_seconds, 1.0))
        return (
            f"so far {ready:.3f} % of {self.watched_seconds / 86400:.1f} d all Ready: "
            f"{self.below_seconds / 60:.1f} of {share * self.watched_seconds / 60:.1f} min "
            "below used"
            + (
                f", more than allowed: planned for {self.held_target():.4g} % until it is met"
                if self.over
                else f", back within what was allowed: planned for {self.held_target():.4g} % "
                f"until one recovery ({self.recovery_seconds / 60:.1f} min) is in hand"
                if self.missed
                else ""
            )
        )


@dataclass(frozen=True)
class TargetPlan:
    spot: int  # replicas wanted on spot (Ready or not, not under notice)
    on_demand: int  # replicas wanted on on-demand now
    standing_on_demand: int  # the plan's on-demand before losses (the floor)
    unavailability: float  # expected share of time below the owner's count, as planned
    why: str
    # Zones waiting for spot capacity: one of `spot` waits in each (`target_plan.waiting_zones`).
    waiting: tuple[str, ...] = ()
    # The costliest loss of the plan one step cheaper, which the search refused (`_refused`):
    # what keeps the plan from being cheaper; None when nothing cheaper was tried.
    binds: Loss | None = None

    @property
    def replicas(self) -> int:
        return self.spot + self.on_demand


def decide(
    needed: int,
    target: float,
    *,
    groups: Sequence[str],
    ready_spot: Mapping[str, int],
    rates: Rates,
    settings: TargetSettings,
    min_on_demand: int = 0,
    cover_rates: Rates | None = None,
    account: Account | None = None,
    stated: float | None = None,
) -> TargetPlan:
    """The spot and on-demand replicas for `needed` Ready at `target` percent; `groups`: the
    spot groups ("pool/zone") the policy accepts (none: everything on on-demand);
    `ready_spot`: the Ready spot replicas per group now, not under notice; `cover_rates`: the
    rates the cover now is held to (`aged`: spot capacity that came back a moment ago is
    riskier than the record's average), the plan's by default. The plan itself is held to the
    record's rates: fresh capacity raises the on-demand cover for a while, never gives spot
    up (giving it up would leave no node to grow old). `stated`: the target the words name
    when `target` is a stricter one the plan is held to for a while (`DOWN_BAND`)."""
    budget = 1.0 - target / 100.0
    # While the target is met, the plan and the cover may both expect the budget plus the
    # account's allowance in hand paced over a day (`Account.pace`).
    paced = budget + (account.pace(settings) if account is not None else 0.0)
    t = settings.recovery_seconds / 3600.0
    price = settings.spot_price_share or DEFAULT_SPOT_PRICE_SHARE
    floor = min(needed, min_on_demand)
    best: tuple[float, int, int, float] | None = None  # (cost, spot, on-demand, U)
    if groups:
        for on_demand in range(floor, needed + 1):
            if best is not None and on_demand >= best[0]:
                break  # every plan from here costs more than the best one
            for spot in range(max(0, needed - on_demand), needed + settings.max_spares + 1):
                if on_demand == needed and spot > 0:
                    break  # spot on top of N on-demand buys nothing
                share = unavailability(spread(spot, groups), on_demand, needed, rates, t)
                cost = spot * price + on_demand
                if share <= paced:
                    if best is None or cost < best[0] - 1e-9:
                        best = (cost, spot, on_demand, share)
                    break  # more spot with as many on-demand only costs more
    if best is None:
        best = (float(needed), 0, needed, 0.0)
    _, spot, standing, planned = best
    ready = {group: ready_spot.get(group, 0) for group in groups}

    def cover(held_to: Rates, allowed: float) -> int:
        now = standing
        while now < needed and (
            sum(ready.values()) + now < needed
            or unavailability(ready, now, needed, held_to, t) > allowed
        ):
            now += 1
        return now

    now = cover(cover_rates or rates, paced)
    strict = cover(cover_rates or rates, budget)
    named = f"{target:g} %" if stated is None else f"{stated:g} % (held to {target:g} %)"
    refused = _refused(needed, spot, standing, floor, groups, settings.max_spares)
    binds, bound = _bound_by(refused, needed, groups, rates, t, paced)
    why = _why(
        needed, named, spot, standing, now, ready, groups, rates, planned, shown=strict, bound=bound
    )
    if cover_rates is not None and now > (settled := cover(rates, paced)):
        why += f" ({now - settled} of them while spot capacity is fresh)"
    if (now < strict or planned > budget) and account is not None:
        # The budget alone asked for more: say what pays for the difference.
        why += f", spending the account's {account.in_hand_seconds:.0f} s in hand"
    return TargetPlan(spot, now, standing, planned, why, binds=binds)


def _refused(
    needed: int, spot: int, standing: int, floor: int, groups: Sequence[str], max_spares: int
) -> tuple[int, int, str] | None:
    """The plan one step cheaper than the chosen one, which the search tried and refused (its
    spot, on-demand, and what it is): one spare fewer; else one more on spot instead of an
    on-demand replica; else, all on on-demand, the most on spot the search tries. None when
    no cheaper plan was tried: no spare, no on-demand beyond the floor."""
    if spot > 0 and spot + standing > needed:
        return spot - 1, standing, "one spare fewer"
    if spot > 0 and standing > floor:
        return spot + 1, standing - 1, "one on-demand fewer"
    if spot == 0 and groups and needed > floor:
        return needed - floor + max_spares, floor, "the most on spot tried"
    return None


def _bound_by(
    refused: tuple[int, int, str] | None,
    needed: int,
    groups: Sequence[str],
    rates: Rates,
    recovery_hours: float,
    allowed: float,
) -> tuple[Loss | None, str]:
    """Why the plan is not the `refused` one: the loss that costs that one most, and in words
    what it would expect and that loss ("; 4 on spot + 0 on-demand (one spare fewer) would
    expect 99.874 %, 71 % of its time below from eastus-2 and eastus-3 lost together (...)").
    None and no words if it fits `allowed` after all (a spot price at or above on-demand's)."""
    if refused is None:
        return None, ""
    spot, on_demand, what = refused
    found = losses(spread(spot, groups), on_demand, needed, rates, recovery_hours)
    share = sum(loss.share for loss in found)
    if share <= allowed or not found:
        return None, ""
    worst = max(found, key=lambda loss: loss.share)
    alike = sum(1 for loss in found if math.isclose(loss.share, worst.share, rel_tol=1e-9))
    source = f"each of {alike} alike, such as " if alike > 1 else ""
    return worst, (
        f"; {spot} on spot + {on_demand} on-demand ({what}) would expect "
        f"{100 * (1 - min(1.0, share)):.3f} %, {100 * worst.share / share:.0f} % of its time "
        f"below from {source}{worst.words(rates)}"
    )


def _why(
    needed: int,
    named: str,
    spot: int,
    standing: int,
    now: int,
    ready: Mapping[str, int],
    groups: Sequence[str],
    rates: Rates,
    planned: float,
    *,
    shown: int,
    bound: str = "",
) -> str:
    """The plan in words; the cover now (`now`) is said when it or the cover the budget alone
    asks for (`shown`) is above the plan's on-demand."""
    if not groups:
        return f"{needed} on on-demand: no spot group the policy accepts"
    zones = len({zone_of(g) for g in groups})
    worst = max(groups, key=lambda g: (rates.of(g), g))
    seen = (
        f"{rates.waves} waves of Preempts in {rates.window_hours:.0f} h, "
        f"{rates.wave_rate:.3f}/h; riskiest {worst}: {rates.of(worst):.3f}/h, "
        f"hit by {rates.hits.get(worst, 0)}"
    ) + _evidence_words(rates, groups)
    if spot == 0:
        plan = f"{needed} on on-demand: no plan with spot meets {named} ({seen})"
    else:
        plan = (
            f"{spot} on spot over {len(groups)} groups in {zones} zone(s) + {standing} "
            f"on-demand ({spot + standing - needed} spare): expected "
            f"{100 * (1 - planned):.3f} % for a target of {named} ({seen})"
        )
    plan += bound
    if max(now, shown) > standing:
        # Spot replicas beyond the plan stay Ready until the plan's are (make-before-break).
        kept = sum(ready.values())
        of = f"{kept} of {spot}" if kept <= spot else f"{kept} ({spot} planned)"
        plan += f"; {now - standing} more on on-demand while {of} spot are Ready"
    return plan


def _evidence_words(rates: Rates, groups: Sequence[str]) -> str:
    """The priors Azure's evidence moved, groups with the same factor and words together:
    "; prior x4 for gpuspot1/eastus-1, gpuspot1/eastus-2: Azure's eviction rate 15-20 %"."""
    together: dict[tuple[float, str], list[str]] = {}
    for group in groups:
        if group in rates.priors:
            together.setdefault(rates.priors[group], []).append(group)
    return "".join(
        f"; prior x{factor:.2g} for {', '.join(named)}: {said}"
        for (factor, said), named in sorted(together.items(), key=lambda item: -item[0][0])
    )

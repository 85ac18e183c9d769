"""Eviction risk per spot node group (pool, zone, VM size), with the reasons behind it. Pure.

What it is for: one number per group that the controller can show (metrics, Events, `kubectl`
output) and, later, place replicas by; every number carries the inputs it came from, their values
and their ages, so a reader can see why a pool is "high". What it is not: a forecast. Each input
is a trailing average or a snapshot of someone's estimate; the model combines them in one
transparent formula and says how.

The estimate is a rate: evictions per node-hour, which for small rates is the chance that one VM
is evicted within the next hour (the unit Azure's buckets use: "10 % means a 10 % chance of being
evicted within the next hour").

    prior      = bucket rate (Resource Graph, fresh)  or  the setting's prior (per VM size, else
                 the default)                                          [evictions per node-hour]
    prior     *= placement factor (Spot Placement Score, fresh): High 0.5, Medium 1, Low 2;
                 no score (DataNotFoundOrStale, restricted, unknown word): 1
    D          = sum over this group's Preempts in the history of 2^(-age / half_life)
    E          = n * tau * (1 - e^(-W / tau))   node-hours watched, weighted the same way:
                 tau = half_life / ln 2 (hours), W = how long the history has watched (at most its
                 24 h retention), n = the group's nodes now, or the distinct nodes it lost in
                 the history if that is more (a group a wave has emptied still has an exposure)
    estimate   = (w * prior + D) / (w + E)      w = prior weight, in node-hours
    level      = low below `medium_rate_per_hour`, high from `high_rate_per_hour`, medium
                 between; once a group has a level, it moves only when the estimate clears the
                 threshold between the two levels by `level_band` (10 %): up from
                 `threshold * 1.1`, down below `threshold * 0.9` (hysteresis)

Why the hysteresis: the default prior (0.05) is the medium threshold itself, on purpose (an
unknown size is assumed at the top of Azure's lowest bucket), so a quiet group sits exactly on
the line: a record with a few node-hours reads 0.0499 (low), a record not yet started or a
moment with no exposure reads 0.05 (medium), and the label, with every decision that reads it
(placement, returns, moves), flipped back and forth with nothing happening. The band makes a
quiet group leave "medium" once its record has pulled it clearly below (to 0.045) and stay
"low"; a real eviction moves the estimate far more than 10 %.

Why this shape: it is the mean of a Gamma-Poisson posterior. The prior counts as `w` node-hours of
experience at the prior rate; the cluster's own record adds D evictions over E node-hours. A young
record or a small pool moves the estimate little, a wave of Preempts in a big pool moves it a lot,
and old evictions fade with the half-life instead of dropping off a window's edge. Azure's bucket
is the best prior there is (a 7- to 28-day trailing average per size and region, but regional and
coarse); the placement score is per zone and "reflects ... the expected lifetimes ... after
allocation", so it scales the prior within the documented meaning (a factor of 2 either way:
coarse on purpose, as the score is). With neither API, the prior comes from settings.

Inputs older than their `max_age` are not used (and a reason says so): the refreshers keep the
last good data through failures, and this is where "last good" stops being good enough.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from pydantic import ValidationInfo, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from rebalancer.azure.risk_data import BUCKET_RATES, EvictionRates, PlacementScores, parse_bucket
from rebalancer.controller.cost import region_of
from rebalancer.controller.history import RETENTION, WINDOWS, Entry, History
from rebalancer.controller.model import NodeInfo
from rebalancer.setting_groups import SETTINGS_CONFIG, setting

GroupKey = tuple[str, str, str]  # (pool, zone, sku) as the Nodes' labels spell them

LOW, MEDIUM, HIGH = "low", "medium", "high"
LEVELS = (LOW, MEDIUM, HIGH)
# Source names: metric labels and the words of the reasons.
HISTORY = "history"
RESOURCE_GRAPH = "resource_graph"
PLACEMENT_SCORE = "placement_score"
PRIOR = "prior"
SOURCES = (HISTORY, RESOURCE_GRAPH, PLACEMENT_SCORE, PRIOR)
PLACEMENT_FACTORS = {"High": 0.5, "Medium": 1.0, "Low": 2.0}
PLACEMENT_VALUES = {"High": 3, "Medium": 2, "Low": 1}  # for a gauge; 0: no score


@pydantic_dataclass(frozen=True, config=SETTINGS_CONFIG)
class RiskSettings:
    """The risk model's settings (REBALANCER_RISK_*); the feeds' own are the controller's."""

    # The edge of Azure's lowest bucket.
    prior_rate_per_hour: float = setting(
        0.05,
        ge=0,
        le=1,
        description="Eviction risk of a spot VM size without better data: evictions per "
        "node-hour (0.05: the top of Azure's lowest bucket, 0-5 %).",
    )
    # By VM size as the user spells it; `priors` is by lower-case VM size.
    prior_rates: dict[str, float] = setting(
        default_factory=dict,
        description="Priors per VM size, evictions per node-hour, as JSON: "
        '{"Standard_NC24ads_A100_v4": 0.08}; Azure\'s bucket wins where it is fetched.',
    )
    prior_weight_hours: float = setting(
        24.0,
        ge=0,
        description="Node-hours of experience the prior counts for against the eviction history.",
    )
    history_half_life_seconds: float = setting(
        21600.0, gt=0, description="A Preempt in the history counts half after this long."
    )
    medium_rate_per_hour: float = setting(
        0.05, gt=0, le=1, description="Risk level medium from this many evictions per node-hour."
    )
    high_rate_per_hour: float = setting(
        0.15, gt=0, le=1, description="Risk level high from this many evictions per node-hour."
    )
    level_band: float = 0.1  # hysteresis: a level changes when the rate clears a threshold by 10 %
    resource_graph_max_age_seconds: float = setting(
        172800.0, gt=0, description="Use fetched eviction-rate buckets up to this old."
    )
    placement_score_max_age_seconds: float = setting(
        3600.0, gt=0, description="Use fetched Spot Placement Scores up to this old."
    )

    @field_validator("prior_rates")
    @classmethod
    def _rates(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(sku for sku, rate in value.items() if not 0 <= rate <= 1 or not sku)
        if bad:
            raise ValueError(f"rates must be between 0 and 1 evictions per node-hour: {bad}")
        return value

    @field_validator("high_rate_per_hour")
    @classmethod
    def _levels(cls, value: float, info: ValidationInfo) -> float:
        medium = info.data.get("medium_rate_per_hour")
        if medium is not None and medium > value:
            raise ValueError(f"below risk_medium_rate_per_hour ({medium})")
        return value

    @cached_property
    def priors(self) -> dict[str, float]:
        """`prior_rates` by lower-case VM size."""
        return {sku.lower(): rate for sku, rate in self.prior_rates.items()}


@dataclass(frozen=True)
class RiskInput:
    """One input: where from, what it said, how old it is, and what it did to the estimate."""

    source: str
    detail: str
    used: bool
    age_seconds: float | None = None  # None: the input has no age (settings) or there is none

    def __str__(self) -> str:
        age = f", {_age(self.age_seconds)} old" if self.age_seconds is not None else ""
        return f"{self.source}: {self.detail}{age}{'' if self.used else ' (not used)'}"


@dataclass(frozen=True)
class Risk:
    pool: str
    zone: str
    sku: str
    region: str
    rate_per_hour: float
    level: str
    base_rate: float  # the bucket's rate or the settings' prior
    prior_rate: float  # the base rate times the placement factor
    observed_rate: float | None  # D / E; None while the history has watched nothing
    placement_score: str  # as Azure spelled it; "" when none was used
    reasons: tuple[RiskInput, ...]
    # What the prior would be with no Azure data (the settings' prior for the VM size): the
    # availability targets weigh Azure's evidence by prior_rate / default_rate. None: unknown.
    default_rate: float | None = None
    bucket: str = ""  # Resource Graph's bucket used ("10-15"); "" when none was used

    @property
    def azure_factor(self) -> float:
        """How many times riskier Azure's fresh data make the prior than the settings' alone
        (bucket over the settings' prior, times the placement factor); 1 without either."""
        if not self.default_rate:
            return 1.0
        return self.prior_rate / self.default_rate

    @property
    def key(self) -> GroupKey:
        return (self.pool, self.zone, self.sku)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(reason.source for reason in self.reasons if reason.used)

    def explain(self) -> str:
        """One line for an Event, a log line or `kubectl` output."""
        inputs = "; ".join(str(reason) for reason in self.reasons)
        return (
            f"{self.level} ({self.rate_per_hour:.3f} evictions per node-hour) "
            f"for {self.pool}/{self.zone}/{self.sku}: {inputs}"
        )


def level_of(rate: float, settings: RiskSettings, *, was: str | None = None) -> str:
    """The level of an estimate; with `was` (the group's level at the last assessment) the
    level moves only when the estimate clears the threshold it crosses by `level_band`."""
    plain = _level(rate, settings.medium_rate_per_hour, settings.high_rate_per_hour)
    if was not in LEVELS or plain == was:
        return plain
    up = LEVELS.index(plain) > LEVELS.index(was)
    factor = 1.0 + settings.level_band if up else 1.0 - settings.level_band
    strict = _level(
        rate, settings.medium_rate_per_hour * factor, settings.high_rate_per_hour * factor
    )
    # `strict` lies between `was` and `plain`: the furthest the estimate has clearly gone.
    pick = max if up else min
    return LEVELS[pick(LEVELS.index(strict), LEVELS.index(was))]


def _level(rate: float, medium: float, high: float) -> str:
    if rate >= high:
        return HIGH
    if rate >= medium:
        return MEDIUM
    return LOW


def zone_number(zone: str) -> str:
    """`eastus-1` -> `1` (the Placement Score API's `availabilityZone`); `0` or none: `` (AKS
    labels nodes of a pool without zones with zone `0`)."""
    number = zone.rsplit("-", 1)[-1] if zone else ""
    return "" if number in ("", "0") else number.lower()


def region_of_zone(zone: str) -> str:
    return zone.rsplit("-", 1)[0].lower() if "-" in zone else ""


def groups_of(nodes: Iterable[NodeInfo], history: History, now: datetime) -> dict[GroupKey, str]:
    """Every spot group the controller sees, on Nodes or in the history, with its region."""
    groups: dict[GroupKey, str] = {}
    for entry in history.entries:
        if entry.spot and entry.preempt and entry.pool and now - entry.first_seen <= RETENTION:
            groups[(entry.pool, entry.zone, entry.sku)] = region_of_zone(entry.zone)
    for node in nodes:
        if node.spot and node.pool:
            region = region_of(node.labels)
            key = (node.pool, node.zone, node.sku)
            groups[key] = region or groups.get(key, "")
    return groups


def assess(
    *,
    nodes: Iterable[NodeInfo],
    history: History,
    now: datetime,
    settings: RiskSettings,
    eviction_rates: EvictionRates | None = None,
    placement_scores: PlacementScores | None = None,
    previous: Mapping[GroupKey, str] | None = None,
) -> dict[GroupKey, Risk]:
    """The risk of every spot group seen, keyed and ordered by (pool, zone, sku); `previous`:
    each group's level at the last assessment (the hysteresis of `level_of`)."""
    was = previous or {}
    node_list = list(nodes)
    counts: dict[GroupKey, int] = {}
    for node in node_list:
        if node.spot:
            key = (node.pool, node.zone, node.sku)
            counts[key] = counts.get(key, 0) + 1
    groups = groups_of(node_list, history, now)
    return {
        key: _assess_group(
            key,
            region=groups[key],
            nodes_now=counts.get(key, 0),
            history=history,
            now=now,
            settings=settings,
            eviction_rates=eviction_rates,
            placement_scores=placement_scores,
            was=was.get(key),
        )
        for key in sorted(groups)
    }


def _assess_group(
    key: GroupKey,
    *,
    region: str,
    nodes_now: int,
    history: History,
    now: datetime,
    settings: RiskSettings,
    eviction_rates: EvictionRates | None,
    placement_scores: PlacementScores | None,
    was: str | None = None,
) -> Risk:
    pool, zone, sku = key
    reasons: list[RiskInput] = []
    default, default_said = _default_prior(sku, settings)
    prior, bucket, bucket_reason = _prior(sku, region, now, settings, eviction_rates)
    reasons.append(bucket_reason)
    if not bucket:  # Azure says nothing (fresh) of the size: the settings' prior
        prior = default
        reasons.append(RiskInput(PRIOR, default_said, used=True))
    factor, score, score_reason = _placement(sku, region, zone, now, settings, placement_scores)
    reasons.append(score_reason)
    base = prior
    prior *= factor

    decayed, exposure, history_reason = _history(key, nodes_now, history, now, settings)
    reasons.append(history_reason)
    weight = settings.prior_weight_hours
    rate = (weight * prior + decayed) / (weight + exposure) if weight + exposure > 0 else prior
    return Risk(
        pool=pool,
        zone=zone,
        sku=sku,
        region=region,
        rate_per_hour=rate,
        level=level_of(rate, settings, was=was),
        base_rate=base,
        prior_rate=prior,
        observed_rate=decayed / exposure if exposure > 0 else None,
        placement_score=score,
        reasons=tuple(reasons),
        default_rate=default,
        bucket=bucket,
    )


def _default_prior(sku: str, settings: RiskSettings) -> tuple[float, str]:
    """The settings' prior for a VM size, and its words: the prior when Azure says nothing."""
    sku_key = sku.lower()
    if sku_key in settings.priors:
        rate = settings.priors[sku_key]
        return rate, f"{rate:.3f} per node-hour for {sku} (settings)"
    rate = settings.prior_rate_per_hour
    return rate, f"{rate:.3f} per node-hour (default, settings)"


def _prior(
    sku: str,
    region: str,
    now: datetime,
    settings: RiskSettings,
    rates: EvictionRates | None,
) -> tuple[float, str, RiskInput]:
    """(Resource Graph's rate, its canonical bucket, its reason); the bucket is "" when it is
    not used (none fetched, no row, stale, unreadable), and the rate is then 0."""
    sku_key = sku.lower()
    if rates is None:
        graph = RiskInput(RESOURCE_GRAPH, "no data (disabled or not fetched yet)", used=False)
        return 0.0, "", graph
    age = (now - rates.fetched_at).total_seconds()
    bucket = rates.buckets.get((sku_key, region))
    if bucket is None:
        graph = RiskInput(RESOURCE_GRAPH, f"no bucket for {sku} in {region or '?'}", False, age)
        return 0.0, "", graph
    canonical = parse_bucket(bucket)
    said_bucket = f"bucket {canonical or bucket} % per hour for {sku} in {region}"
    if canonical is None or age > settings.resource_graph_max_age_seconds:
        said_bucket += ", stale" if canonical else ", not a bucket"
        return 0.0, "", RiskInput(RESOURCE_GRAPH, said_bucket, used=False, age_seconds=age)
    rate = BUCKET_RATES[canonical]
    return rate, canonical, RiskInput(RESOURCE_GRAPH, f"{said_bucket} -> {rate:.3f}", True, age)


def _placement(
    sku: str,
    region: str,
    zone: str,
    now: datetime,
    settings: RiskSettings,
    scores: PlacementScores | None,
) -> tuple[float, str, RiskInput]:
    """(factor on the prior, the score used or "", the reason)."""
    if scores is None:
        return 1.0, "", RiskInput(PLACEMENT_SCORE, "no data (disabled or not fetched yet)", False)
    age = (now - scores.fetched_at).total_seconds()
    number = zone_number(zone)
    where = f"{sku} in {region or '?'}" + (f" zone {number}" if number else "")
    score = scores.scores.get((sku.lower(), region, number))
    if score is None and number:
        score = scores.scores.get((sku.lower(), region, ""))  # a regional score, if that is all
    if score is None:
        return 1.0, "", RiskInput(PLACEMENT_SCORE, f"no score for {where}", False, age)
    if age > settings.placement_score_max_age_seconds:
        return 1.0, "", RiskInput(PLACEMENT_SCORE, f"{score} for {where}, stale", False, age)
    factor = PLACEMENT_FACTORS.get(score)
    if factor is None:
        return 1.0, "", RiskInput(PLACEMENT_SCORE, f"{score} for {where}: no score", False, age)
    return (
        factor,
        score,
        RiskInput(PLACEMENT_SCORE, f"{score} for {where} -> x{factor:g}", True, age),
    )


def _history(
    key: GroupKey,
    nodes_now: int,
    history: History,
    now: datetime,
    settings: RiskSettings,
) -> tuple[float, float, RiskInput]:
    """(decayed Preempt count D, weighted node-hours watched E, the reason)."""
    if history.since is None:
        return 0.0, 0.0, RiskInput(HISTORY, "no record yet", used=False)
    half_life_hours = settings.history_half_life_seconds / 3600.0
    tau = half_life_hours / math.log(2)
    preempts = [
        e
        for e in history.entries
        if e.preempt
        and (e.pool, e.zone, e.sku) == key
        and timedelta(0) <= now - e.first_seen <= RETENTION
    ]
    decayed = sum(
        0.5 ** ((now - e.first_seen).total_seconds() / 3600.0 / half_life_hours) for e in preempts
    )
    watched = min(max(0.0, (now - history.since).total_seconds()), RETENTION.total_seconds())
    # The group's size: its nodes now, or the most it lost within one hour if more (a wave shows
    # the size it had). Not every node it ever lost: a pool that loses its one node every hour
    # would count as 24 nodes watched all day, and the more it churned the safer it would look.
    nodes = max(nodes_now, _most_lost_within(preempts, timedelta(hours=1)))
    exposure = nodes * tau * (1.0 - math.exp(-(watched / 3600.0) / tau))
    windows = ", ".join(
        f"{sum(1 for e in preempts if now - e.first_seen <= span)} in {name}"
        for name, span in WINDOWS.items()
    )
    last = (
        f", last {_age((now - max(e.first_seen for e in preempts)).total_seconds())} ago"
        if preempts
        else ""
    )
    detail = (
        f"Preempts {windows}{last}; {decayed:.2f} decayed over {exposure:.1f} node-hours "
        f"({nodes} nodes, record {_age(watched)} old)"
    )
    # No age: the record is read live from the cluster; its span is in the detail.
    return decayed, exposure, RiskInput(HISTORY, detail, used=exposure > 0)


def _most_lost_within(preempts: list[Entry], span: timedelta) -> int:
    """The most distinct nodes Preempted within any `span` (a sliding window: the history may
    hold 2000 entries, assessed every few seconds)."""
    ordered = sorted(preempts, key=lambda e: e.first_seen)
    in_window: Counter[str] = Counter()
    most, start = 0, 0
    for entry in ordered:
        in_window[entry.node] += 1
        while entry.first_seen - ordered[start].first_seen > span:
            in_window[ordered[start].node] -= 1
            if not in_window[ordered[start].node]:
                del in_window[ordered[start].node]
            start += 1
        most = max(most, len(in_window))
    return most


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"

"""The risk model and the parsers of Azure's risk data, as tables. Expected figures are worked
out from each scenario by the formula in rebalancer/controller/risk.py's docstring."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.azure.risk_data import (
    EvictionRates,
    PlacementScores,
    eviction_rate_query,
    parse_bucket,
    parse_eviction_rate_rows,
    parse_placement_scores,
)
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.risk import (
    HIGH,
    LOW,
    MEDIUM,
    Risk,
    RiskSettings,
    assess,
    level_of,
    zone_number,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
A100 = "Standard_NC24ads_A100_v4"
T4 = "Standard_NC4as_T4_v3"
SETTINGS = RiskSettings()  # prior 0.05, weight 24 node-hours, half-life 6 h, 0.05 / 0.15
TAU = 6 / math.log(2)  # hours


def node(name: str, pool: str = "spota", zone: str = "eastus-1", sku: str = A100) -> NodeInfo:
    return NodeInfo.from_json(
        {
            "metadata": {
                "name": name,
                "labels": {
                    names.AKS_AGENTPOOL_LABEL: pool,
                    names.AKS_SPOT_LABEL: "spot",
                    names.INSTANCE_TYPE_LABEL: sku,
                    names.ZONE_LABEL: zone,
                    names.REGION_LABEL: zone.rsplit("-", 1)[0],
                },
            },
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": []},
        }
    )


def preempt(hours_ago: float, node_name: str = "n0", pool: str = "spota", zone: str = "eastus-1",
            sku: str = A100, event_type: str = "Preempt") -> Entry:  # fmt: skip
    return Entry(
        event_id=f"{node_name}-{hours_ago}",
        event_type=event_type,
        node=node_name,
        pool=pool,
        zone=zone,
        sku=sku,
        spot=True,
        first_seen=NOW - timedelta(hours=hours_ago),
    )


def history(*entries: Entry, watched_hours: float = 24.0) -> History:
    return History(since=NOW - timedelta(hours=watched_hours), entries=tuple(entries))


def rates(buckets: dict[tuple[str, str], str], hours_ago: float = 1.0) -> EvictionRates:
    return EvictionRates(buckets, NOW - timedelta(hours=hours_ago))


def scores(table: dict[tuple[str, str, str], str], minutes_ago: float = 10.0) -> PlacementScores:
    return PlacementScores(table, NOW - timedelta(minutes=minutes_ago))


# ---- parsers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bucket"),
    [
        ("0-5", "0-5"),
        ("0-5%", "0-5"),
        ("0%-5%", "0-5"),
        (" 5 - 10 % ", "5-10"),
        ("10-15", "10-15"),
        ("15-20%", "15-20"),
        ("20+", "20+"),
        ("20+%", "20+"),
        ("20%+", "20+"),
        ("5-15", None),  # not one of Azure's buckets
        ("25+", None),
        ("high", None),
        ("", None),
        ("-5", None),
    ],
)
def test_parse_bucket(text: str, bucket: str | None) -> None:
    assert parse_bucket(text) == bucket


def test_eviction_rate_rows_projected_and_raw() -> None:
    rows: list[Any] = [
        {"skuName": "standard_nc24ads_a100_v4", "location": "eastus", "spotEvictionRate": "5-10"},
        {
            "sku": {"name": "Standard_NC4as_T4_v3"},
            "location": "EastUS",
            "properties": {"evictionRate": "20+%"},
        },
        {"skuName": "standard_d2s_v4", "location": "eastus", "spotEvictionRate": "lots"},
        {"skuName": "standard_d4s_v4", "spotEvictionRate": "0-5"},  # no location
        "garbage",
    ]
    buckets, unreadable = parse_eviction_rate_rows(rows)
    assert buckets == {
        ("standard_nc24ads_a100_v4", "eastus"): "5-10",
        ("standard_nc4as_t4_v3", "eastus"): "20+",
    }
    assert unreadable == 3


def test_eviction_rate_query_quotes_only_azure_names() -> None:
    query = eviction_rate_query([A100, "x') | union (Resources", T4], ["eastus", "west us"])
    assert "sku.name in~ ('standard_nc24ads_a100_v4', 'standard_nc4as_t4_v3')" in query
    assert "location in~ ('eastus')" in query
    assert "union" not in query


def test_placement_scores_answer() -> None:
    answer = {
        "desiredLocations": ["eastus"],
        "placementScores": [
            {
                "sku": A100,
                "region": "eastus",
                "availabilityZone": "1",
                "score": "High",
                "isQuotaAvailable": True,
            },
            {
                "sku": A100,
                "region": "eastus",
                "availabilityZone": "2",
                "score": "DataNotFoundOrStale",
            },
            {"sku": T4, "region": "EastUS", "score": "Low"},  # regional
            {"sku": T4, "region": "eastus"},  # no score
            17,
        ],
    }
    table, unreadable = parse_placement_scores(answer)
    assert table == {
        ("standard_nc24ads_a100_v4", "eastus", "1"): "High",
        ("standard_nc24ads_a100_v4", "eastus", "2"): "DataNotFoundOrStale",
        ("standard_nc4as_t4_v3", "eastus", ""): "Low",
    }
    assert unreadable == 2
    with pytest.raises(ValueError, match="placementScores"):
        parse_placement_scores({"error": "x"})


@pytest.mark.parametrize(
    ("zone", "number"), [("eastus-1", "1"), ("westeurope-3", "3"), ("0", ""), ("", "")]
)
def test_zone_number(zone: str, number: str) -> None:
    assert zone_number(zone) == number


@pytest.mark.parametrize(
    ("rate", "level"),
    [(0.0, LOW), (0.049, LOW), (0.05, MEDIUM), (0.149, MEDIUM), (0.15, HIGH), (0.9, HIGH)],
)
def test_levels(rate: float, level: str) -> None:
    assert level_of(rate, SETTINGS) == level


# ---- the model ---------------------------------------------------------------------------------

# (case, nodes, history, eviction rates, placement scores, settings,
#  expected rate, level, sources used)
CASES: list[
    tuple[str, list[NodeInfo], History, Any, Any, RiskSettings, float, str, tuple[str, ...]]
]
CASES = [
    (
        "no API, no record: the default prior",
        [node("n0")],
        History(),
        None,
        None,
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
    (
        "a prior per VM size from settings",
        [node("n0")],
        History(),
        None,
        None,
        RiskSettings(prior_rates={A100.lower(): 0.02}),
        0.02,
        LOW,
        ("prior",),
    ),
    (
        "Resource Graph bucket 5-10 is the prior: its midpoint",
        [node("n0")],
        History(),
        rates({(A100.lower(), "eastus"): "5-10"}),
        None,
        SETTINGS,
        0.075,
        MEDIUM,
        ("resource_graph",),
    ),
    (
        "a bucket for another region is not used",
        [node("n0")],
        History(),
        rates({(A100.lower(), "westus2"): "20+"}),
        None,
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
    (
        "a stale bucket (3 days, max 2) falls back to the prior",
        [node("n0")],
        History(),
        rates({(A100.lower(), "eastus"): "20+"}, hours_ago=72),
        None,
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
    (
        "bucket 10-15 with placement High in the node's zone: halved",
        [node("n0")],
        History(),
        rates({(A100.lower(), "eastus"): "10-15"}),
        scores({(A100.lower(), "eastus", "1"): "High", (A100.lower(), "eastus", "2"): "Low"}),
        SETTINGS,
        0.0625,
        MEDIUM,
        ("resource_graph", "placement_score"),
    ),
    (
        "bucket 10-15 with placement Low: doubled, high",
        [node("n0", zone="eastus-2")],
        History(),
        rates({(A100.lower(), "eastus"): "10-15"}),
        scores({(A100.lower(), "eastus", "1"): "High", (A100.lower(), "eastus", "2"): "Low"}),
        SETTINGS,
        0.25,
        HIGH,
        ("resource_graph", "placement_score"),
    ),
    (
        "a regional score stands in for a missing zonal one",
        [node("n0", zone="eastus-3")],
        History(),
        None,
        scores({(A100.lower(), "eastus", ""): "High"}),
        SETTINGS,
        0.025,
        LOW,
        ("prior", "placement_score"),
    ),
    (
        "DataNotFoundOrStale changes nothing",
        [node("n0")],
        History(),
        None,
        scores({(A100.lower(), "eastus", "1"): "DataNotFoundOrStale"}),
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
    (
        "a stale score (2 h, max 1) changes nothing",
        [node("n0")],
        History(),
        None,
        scores({(A100.lower(), "eastus", "1"): "Low"}, minutes_ago=120),
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
    (
        "a quiet day of 4 nodes pulls the prior down",
        [node(f"n{i}") for i in range(4)],
        history(),
        None,
        None,
        SETTINGS,
        24 * 0.05 / (24 + 4 * TAU * 15 / 16),
        LOW,
        ("prior", "history"),
    ),
    (
        "two Preempts (now and one half-life ago) among 4 nodes over a day",
        [node(f"n{i}") for i in range(4)],
        history(preempt(0), preempt(6, "n9")),
        None,
        None,
        SETTINGS,
        (24 * 0.05 + 1.5) / (24 + 4 * TAU * 15 / 16),
        LOW,
        ("prior", "history"),
    ),
    (
        "a wave: 3 Preempts in the last hour of a pool with 2 nodes left and a 1 h record",
        [node("n0"), node("n1")],
        history(preempt(0, "a"), preempt(0, "b"), preempt(0, "c"), watched_hours=1),
        None,
        None,
        SETTINGS,
        # nodes: the 3 lost outnumber the 2 left; W = 1 h
        (24 * 0.05 + 3) / (24 + 3 * TAU * (1 - math.exp(-1 / TAU))),
        HIGH,
        ("prior", "history"),
    ),
    (
        "Preempts of another zone and Freeze events do not count",
        [node("n0")],
        history(preempt(0, zone="eastus-2"), preempt(0, event_type="Freeze"), watched_hours=0),
        None,
        None,
        SETTINGS,
        0.05,
        MEDIUM,
        ("prior",),
    ),
]


@pytest.mark.parametrize(
    ("nodes", "record", "eviction_rates", "placement", "settings", "rate", "level", "sources"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_assess(
    nodes: list[NodeInfo],
    record: History,
    eviction_rates: EvictionRates | None,
    placement: PlacementScores | None,
    settings: RiskSettings,
    rate: float,
    level: str,
    sources: tuple[str, ...],
) -> None:
    risks = assess(
        nodes=nodes,
        history=record,
        now=NOW,
        settings=settings,
        eviction_rates=eviction_rates,
        placement_scores=placement,
    )
    risk = risks[("spota", nodes[0].zone, A100)]
    assert risk.rate_per_hour == pytest.approx(rate)
    assert risk.level == level
    assert sorted(risk.sources) == sorted(sources)


def test_a_group_only_in_the_history_is_assessed_from_the_nodes_it_lost() -> None:
    record = history(preempt(1, "x"), preempt(2, "y"), preempt(3, "y", pool="spotb", sku=T4))
    risks = assess(nodes=[node("n0", pool="other")], history=record, now=NOW, settings=SETTINGS)
    assert list(risks) == [
        ("other", "eastus-1", A100),
        ("spota", "eastus-1", A100),
        ("spotb", "eastus-1", T4),
    ]
    lost = risks[("spota", "eastus-1", A100)]
    decayed = 0.5 ** (1 / 6) + 0.5 ** (2 / 6)
    assert lost.region == "eastus"
    assert lost.observed_rate == pytest.approx(decayed / (2 * TAU * 15 / 16))
    assert lost.rate_per_hour == pytest.approx((1.2 + decayed) / (24 + 2 * TAU * 15 / 16))


def test_regular_nodes_are_not_assessed() -> None:
    regular = NodeInfo.from_json(
        {"metadata": {"name": "od", "labels": {names.AKS_AGENTPOOL_LABEL: "gpuod"}}}
    )
    assert assess(nodes=[regular], history=History(), now=NOW, settings=SETTINGS) == {}


def test_explain_names_every_input_with_its_value_and_age() -> None:
    risk = assess(
        nodes=[node("n0"), node("n1")],
        history=history(preempt(0.5), watched_hours=3),
        now=NOW,
        settings=SETTINGS,
        eviction_rates=rates({(A100.lower(), "eastus"): "15-20%"}, hours_ago=5),
        placement_scores=scores({(A100.lower(), "eastus", "1"): "Medium"}, minutes_ago=12),
    )[("spota", "eastus-1", A100)]
    text = risk.explain()
    assert text.startswith("high (0.")
    assert "resource_graph: bucket 15-20 % per hour for Standard_NC24ads_A100_v4 in eastus" in text
    assert "-> 0.175, 5.0h old" in text
    assert (
        "placement_score: Medium for Standard_NC24ads_A100_v4 in eastus zone 1 -> x1, 12m old"
        in text
    )
    assert "history: Preempts 1 in 1h, 1 in 6h, 1 in 24h, last 30m ago" in text
    assert "(2 nodes, record 3.0h old)" in text
    assert "prior" not in risk.sources


def test_a_pool_that_keeps_losing_its_one_node_is_high_risk_not_a_big_safe_pool() -> None:
    """One node, Preempted every 90 minutes for a day (16 VMs in all, never two at once): the
    group had one node, not 16 watched all day; the more it churns, the riskier it reads."""
    losses = [preempt(0.5 + 1.5 * k, f"vm{k}") for k in range(16)]
    risks = assess(nodes=[node("vm16")], history=history(*losses), now=NOW, settings=SETTINGS)
    risk = risks[("spota", "eastus-1", A100)]
    decayed = sum(0.5 ** ((0.5 + 1.5 * k) / 6) for k in range(16))
    exposure = 1 * TAU * (1 - math.exp(-24 / TAU))
    assert risk.rate_per_hour == pytest.approx((24 * 0.05 + decayed) / (24 + exposure))
    assert risk.level == HIGH
    # A wave shows the size the group had: 16 nodes lost within the hour, none left.
    wave = [preempt(2.0 + k / 60, f"w{k}") for k in range(16)]
    waved = assess(nodes=[], history=history(*wave), now=NOW, settings=SETTINGS)
    after = waved[("spota", "eastus-1", A100)]
    wave_decayed = sum(0.5 ** ((2.0 + k / 60) / 6) for k in range(16))
    assert after.rate_per_hour == pytest.approx(
        (24 * 0.05 + wave_decayed) / (24 + 16 * TAU * (1 - math.exp(-24 / TAU)))
    )


# ---- a stable level: the hysteresis --------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "was", "level"),
    [
        (0.05, None, MEDIUM),  # first assessment: the plain thresholds
        (0.0499, MEDIUM, MEDIUM),  # just below 0.05: not clearly, stays
        (0.0449, MEDIUM, LOW),  # below 0.05 * 0.9
        (0.05, LOW, LOW),  # back on the line: stays low
        (0.0549, LOW, LOW),
        (0.0551, LOW, MEDIUM),  # past 0.05 * 1.1
        (0.16, LOW, MEDIUM),  # past 0.15, not clearly past: as far as it clearly went
        (0.2, LOW, HIGH),
        (0.14, HIGH, HIGH),  # above 0.15 * 0.9
        (0.13, HIGH, MEDIUM),
        (0.04, HIGH, LOW),
        (0.1, MEDIUM, MEDIUM),
        (0.1, "unknown", MEDIUM),
    ],
)
def test_a_level_moves_when_the_estimate_clears_the_threshold(
    rate: float, was: str | None, level: str
) -> None:
    assert level_of(rate, SETTINGS, was=was) == level


def test_a_quiet_group_on_the_prior_does_not_flip_between_medium_and_low() -> None:
    """The default prior is the medium threshold: a quiet group reads exactly 0.05 while its
    record has watched nothing (before the record, at its start, or when it is not readable for
    a pass) and a hair below as soon as it has. Assessed one after another, as the recorder does,
    the level leaves medium once, when the record has clearly pulled it down, and stays low."""
    nodes = [node(f"n{i}") for i in range(4)]
    key = ("spota", "eastus-1", A100)
    moments = [History(), history(watched_hours=0)]
    moments += [history(watched_hours=h) for h in (0.02, 0.2, 1.0, 3.0)]
    moments += [History(), history(watched_hours=0), history(watched_hours=3.1)]
    plain, stable, previous = [], [], None
    for record in moments:
        plain.append(assess(nodes=nodes, history=record, now=NOW, settings=SETTINGS)[key].level)
        risks = assess(nodes=nodes, history=record, now=NOW, settings=SETTINGS, previous=previous)
        stable.append(risks[key].level)
        previous = {k: r.level for k, r in risks.items()}
    # Without the band: medium, low, medium, low... with nothing happening.
    assert plain == [MEDIUM, MEDIUM, LOW, LOW, LOW, LOW, MEDIUM, MEDIUM, LOW]
    assert stable == [MEDIUM, MEDIUM, MEDIUM, MEDIUM, LOW, LOW, LOW, LOW, LOW]
    # A real eviction still moves it at once.
    record = history(preempt(0), preempt(0.1, "n1"), watched_hours=3.2)
    risks = assess(nodes=nodes, history=record, now=NOW, settings=SETTINGS, previous=previous)
    assert risks[key].level == MEDIUM


def test_each_risk_says_what_azure_did_to_its_prior_for_the_availability_targets() -> None:
    def assessed(settings: RiskSettings, hours_ago: float, minutes_ago: float) -> Risk:
        return assess(
            nodes=[node("n0")], history=History(), now=NOW, settings=settings,
            eviction_rates=rates({(A100.lower(), "eastus"): "10-15"}, hours_ago=hours_ago),
            placement_scores=scores({(A100.lower(), "eastus", "1"): "Low"},
                                    minutes_ago=minutes_ago),
        )[("spota", "eastus-1", A100)]  # fmt: skip

    # Fresh: bucket 10-15 (0.125) x Low (2) = 0.25 against the default prior 0.05: x5.
    fresh = assessed(SETTINGS, hours_ago=1, minutes_ago=10)
    assert (fresh.bucket, fresh.placement_score, fresh.default_rate) == ("10-15", "Low", 0.05)
    assert fresh.azure_factor == pytest.approx(5)
    # Against an operator's prior of 0.125 for the size: the bucket says the same, Low x2.
    own = RiskSettings(prior_rates={A100: 0.125})
    assert assessed(own, hours_ago=1, minutes_ago=10).azure_factor == pytest.approx(2)
    # Both stale (the bucket older than 2 d, the score than 1 h): nothing used, x1.
    stale = assessed(SETTINGS, hours_ago=49, minutes_ago=61)
    assert (stale.bucket, stale.placement_score, stale.azure_factor) == ("", "", 1.0)
    assert stale.prior_rate == stale.default_rate == 0.05

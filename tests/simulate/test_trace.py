"""Reading traces: the format, its trap (1 means available) and every way a file can be bad."""

from __future__ import annotations

import json

import pytest

from rebalancer.simulate import InputError
from rebalancer.simulate.trace import parse_trace, slot_timeline
from rebalancer.simulate.workload import parse_distribution

THIRTY = parse_distribution(30, what="test")


def trace_text(data: object, gap: object = 300) -> str:
    return json.dumps({"metadata": {"gap_seconds": gap}, "data": data})


def test_a_trace_reads_counts_of_available_instances() -> None:
    trace = parse_trace(trace_text([1, 1, 0, 1]), source="t.json", name="t")
    assert trace.data == (1, 1, 0, 1)
    assert trace.seconds == 1200
    assert trace.capacity_at(0) == 1  # 1 is "available", never "preempted"
    assert trace.capacity_at(650) == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 0]", "expected an object"),
        (json.dumps({"data": [1]}), "no metadata.gap_seconds"),
        (trace_text([1], gap=0), "gap_seconds must be a positive number"),
        (trace_text([1], gap="300"), "gap_seconds must be a positive number"),
        (json.dumps({"metadata": {"gap_seconds": 300}}), "no data list"),
        (trace_text([]), "empty trace"),
        (trace_text([1, None, 1]), "gap at tick 1 (300 s)"),
        (trace_text([1, -1]), "negative instance count"),
        (trace_text([1, 0.5]), "not a whole instance count"),
        (trace_text([1, True]), "not a whole instance count"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_file_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InputError) as error:
        parse_trace(text, source="pools/a.json", name="a")
    assert str(error.value).startswith("pools/a.json: ")
    assert problem in str(error.value)


def test_a_drop_loses_exactly_that_many_slots_each_with_a_notice() -> None:
    trace = parse_trace(trace_text([4, 4, 1, 1, 3]), source="t", name="t")
    timeline = slot_timeline(trace, seed=7, notice=THIRTY, until=trace.seconds)
    assert timeline.slots == 4
    assert len(timeline.initially_alive) == 4
    lost = [e for e in timeline.events if not e.alive]
    back = [e for e in timeline.events if e.alive]
    assert [e.at for e in lost] == [600.0] * 3
    assert all(e.notice_seconds == 30 for e in lost)
    assert [e.at for e in back] == [1200.0] * 2
    assert {e.slot for e in back} <= {e.slot for e in lost}  # only lost slots come back


def test_the_same_seed_replays_the_same_capacity_history_for_every_policy() -> None:
    trace = parse_trace(trace_text([16, 9, 0, 16, 4, 12]), source="t", name="t")
    first = slot_timeline(trace, seed=3, notice=THIRTY, until=trace.seconds)
    again = slot_timeline(trace, seed=3, notice=THIRTY, until=trace.seconds)
    other = slot_timeline(trace, seed=4, notice=THIRTY, until=trace.seconds)
    assert first == again
    assert first != other


@pytest.mark.parametrize(
    ("text", "mean"),
    [("90", 90.0), ("uniform:60:120", 90.0), ("normal:90:15", 90.0), ("choice:30@0.9,5@0.1", 27.5)],
)
def test_distributions(text: str, mean: float) -> None:
    assert parse_distribution(text, what="x").mean == pytest.approx(mean)


@pytest.mark.parametrize("text", ["-1", "uniform:5", "uniform:9:3", "weibull:1:2", "abc"])
def test_a_bad_distribution_names_the_setting(text: str) -> None:
    with pytest.raises(InputError, match="--load-seconds"):
        parse_distribution(text, what="--load-seconds")


@pytest.mark.parametrize(
    ("name", "zone"),
    [
        ("us-west-2a_v100_1", "us-west-2a"),  # the public files: <zone>_<instance>_<count>
        ("eastus-1_a100", "eastus-1"),
        ("zone1", "zone1"),  # no "_": a zone of its own
        ("pool_a", "pool_a"),  # "pool" is no zone name
    ],
)
def test_the_zone_of_a_trace_comes_from_its_name(name: str, zone: str) -> None:
    assert parse_trace(trace_text([1]), source=f"{name}.json", name=name).zone == zone

"""The Node contract: condition message format, annotation JSON, drained marks."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.agent.vm_name import vm_name_from_provider_id
from rebalancer.node_signal import (
    ANNOTATION_MAX_BYTES,
    ConditionReason,
    EndedEvent,
    EventEnding,
    NodeEvents,
    PublishedEvent,
    condition_for,
    drained_event_ids,
    fit_annotation,
    parse_message,
)

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def pending(event_id: str, seconds: float | None, status: str = "Scheduled") -> PublishedEvent:
    return PublishedEvent(
        event_id=event_id,
        event_type="Preempt",
        status=status,
        not_before=None if seconds is None else T0 + timedelta(seconds=seconds),
        first_seen=T0,
        resources=("vm_1",),
    )


def test_condition_names_the_most_urgent_event() -> None:
    state = NodeEvents(vm_name="vm_1", events=(pending("LATE", 600), pending("SOON", 30)))
    condition = condition_for(state)
    assert condition.status == "True"
    assert condition.reason == ConditionReason.SCHEDULED
    fields = parse_message(condition.message)
    assert fields == {
        "EventType": "Preempt",
        "EventId": "SOON",
        "EventStatus": "Scheduled",
        "NotBefore": "2026-11-29T12:00:30Z",
        "Pending": "2",
    }


def test_started_or_unreadable_deadline_says_now() -> None:
    started = condition_for(NodeEvents("vm_1", events=(pending("A", None, "Started"),)))
    assert started.reason == ConditionReason.STARTED
    assert parse_message(started.message)["NotBefore"] == "now"
    unreadable = condition_for(NodeEvents("vm_1", events=(pending("B", None), pending("C", 5))))
    assert parse_message(unreadable.message)["EventId"] == "B"
    assert parse_message(unreadable.message)["NotBefore"] == "now"


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (EventEnding.CANCELLED, ConditionReason.CANCELLED),
        (EventEnding.COMPLETED, ConditionReason.COMPLETED),
        (EventEnding.ENDED, ConditionReason.ENDED),
    ],
)
def test_condition_after_an_event_ended(outcome: EventEnding, reason: ConditionReason) -> None:
    state = NodeEvents("vm_1", ended=(EndedEvent("E1", "Preempt", outcome, T0),))
    condition = condition_for(state)
    assert (condition.status, condition.reason) == ("False", reason)
    assert parse_message(condition.message) == {
        "EventType": "Preempt",
        "EventId": "E1",
        "Outcome": str(outcome),
    }


def test_no_events_at_all() -> None:
    condition = condition_for(NodeEvents("vm_1"))
    assert (condition.status, condition.reason) == ("False", ConditionReason.NO_EVENTS)


def test_annotation_round_trip() -> None:
    state = NodeEvents(
        vm_name="vm_1",
        events=(pending("A", 30),),
        ended=(EndedEvent("B", "Reboot", EventEnding.CANCELLED, T0),),
    )
    assert NodeEvents.from_json(state.to_json()) == state


DEEP = "[" * 3000 + "]" * 3000
GOOD_EVENT = (
    '{"eventId":"E1","eventType":"Preempt","eventStatus":"Scheduled",'
    '"firstSeen":"2026-11-29T12:00:00.000Z"'
)
MALFORMED_ANNOTATIONS = [
    "",
    "[]",
    "{",
    '{"events": [{"eventId": "x"}]}',
    '{"events": "no"}',
    '{"ended": [{}]}',
    '{"ended": [{"eventId": "a", "eventType": "b", "outcome": "exploded", "at": "2026-01-01T00:00:00Z"}]}',
    DEEP,  # a RecursionError in the JSON decoder
    '{"vmName": ' + DEEP + "}",
    '{"events": [' + DEEP + "]}",
    '{"events": [1]}',
    '{"events": [null]}',
    '{"ended": ["x"]}',
    '{"events": {"a": 1}}',
    '{"vmName": {"a": 1}}',
    '{"vmName": 1e999}',
    '{"omitted": -1}',
    '{"omitted": "3"}',
    '{"omitted": true}',
    GOOD_EVENT + ',"eventId":' + DEEP + "}",
    '{"events": [' + GOOD_EVENT + ',"resources":"vm_1"}]}',  # would be read as 4 VMs "v","m",...
    '{"events": [' + GOOD_EVENT + ',"resources":[1]}]}',
    '{"events": [' + GOOD_EVENT + ',"oddities":"x"}]}',
    '{"events": [' + GOOD_EVENT + ',"eventType":["Preempt"]}]}',
    '{"events": [' + GOOD_EVENT + ',"firstSeen":1e999}]}',
    '{"events": [{"eventId": "E1", "eventType": "Preempt", "eventStatus": "Scheduled", "firstSeen": "9999-12-31T23:59:59-23:59"}]}',
]


@pytest.mark.parametrize("text", MALFORMED_ANNOTATIONS)
def test_malformed_annotation_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        NodeEvents.from_json(text)


def test_a_well_formed_base_event_parses() -> None:
    # The malformed cases above differ from this one by one field: each fails for that field.
    (event,) = NodeEvents.from_json('{"events": [' + GOOD_EVENT + "}]}").events
    assert event.event_id == "E1" and event.not_before is None and event.act_now


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(["events", "ended", "vmName", "omitted", "eventId", "firstSeen"]),
                children,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_any_json_shape_parses_or_is_a_value_error(value: object) -> None:
    with contextlib.suppress(ValueError):
        NodeEvents.from_json(json.dumps({"events": [value], "ended": [value]}))
        NodeEvents.from_json(json.dumps(value))


@given(st.text(max_size=200))
def test_any_annotation_text_parses_or_is_a_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        NodeEvents.from_json(text)


def test_message_values_never_contain_spaces() -> None:
    state = NodeEvents(
        "vm_1",
        events=(PublishedEvent("id with space", "Pre empt", "Scheduled", None, T0, ("vm_1",)),),
    )
    assert parse_message(condition_for(state).message)["EventId"] == "id_with_space"


def test_drained_marks_are_upper_case_and_trimmed() -> None:
    marks = drained_event_ids({"spot-rebalancer.io/drained-for": " abc-1 ,DEF-2,, "})
    assert marks == {"ABC-1", "DEF-2"}
    assert drained_event_ids({}) == frozenset()


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        (
            "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/aks-gpu-12345678-vmss/virtualMachines/3",
            "aks-gpu-12345678-vmss_3",
        ),
        (
            "azure:///subscriptions/s/resourcegroups/rg/providers/microsoft.compute/"
            "virtualmachines/myspotvm",
            "myspotvm",
        ),
        (
            "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/vmss",
            None,
        ),
        ("aws:///us-east-1a/i-123", None),
        ("", None),
    ],
)
def test_vm_name_from_provider_id(provider_id: str, expected: str | None) -> None:
    assert vm_name_from_provider_id(provider_id) == expected


def urgent_first(count: int, *, description: str = "") -> tuple[PublishedEvent, ...]:
    """`count` Preempts first seen in order, whose deadlines run the other way round: the last
    seen is the most urgent."""
    return tuple(
        PublishedEvent(
            event_id=f"E{index:03d}",
            event_type="Preempt",
            status="Scheduled",
            not_before=T0 + timedelta(seconds=30 + count - index),
            first_seen=T0 + timedelta(milliseconds=index),
            resources=("vm_1",),
            description=description,
        )
        for index in range(count)
    )


def test_annotation_that_fits_is_unchanged() -> None:
    state = NodeEvents(
        "vm_1",
        events=urgent_first(3),
        ended=(EndedEvent("B", "Reboot", EventEnding.CANCELLED, T0),),
    )
    assert fit_annotation(state) == state
    assert "omitted" not in json.loads(state.to_json())


def test_annotation_keeps_the_most_urgent_events_under_the_limit() -> None:
    events = urgent_first(200, description="d" * 2000)
    state = NodeEvents(
        "vm_1", events=events, ended=(EndedEvent("B", "Reboot", EventEnding.CANCELLED, T0),)
    )
    assert len(state.to_json()) > 256 * 1024  # what the agent wrote before: refused by the API

    fitted = fit_annotation(state)
    text = fitted.to_json()
    assert len(text.encode()) <= ANNOTATION_MAX_BYTES
    kept = [event.event_id for event in fitted.events]
    assert 0 < len(kept) < 200
    # the most urgent are the last seen: exactly the last len(kept) of them, in their order
    assert kept == [event.event_id for event in events[200 - len(kept) :]]
    assert fitted.omitted == 200 - len(kept)
    assert all(len(event.description) <= 512 for event in fitted.events)
    assert fitted.ended == ()
    parsed = NodeEvents.from_json(text)
    assert parsed.omitted == fitted.omitted and len(parsed.events) == len(kept)
    # the condition comes from the full state and names the most urgent of all
    assert parse_message(condition_for(state).message)["EventId"] == "E199"
    assert parse_message(condition_for(state).message)["Pending"] == "200"


def test_annotation_with_no_room_for_one_event_lists_none_and_counts_them() -> None:
    fitted = fit_annotation(NodeEvents("vm_1", events=urgent_first(5)), max_bytes=200)
    assert fitted.events == () and fitted.omitted == 5
    assert len(fitted.to_json()) <= 200

"""The Node contract: condition message format, annotation JSON, drained marks."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.agent.vm_name import vm_name_from_provider_id
from rebalancer.node_signal import (
    EndedEvent,
    NodeEvents,
    Outcome,
    PublishedEvent,
    Reason,
    condition_for,
    drained_event_ids,
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
    assert condition.reason == Reason.SCHEDULED
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
    assert started.reason == Reason.STARTED
    assert parse_message(started.message)["NotBefore"] == "now"
    unreadable = condition_for(NodeEvents("vm_1", events=(pending("B", None), pending("C", 5))))
    assert parse_message(unreadable.message)["EventId"] == "B"
    assert parse_message(unreadable.message)["NotBefore"] == "now"


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (Outcome.CANCELLED, Reason.CANCELLED),
        (Outcome.COMPLETED, Reason.COMPLETED),
        (Outcome.ENDED, Reason.ENDED),
    ],
)
def test_condition_after_an_event_ended(outcome: Outcome, reason: Reason) -> None:
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
    assert (condition.status, condition.reason) == ("False", Reason.NO_EVENTS)


def test_annotation_round_trip() -> None:
    state = NodeEvents(
        vm_name="vm_1",
        events=(pending("A", 30),),
        ended=(EndedEvent("B", "Reboot", Outcome.CANCELLED, T0),),
    )
    assert NodeEvents.from_json(state.to_json()) == state


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "{",
        '{"events": [{"eventId": "x"}]}',
        '{"events": "no"}',
        '{"ended": [{}]}',
        '{"ended": [{"eventId": "a", "eventType": "b", "outcome": "exploded", "at": "2026-01-01T00:00:00Z"}]}',
    ],
)
def test_malformed_annotation_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        NodeEvents.from_json(text)


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

"""Every notice source read into one Notice: a table per source."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer import names
from rebalancer.node_signal import (
    MAX_MESSAGE_CHARS,
    NodeEvents,
    PublishedEvent,
    condition_for,
    newer_of,
    parse_condition,
    stamp,
    stamped,
)
from rebalancer.notices import Source, notices_of, parse_npd_message, parse_rfc1123_utc

T0 = datetime(2026, 8, 1, 5, 40, 32, tzinfo=UTC)
DEADLINE = datetime(2026, 8, 1, 5, 41, 2, tzinfo=UTC)
EVENT_ID = "40B7BD88-C56E-44E4-93F6-75CEDACE2869"
NPD_MESSAGE = (
    "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see "
    "https://aka.ms/aks/scheduledevents. EventId: 40b7bd88-c56e-44e4-93f6-75cedace2869"
)


def node(
    conditions: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "annotations": annotations or {}},
        "status": {"conditions": conditions or []},
    }


def condition(type_: str, message: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "message": message,
        "reason": "X",
        "lastTransitionTime": "2026-08-01T05:40:32Z",
    }


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (NPD_MESSAGE, ("Preempt", "Scheduled", DEADLINE, EVENT_ID)),
        (
            "Preempt Scheduled: Sat, 1 Aug 2026 05:41:02 GMT.",
            ("Preempt", "Scheduled", DEADLINE, ""),
        ),
        (
            "Preempt  Scheduled:\n Sat, 01 Aug 2026 05:41:02 UTC. EventId: ab-cd-ef01",
            ("Preempt", "Scheduled", DEADLINE, "AB-CD-EF01"),
        ),
        ("Preempt Started. EventId: " + EVENT_ID, ("Preempt", "Started", None, EVENT_ID)),
        ("Reboot Scheduled: Sat, 01 Aug 2026 05:41:02 PST.", ("Reboot", "Scheduled", None, "")),
        (
            "Preempt Scheduled: tomorrow. EventId: " + EVENT_ID,
            ("Preempt", "Scheduled", None, EVENT_ID),
        ),
        ("Preempt Scheduled: Sat, 41 Aug 2026 05:41:02 GMT.", ("Preempt", "Scheduled", None, "")),
        ("SpotRebalanceRecommendation Advisory. Nothing to do.", None),
        ("no events", None),
        ("", None),
    ],
)
def test_npd_message(message: str, expected: tuple[str, str, datetime | None, str] | None) -> None:
    assert parse_npd_message(message) == expected


def test_rfc1123_rejects_other_zones() -> None:
    assert parse_rfc1123_utc("Sat, 01 Aug 2026 05:41:02 GMT") == DEADLINE
    assert parse_rfc1123_utc("Sat, 01 Aug 2026 05:41:02 CET") is None
    assert parse_rfc1123_utc("Sat, 01 Foo 2026 05:41:02 GMT") is None


def test_npd_preemption_condition() -> None:
    (notice,) = notices_of(node([condition("PreemptionScheduled", NPD_MESSAGE)])).notices
    assert (notice.event_type, notice.deadline, notice.event_id, notice.source) == (
        "Preempt",
        DEADLINE,
        EVENT_ID,
        Source.AKS_NPD,
    )
    assert not notice.act_now
    assert notice.seconds_left(T0) == 30


def test_npd_false_condition_is_no_notice() -> None:
    result = notices_of(node([condition("PreemptionScheduled", NPD_MESSAGE, status="False")]))
    assert result.notices == () and result.skipped == ()


def test_npd_same_event_through_two_conditions_is_one_notice() -> None:
    result = notices_of(
        node(
            [
                condition("PreemptionScheduled", NPD_MESSAGE),
                condition("VMEventScheduled", NPD_MESSAGE),
                condition("PreemptScheduled", NPD_MESSAGE),
            ]
        )
    )
    assert len(result.notices) == 1


def test_npd_unreadable_preemption_message_means_act_now() -> None:
    (notice,) = notices_of(node([condition("PreemptionScheduled", "gibberish")])).notices
    assert notice.event_type == "Preempt" and notice.act_now and notice.deadline is None
    assert notice.event_id.startswith("NPD-PREEMPTIONSCHEDULED-")


def test_npd_advisory_is_skipped_with_a_reason() -> None:
    result = notices_of(
        node([condition("PreemptionScheduled", "SpotRebalanceRecommendation Advisory.")])
    )
    assert result.notices == ()
    assert "advisory" in result.skipped[0]


def test_npd_generic_condition_with_odd_message_is_skipped() -> None:
    result = notices_of(node([condition("VMEventScheduled", "something odd")]))
    assert result.notices == () and "not understood" in result.skipped[0]


def test_npd_per_type_condition_with_another_type_is_skipped() -> None:
    result = notices_of(node([condition("RebootScheduled", NPD_MESSAGE)]))
    assert result.notices == () and "Preempt" in result.skipped[0]


def agent_annotation(*events: PublishedEvent) -> str:
    return NodeEvents(vm_name="vm_1", events=events).to_json()


def published(
    event_id: str, deadline: datetime | None, status: str = "Scheduled"
) -> PublishedEvent:
    return PublishedEvent(event_id, "Preempt", status, deadline, T0, ("vm_1",))


def test_agent_condition_and_annotation() -> None:
    message = f"EventType=Preempt EventId={EVENT_ID} EventStatus=Scheduled NotBefore=2026-08-01T05:41:02Z Pending=1"
    result = notices_of(
        node(
            [condition(names.CONDITION_TYPE, message)],
            {names.EVENTS_ANNOTATION: agent_annotation(published(EVENT_ID, DEADLINE))},
        )
    )
    (notice,) = result.notices
    assert (notice.source, notice.deadline, notice.event_id, notice.seen_at) == (
        Source.AGENT,
        DEADLINE,
        EVENT_ID,
        T0,
    )


def test_agent_condition_alone_when_annotation_is_broken() -> None:
    message = f"EventType=Preempt EventId={EVENT_ID} EventStatus=Scheduled NotBefore=now Pending=1"
    result = notices_of(
        node([condition(names.CONDITION_TYPE, message)], {names.EVENTS_ANNOTATION: "{broken"})
    )
    (notice,) = result.notices
    assert notice.act_now and notice.event_id == EVENT_ID
    assert "unreadable" in result.skipped[0]


def test_agent_condition_without_event_id_is_skipped() -> None:
    result = notices_of(node([condition(names.CONDITION_TYPE, "EventType=Preempt")]))
    assert result.notices == () and "EventId" in result.skipped[0]


def test_agent_and_npd_for_the_same_event_merge_to_the_earlier_deadline() -> None:
    later = datetime(2026, 8, 1, 5, 42, 0, tzinfo=UTC)
    message = (
        f"EventType=Preempt EventId={EVENT_ID} EventStatus=Scheduled NotBefore=2026-08-01T05:42:00Z"
    )
    result = notices_of(
        node(
            [
                condition(names.CONDITION_TYPE, message),
                condition("PreemptionScheduled", NPD_MESSAGE),
            ],
            {names.EVENTS_ANNOTATION: agent_annotation(published(EVENT_ID, later))},
        )
    )
    (notice,) = result.notices
    assert notice.deadline == DEADLINE and notice.source == Source.AKS_NPD


@pytest.mark.parametrize(
    ("value", "deadline"),
    [("now", None), ("", None), ("true", None), ("2026-08-01T05:41:02Z", DEADLINE), ("soon", None)],
)
def test_manual_drain_request(value: str, deadline: datetime | None) -> None:
    (notice,) = notices_of(node(annotations={names.DRAIN_REQUEST_ANNOTATION: value})).notices
    assert (notice.event_type, notice.source, notice.deadline) == (
        "Manual",
        Source.MANUAL,
        deadline,
    )


@given(st.text(max_size=200))
def test_any_npd_message_never_crashes(message: str) -> None:
    result = notices_of(node([condition("PreemptionScheduled", message)]))
    assert len(result.notices) + len(result.skipped) == 1


# ---- the agent's annotation and condition: the newer wins ---------------------------------

FREEZE_ID = "11111111-2222-3333-4444-555555555555"
T1 = datetime(2026, 8, 1, 5, 40, 33, 250000, tzinfo=UTC)
T2 = datetime(2026, 8, 1, 5, 40, 34, 500000, tzinfo=UTC)


def stamped_annotation(at: datetime | None, *event_ids: str) -> str:
    events = tuple(
        PublishedEvent(event_id, "Freeze", "Scheduled", DEADLINE, T0, ("vm_1",))
        for event_id in event_ids
    )
    return NodeEvents(vm_name="vm_1", events=events, published_at=at).to_json()


def agent_condition(at: datetime | None, event_id: str | None) -> dict[str, Any]:
    if event_id is None:
        message, status = "VM=vm_1", "False"
    else:
        message = f"EventType=Preempt EventId={event_id} EventStatus=Scheduled NotBefore=now"
        status = "True"
    if at is not None:
        message += f" Published={stamp(at)}"
    return condition(names.CONDITION_TYPE, message, status)


@pytest.mark.parametrize(
    ("annotation_at", "annotation_events", "condition_at", "condition_event", "expected"),
    [
        # The reported failure: the annotation (a Freeze) refused since, the condition newer.
        (T1, [FREEZE_ID], T2, EVENT_ID, [EVENT_ID]),
        # Both written in one publish: the annotation, which lists every event.
        (T2, [FREEZE_ID, EVENT_ID], T2, EVENT_ID, [FREEZE_ID, EVENT_ID]),
        # The condition's write failed after the annotation's: the annotation is newer.
        (T2, [FREEZE_ID], T1, EVENT_ID, [FREEZE_ID]),
        (T2, [FREEZE_ID], T1, None, [FREEZE_ID]),  # even over a stale False condition
        (T2, [], T1, EVENT_ID, []),  # the event is over: nothing pending
        # The condition is newer and False: every event in the stale annotation is over.
        (T1, [FREEZE_ID], T2, None, []),
        # Equal stamps, no event listed (no room even for one): the condition names it.
        (T2, [], T2, EVENT_ID, [EVENT_ID]),
        # An agent from before the stamps: as it was read then (annotation, gated by the status).
        (None, [FREEZE_ID], None, EVENT_ID, [FREEZE_ID]),
        (None, [FREEZE_ID], None, None, []),
        (None, [], None, EVENT_ID, [EVENT_ID]),
        # A stamped condition over an unstamped annotation (left by an older agent): condition.
        (None, [FREEZE_ID], T1, EVENT_ID, [EVENT_ID]),
    ],
)
def test_the_newer_of_annotation_and_condition_wins(
    annotation_at: datetime | None,
    annotation_events: list[str],
    condition_at: datetime | None,
    condition_event: str | None,
    expected: list[str],
) -> None:
    result = notices_of(
        node(
            [agent_condition(condition_at, condition_event)],
            {names.EVENTS_ANNOTATION: stamped_annotation(annotation_at, *annotation_events)},
        )
    )
    assert sorted(n.event_id for n in result.notices) == sorted(expected)


@pytest.mark.parametrize(
    ("annotation_at", "condition_at", "newer"),
    [
        (T1, T2, "condition"),
        (T2, T1, "annotation"),
        (T2, T2, "annotation"),
        (None, T1, "condition"),
        (T1, None, "annotation"),
        (None, None, "annotation"),
    ],
)
def test_newer_of(
    annotation_at: datetime | None, condition_at: datetime | None, newer: str
) -> None:
    assert newer_of(annotation_at, condition_at) == newer


def test_a_stamped_annotation_counts_without_a_condition() -> None:
    annotation = {names.EVENTS_ANNOTATION: stamped_annotation(T1, FREEZE_ID)}
    (notice,) = notices_of(node([], annotation)).notices
    assert notice.event_id == FREEZE_ID


@pytest.mark.parametrize(
    "message",
    [
        f"EventType=Preempt EventId={EVENT_ID} Color=red",  # a key outside the grammar
        f"EventId={EVENT_ID} EventId=OTHER",  # a key twice
        f"EventId={EVENT_ID} NotBefore=\x1b[2J",  # a value outside the token set
        f"EventId={EVENT_ID} Published=yesterday",  # the stamp that decides, unreadable
        f"EventId={EVENT_ID} EventType={'P' * 200}",  # a token too long
        f"EventId={EVENT_ID} " + "Pending=1 " * 200,  # over the message limit
        f"EventId={EVENT_ID} loose words",
    ],
)
def test_an_agent_condition_outside_its_grammar_is_refused(message: str) -> None:
    with pytest.raises(ValueError):
        parse_condition(condition(names.CONDITION_TYPE, message))
    result = notices_of(node([condition(names.CONDITION_TYPE, message)]))
    assert result.notices == () and "agent condition refused" in result.skipped[0]


def test_the_agents_condition_fits_its_grammar_whatever_imds_sent() -> None:
    odd = PublishedEvent("id with spaces;" + "x" * 300, "Pre\x1bempt", "Scheduled", None, T0)
    value = stamped(condition_for(NodeEvents(vm_name="vm 1", events=(odd,))), T2)
    assert len(value.message) <= MAX_MESSAGE_CHARS
    parsed = parse_condition({"status": value.status, "message": value.message})
    assert parsed.active and parsed.published_at == T2 and parsed.deadline is None

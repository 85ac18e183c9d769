"""The event tracker: new, changed, and how vanished events ended (a table)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rebalancer.agent.tracker import EventTracker, outcome_of
from rebalancer.azure.scheduled_events import Document, ScheduledEvent
from rebalancer.node_signal import EventEnding, NodeEvents, PublishedEvent

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
VM = "aks-gpu-12345678-vmss_3"


def event(
    event_id: str = "E1",
    *,
    status: str = "Scheduled",
    resources: tuple[str, ...] = (VM,),
    not_before: datetime | None = T0 + timedelta(seconds=30),
    event_type: str = "Preempt",
) -> ScheduledEvent:
    return ScheduledEvent(
        event_id=event_id,
        event_type=event_type,
        status=status,
        resources=resources,
        not_before=not_before,
        not_before_raw="x" if not_before else "",
    )


def doc(incarnation: int, *events: ScheduledEvent) -> Document:
    return Document(incarnation=incarnation, events=tuple(events))


def test_new_event_for_this_vm_only() -> None:
    tracker = EventTracker(vm_name=VM)
    observation = tracker.observe(doc(1, event("E1"), event("E2", resources=("other_1",))), T0)
    assert [e.event_id for e in observation.new] == ["E1"]
    assert observation.other_vms == 1
    assert observation.new[0].first_seen == T0


def test_vm_names_match_without_case() -> None:
    tracker = EventTracker(vm_name=VM.upper())
    assert len(tracker.observe(doc(1, event()), T0).new) == 1


def test_same_event_again_is_not_new_and_keeps_first_seen() -> None:
    tracker = EventTracker(vm_name=VM)
    tracker.observe(doc(1, event()), T0)
    later = T0 + timedelta(seconds=5)
    observation = tracker.observe(doc(2, event(status="Started", not_before=None)), later)
    assert observation.new == ()
    assert [e.status for e in observation.changed] == ["Started"]
    assert tracker.pending["E1"].first_seen == T0


def test_event_ids_compare_without_case() -> None:
    tracker = EventTracker(vm_name=VM)
    tracker.observe(doc(1, event("abc-1")), T0)
    observation = tracker.observe(doc(2, event("ABC-1")), T0 + timedelta(seconds=1))
    assert observation.new == () and observation.ended == ()


def published(**overrides: object) -> PublishedEvent:
    base: dict[str, object] = {
        "event_id": "E1",
        "event_type": "Preempt",
        "status": "Scheduled",
        "not_before": T0 + timedelta(seconds=30),
        "first_seen": T0,
    }
    base.update(overrides)
    return PublishedEvent(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gone", "seconds_later", "expected"),
    [
        (published(), 10, EventEnding.CANCELLED),  # before NotBefore, never started
        (published(), 31, EventEnding.ENDED),  # after NotBefore: cannot tell it ran
        (published(status="Started", not_before=None), 5, EventEnding.COMPLETED),
        (published(acknowledged_at=T0), 5, EventEnding.COMPLETED),
        (published(not_before=None), 5, EventEnding.ENDED),  # unreadable deadline
    ],
)
def test_outcome_table(gone: PublishedEvent, seconds_later: int, expected: EventEnding) -> None:
    assert outcome_of(gone, T0 + timedelta(seconds=seconds_later)) == expected


def test_vanished_event_is_ended_once_and_remembered() -> None:
    tracker = EventTracker(vm_name=VM)
    tracker.observe(doc(1, event()), T0)
    observation = tracker.observe(doc(2), T0 + timedelta(seconds=5))
    assert [(e.event_id, e.outcome) for e in observation.ended] == [("E1", EventEnding.CANCELLED)]
    assert tracker.observe(doc(3), T0 + timedelta(seconds=6)).ended == ()
    assert tracker.snapshot().ended[-1].event_id == "E1"


def test_restore_after_restart_does_not_duplicate() -> None:
    first = EventTracker(vm_name=VM)
    first.observe(doc(1, event()), T0)
    first.mark_acknowledged("E1", T0 + timedelta(seconds=2))
    saved = NodeEvents.from_json(first.snapshot().to_json())

    second = EventTracker(vm_name=VM)
    second.restore(saved)
    observation = second.observe(doc(1, event()), T0 + timedelta(seconds=3))
    assert observation.new == ()
    assert second.pending["E1"].first_seen == T0
    assert second.pending["E1"].acknowledged_at is not None


def test_restore_then_gone_while_down_is_reported() -> None:
    first = EventTracker(vm_name=VM)
    first.observe(doc(1, event()), T0)
    second = EventTracker(vm_name=VM)
    second.restore(NodeEvents.from_json(first.snapshot().to_json()))
    observation = second.observe(doc(5), T0 + timedelta(seconds=60))
    assert [e.outcome for e in observation.ended] == [EventEnding.ENDED]


def test_ended_history_is_bounded() -> None:
    tracker = EventTracker(vm_name=VM)
    for index in range(30):
        tracker.observe(doc(2 * index, event(f"E{index}")), T0)
        tracker.observe(doc(2 * index + 1), T0)
    assert len(tracker.snapshot().ended) == 10


OTHER = "aks-gpu-12345678-vmss_4"
SOON = T0 + timedelta(seconds=30)
LATER = T0 + timedelta(seconds=600)


@pytest.mark.parametrize(
    ("entries", "resources", "status", "not_before"),
    [
        # the entry naming only us comes last: the one that names another VM must still count
        (
            [
                event(resources=(OTHER, VM), not_before=LATER),
                event(resources=(VM,), not_before=SOON),
            ],
            (OTHER, VM),
            "Scheduled",
            SOON,
        ),
        # an entry that does not name us at all still adds its VMs to ours
        (
            [event(resources=(VM,), not_before=LATER), event(resources=(OTHER,), not_before=LATER)],
            (VM, OTHER),
            "Scheduled",
            LATER,
        ),
        # Started wins, and so does "no deadline" (act now)
        (
            [event(), event(status="Started", not_before=None)],
            (VM,),
            "Started",
            None,
        ),
        # EventIds compare without case; VM names are not duplicated by case
        (
            [event("e1", resources=(VM.upper(),)), event("E1", resources=(VM,), not_before=LATER)],
            (VM.upper(),),
            "Scheduled",
            SOON,
        ),
    ],
)
def test_duplicate_event_ids_are_merged_conservatively(
    entries: list[ScheduledEvent],
    resources: tuple[str, ...],
    status: str,
    not_before: datetime | None,
) -> None:
    tracker = EventTracker(vm_name=VM)
    observation = tracker.observe(doc(1, *entries), T0)
    (merged,) = observation.new
    assert merged.resources == resources
    assert merged.status == status
    assert merged.not_before == not_before
    assert "EventId listed more than once" in merged.oddities  # never acknowledged


def test_unreadable_resources_may_name_us() -> None:
    tracker = EventTracker(vm_name=VM)
    odd = ScheduledEvent(
        event_id="E1",
        event_type="Preempt",
        status="Scheduled",
        resources=(),
        resources_unreadable=True,
        oddities=("Resources is a int, not a list",),
    )
    (published_event,) = tracker.observe(doc(1, odd), T0).new
    assert published_event.oddities == odd.oddities and published_event.act_now


def test_same_incarnation_with_other_content_is_read() -> None:
    tracker = EventTracker(vm_name=VM)
    tracker.observe(doc(7), T0)
    observation = tracker.observe(doc(7, event()), T0 + timedelta(seconds=1))
    assert [e.event_id for e in observation.new] == ["E1"]

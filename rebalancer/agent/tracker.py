"""Which events of this VM are pending, since when, and how the vanished ones ended.

Pure: documents and `now` in, a `NodeEvents` snapshot and the changes out. The agent restores
it from its own annotation after a restart, so an event is never reported twice or lost.

Every document is read in full, even one with the incarnation already seen: the service promises
the same incarnation means the same events, but nothing is lost by not trusting that. Entries
that share an EventId are merged conservatively (`merge_duplicates`): the VMs of all of them,
the earliest deadline, Started if any says so, so an event is never acknowledged when any entry
says it names other VMs too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime

from rebalancer.azure.scheduled_events import Document, EventStatus, ScheduledEvent
from rebalancer.node_signal import EndedEvent, EventEnding, NodeEvents, PublishedEvent

KEEP_ENDED = 10


@dataclass(frozen=True)
class Observation:
    new: tuple[PublishedEvent, ...] = ()
    changed: tuple[PublishedEvent, ...] = ()
    ended: tuple[EndedEvent, ...] = ()
    other_vms: int = 0  # events in the document for other VMs of the placement group
    unknown_types: tuple[str, ...] = ()

    @property
    def any_change(self) -> bool:
        return bool(self.new or self.changed or self.ended)


@dataclass
class EventTracker:
    vm_name: str
    pending: dict[str, PublishedEvent] = field(default_factory=dict)  # by upper-case EventId
    ended: deque[EndedEvent] = field(default_factory=lambda: deque(maxlen=KEEP_ENDED))
    incarnation: int | None = None

    def restore(self, previous: NodeEvents) -> None:
        """Take over what an earlier run of the agent published on the Node."""
        for event in previous.events:
            self.pending[event.event_id.upper()] = event
        self.ended.extend(previous.ended)

    def snapshot(self) -> NodeEvents:
        events = sorted(self.pending.values(), key=lambda e: (e.first_seen, e.event_id))
        return NodeEvents(vm_name=self.vm_name, events=tuple(events), ended=tuple(self.ended))

    def observe(self, document: Document, now: datetime) -> Observation:
        ours: dict[str, ScheduledEvent] = {}
        other_vms = 0
        unknown: list[str] = []
        for event in merge_duplicates(document.events):
            if not self._names_us(event):
                other_vms += 1
                continue
            ours[event.event_id.upper()] = event
            if not event.known_type:
                unknown.append(event.event_type)
        self.incarnation = document.incarnation

        new: list[PublishedEvent] = []
        changed: list[PublishedEvent] = []
        for key, event in ours.items():
            before = self.pending.get(key)
            if before is None:
                published = _publish(event, first_seen=now)
                new.append(published)
            else:
                published = _publish(
                    event, first_seen=before.first_seen, acknowledged_at=before.acknowledged_at
                )
                if published != before:
                    changed.append(published)
            self.pending[key] = published

        ended: list[EndedEvent] = []
        for key in [k for k in self.pending if k not in ours]:
            gone = self.pending.pop(key)
            record = EndedEvent(
                event_id=gone.event_id,
                event_type=gone.event_type,
                outcome=outcome_of(gone, now),
                at=now,
            )
            self.ended.append(record)
            ended.append(record)
        return Observation(
            new=tuple(new),
            changed=tuple(changed),
            ended=tuple(ended),
            other_vms=other_vms,
            unknown_types=tuple(unknown),
        )

    def mark_acknowledged(self, event_id: str, now: datetime) -> None:
        key = event_id.upper()
        if key in self.pending:
            self.pending[key] = replace(self.pending[key], acknowledged_at=now)

    def _names_us(self, event: ScheduledEvent) -> bool:
        # VM names are compared without case: Azure resource names are case-insensitive.
        if event.resources_unreadable:
            return True  # it may name us: acting on a stray event costs less than missing ours
        target = self.vm_name.lower()
        return any(resource.lower() == target for resource in event.resources)


def merge_duplicates(events: tuple[ScheduledEvent, ...]) -> list[ScheduledEvent]:
    """One event per EventId (compared without case), in the order first seen.

    Conservative: the union of the VMs named, the earliest deadline (no readable deadline is
    the earliest: act now), Started if any entry is Started, every oddity of every entry.
    """
    merged: dict[str, ScheduledEvent] = {}
    for event in events:
        key = event.event_id.upper()
        first = merged.get(key)
        merged[key] = event if first is None else _merge(first, event)
    return list(merged.values())


def _merge(first: ScheduledEvent, second: ScheduledEvent) -> ScheduledEvent:
    names = {name.lower(): name for name in second.resources} | {
        name.lower(): name for name in first.resources
    }
    resources = tuple(dict.fromkeys(n.lower() for n in first.resources + second.resources))
    if first.not_before is None or second.not_before is None:
        earliest = first if first.not_before is None else second
    else:
        earliest = first if first.not_before <= second.not_before else second
    started = EventStatus.STARTED in (first.status, second.status)
    oddities = [*first.oddities, *second.oddities, "EventId listed more than once"]
    if first.event_type != second.event_type:
        oddities.append(f"EventType differs ({first.event_type}, {second.event_type})")
    return replace(
        first,
        status=EventStatus.STARTED.value if started else first.status,
        resources=tuple(names[name] for name in resources),
        not_before=earliest.not_before,
        not_before_raw=earliest.not_before_raw,
        oddities=tuple(dict.fromkeys(oddities)),
        resources_unreadable=first.resources_unreadable or second.resources_unreadable,
    )


def outcome_of(event: PublishedEvent, now: datetime) -> EventEnding:
    """How a vanished event ended; 'ended' when we cannot tell whether it ran or was called off."""
    if event.status == EventStatus.STARTED or event.acknowledged_at is not None:
        return EventEnding.COMPLETED
    if event.not_before is not None and now < event.not_before:
        return EventEnding.CANCELLED
    return EventEnding.ENDED


def _publish(
    event: ScheduledEvent, *, first_seen: datetime, acknowledged_at: datetime | None = None
) -> PublishedEvent:
    return PublishedEvent(
        event_id=event.event_id,
        event_type=event.event_type,
        status=event.status,
        not_before=event.not_before,
        first_seen=first_seen,
        resources=event.resources,
        not_before_raw=event.not_before_raw,
        description=event.description,
        event_source=event.event_source,
        duration_seconds=event.duration_seconds,
        acknowledged_at=acknowledged_at,
        oddities=event.oddities,
    )

"""What the agent publishes on its Node, and how readers parse it: a shared contract.

The agent writes, the controller and outside tools read. Nothing here does I/O.

Condition `spot-rebalancer.io/ScheduledEvent` (status, reason, message):
- `True`, reason `EventScheduled` or `EventStarted`, while IMDS lists an event for this VM;
- `False`, reason `EventCancelled`, `EventCompleted` or `EventEnded` once it is gone, or
  `NoScheduledEvents` when there never was one.
The message is space-separated `Key=Value` pairs, values without spaces, e.g.
`EventType=Preempt EventId=A123BC45-... EventStatus=Scheduled NotBefore=2021-03-16T00:58:46Z
Pending=1 Published=2021-03-16T00:50:02.125Z`.
`NotBefore` is RFC 3339 in UTC, or `now` when the event has started or its time could not be read
(act at once, never guess). With several events pending, the message names the most urgent.
Values are tokens of `[A-Za-z0-9._:+-]` (anything else becomes `_`), at most
`MAX_TOKEN_CHARS` each, so a message stays under `MAX_MESSAGE_CHARS`; readers refuse any other
shape (`parse_condition`).

`Published` (condition) and `publishedAt` (annotation) are the agent's clock when it wrote them,
in milliseconds: the two are written one after the other with the same stamp, so when a write
fails (the API server refuses the annotation of a Node whose annotations are full) the one
written later carries the newer stamp, and readers take the newer (`newer_of`).

Annotation `spot-rebalancer.io/scheduled-events`: JSON, see `NodeEvents.to_json`. It is kept
under `ANNOTATION_MAX_BYTES` (the API server refuses a Node whose annotations total over 256 KiB):
`fit_annotation` keeps the most urgent events and counts the rest in `omitted`.

Parsing is total: any exception while reading one annotation becomes a `ValueError` naming why,
so one hostile annotation can only ever be skipped, never stop a reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rebalancer import names
from rebalancer.timefmt import iso, parse_iso

CONDITION_TYPE = names.CONDITION_TYPE
EVENTS_ANNOTATION = names.EVENTS_ANNOTATION
DRAINED_FOR_ANNOTATION = names.DRAINED_FOR_ANNOTATION
NOW = "now"
SCHEMA_VERSION = 1
# Our share of the Node's 256 KiB of annotations: room for about 80 events, and for everyone
# else's annotations beside ours.
ANNOTATION_MAX_BYTES = 32 * 1024
MAX_DESCRIPTION_CHARS = 512
MAX_TOKEN_CHARS = 128
MAX_MESSAGE_CHARS = 1024  # five tokens and their keys, far under a condition's message limit


class ConditionReason(StrEnum):
    NO_EVENTS = "NoScheduledEvents"
    SCHEDULED = "EventScheduled"
    STARTED = "EventStarted"
    CANCELLED = "EventCancelled"
    COMPLETED = "EventCompleted"
    ENDED = "EventEnded"


class EventEnding(StrEnum):
    """How an event that disappeared from IMDS ended, as far as the agent can tell."""

    CANCELLED = "cancelled"  # gone while Scheduled, before its NotBefore: Azure called it off
    COMPLETED = "completed"  # gone after we saw it Started (or after we acknowledged it)
    ENDED = "ended"  # gone after its NotBefore without us seeing it start: most likely ran


OUTCOME_REASON = {
    EventEnding.CANCELLED: ConditionReason.CANCELLED,
    EventEnding.COMPLETED: ConditionReason.COMPLETED,
    EventEnding.ENDED: ConditionReason.ENDED,
}


@dataclass(frozen=True)
class PublishedEvent:
    event_id: str
    event_type: str
    status: str
    not_before: datetime | None
    first_seen: datetime
    resources: tuple[str, ...] = ()
    not_before_raw: str = ""
    description: str = ""
    event_source: str = ""
    duration_seconds: int | None = None
    acknowledged_at: datetime | None = None
    oddities: tuple[str, ...] = ()  # fields IMDS sent in an undocumented shape: never acknowledged

    @property
    def act_now(self) -> bool:
        """Started, or a deadline we cannot read: there is no time left to plan with."""
        return self.status == "Started" or self.not_before is None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "eventStatus": self.status,
            "notBefore": _iso(self.not_before),
            "notBeforeRaw": self.not_before_raw,
            "firstSeen": _iso(self.first_seen, "milliseconds"),
            "resources": list(self.resources),
            "description": self.description,
            "eventSource": self.event_source,
            "durationInSeconds": self.duration_seconds,
            "acknowledgedAt": _iso(self.acknowledged_at, "milliseconds"),
        }
        if self.oddities:
            data["oddities"] = list(self.oddities)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PublishedEvent:
        if not isinstance(data, dict):
            raise ValueError(f"event is a {type(data).__name__}, not an object")
        first_seen = parse_iso(data.get("firstSeen"))
        if first_seen is None:
            raise ValueError("event without firstSeen")
        duration = data.get("durationInSeconds")
        return cls(
            event_id=_str(data, "eventId", required=True),
            event_type=_str(data, "eventType", required=True),
            status=_str(data, "eventStatus", required=True),
            not_before=parse_iso(data.get("notBefore")),
            first_seen=first_seen,
            resources=_names(data.get("resources"), "resources"),
            not_before_raw=_str(data, "notBeforeRaw"),
            description=_str(data, "description"),
            event_source=_str(data, "eventSource"),
            duration_seconds=duration if isinstance(duration, int) else None,
            acknowledged_at=parse_iso(data.get("acknowledgedAt")),
            oddities=_names(data.get("oddities"), "oddities"),
        )


@dataclass(frozen=True)
class EndedEvent:
    event_id: str
    event_type: str
    outcome: EventEnding
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "outcome": str(self.outcome),
            "at": _iso(self.at, "milliseconds"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndedEvent:
        if not isinstance(data, dict):
            raise ValueError(f"ended event is a {type(data).__name__}, not an object")
        at = parse_iso(data.get("at"))
        if at is None:
            raise ValueError("ended event without time")
        return cls(
            event_id=_str(data, "eventId", required=True),
            event_type=_str(data, "eventType", required=True),
            outcome=EventEnding(_str(data, "outcome", required=True)),
            at=at,
        )


@dataclass(frozen=True)
class NodeEvents:
    """The annotation: pending events of this VM and the last few that ended.

    `omitted` counts pending events left out to keep the annotation under its size limit (the
    least urgent ones); the JSON carries it only when it is not zero.
    """

    vm_name: str
    events: tuple[PublishedEvent, ...] = ()
    ended: tuple[EndedEvent, ...] = ()
    omitted: int = 0
    published_at: datetime | None = None  # set when written; None in the agent's own state

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "version": SCHEMA_VERSION,
            "vmName": self.vm_name,
            "events": [event.to_json() for event in self.events],
            "ended": [event.to_json() for event in self.ended],
        }
        if self.omitted:
            data["omitted"] = self.omitted
        if self.published_at is not None:
            data["publishedAt"] = _iso(self.published_at, "milliseconds")
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeEvents:
        """Parse the annotation; raises ValueError with the reason when it is malformed.

        Any exception at all (a 3000-deep array is a RecursionError, a huge number an
        OverflowError) is turned into a ValueError: callers handle that one type.
        """
        try:
            return cls._parse(text)
        except ValueError:
            raise
        except Exception as exc:  # hostile input never escapes as anything else
            raise ValueError(f"malformed: {type(exc).__name__}: {_short(exc)}") from None

    @classmethod
    def _parse(cls, text: str) -> NodeEvents:
        if not isinstance(text, str):
            raise ValueError(f"annotation is a {type(text).__name__}, not text")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        vm_name = data.get("vmName", "")
        if not isinstance(vm_name, str):
            raise ValueError("vmName is not a string")
        events, ended = data.get("events") or [], data.get("ended") or []
        if not isinstance(events, list) or not isinstance(ended, list):
            raise ValueError("events or ended is not a list")
        omitted = data.get("omitted", 0)
        if isinstance(omitted, bool) or not isinstance(omitted, int) or omitted < 0:
            raise ValueError("omitted is not a count")
        published_at = None
        if "publishedAt" in data:
            published_at = parse_iso(data["publishedAt"])
            if published_at is None:
                raise ValueError("publishedAt is not an RFC 3339 time")
        return cls(
            vm_name=vm_name,
            events=tuple(PublishedEvent.from_json(e) for e in events),
            ended=tuple(EndedEvent.from_json(e) for e in ended),
            omitted=omitted,
            published_at=published_at,
        )

    def most_urgent(self) -> PublishedEvent | None:
        return min(self.events, key=urgency, default=None)


def urgency(event: PublishedEvent) -> tuple[bool, datetime, datetime, str]:
    """Sort key: act-now events first, then by deadline, then by when they were first seen."""
    far_future = datetime.max.replace(tzinfo=UTC)
    return (not event.act_now, event.not_before or far_future, event.first_seen, event.event_id)


def fit_annotation(state: NodeEvents, max_bytes: int = ANNOTATION_MAX_BYTES) -> NodeEvents:
    """`state` as it can be published in at most `max_bytes`: the most urgent events first.

    Long descriptions are cut first, then the record of ended events is dropped, then the least
    urgent pending events, which `omitted` counts. The events kept stay in their order. With no
    room even for one event the annotation lists none and says how many it left out; the
    condition (written from the full state) still names the most urgent one.
    """
    if len(state.to_json()) <= max_bytes:
        return state
    events = tuple(
        replace(event, description=event.description[:MAX_DESCRIPTION_CHARS])
        if len(event.description) > MAX_DESCRIPTION_CHARS
        else event
        for event in state.events
    )
    trimmed = replace(state, events=events, ended=())
    if len(trimmed.to_json()) <= max_bytes:
        return trimmed
    # Greedy by urgency, sizes measured one event at a time (serialising all of them again for
    # every event dropped would be quadratic in a document of thousands).
    head = len(replace(trimmed, events=(), omitted=len(events)).to_json())
    budget = max_bytes - head
    keep: set[int] = set()
    for index, event in sorted(enumerate(events), key=lambda pair: urgency(pair[1])):
        size = len(json.dumps(event.to_json(), separators=(",", ":"), sort_keys=True)) + 1
        if size > budget:
            break
        budget -= size
        keep.add(index)
    kept = tuple(event for index, event in enumerate(events) if index in keep)
    return replace(trimmed, events=kept, omitted=len(events) - len(kept))


@dataclass(frozen=True)
class ConditionValue:
    status: str  # "True" | "False"
    reason: ConditionReason
    message: str


def condition_for(state: NodeEvents) -> ConditionValue:
    urgent = state.most_urgent()
    if urgent is not None:
        reason = (
            ConditionReason.STARTED if urgent.status == "Started" else ConditionReason.SCHEDULED
        )
        deadline = NOW if urgent.act_now else _iso(urgent.not_before)
        message = format_message(
            EventType=urgent.event_type,
            EventId=urgent.event_id,
            EventStatus=urgent.status,
            NotBefore=deadline or NOW,
            Pending=str(len(state.events)),
        )
        return ConditionValue("True", reason, message)
    if state.ended:
        last = state.ended[-1]
        message = format_message(
            EventType=last.event_type, EventId=last.event_id, Outcome=str(last.outcome)
        )
        return ConditionValue("False", OUTCOME_REASON[last.outcome], message)
    return ConditionValue(
        "False", ConditionReason.NO_EVENTS, format_message(VM=state.vm_name or "unknown")
    )


def stamped(condition: ConditionValue, at: datetime) -> ConditionValue:
    """The condition as written at `at`: its message carries `Published=` (see the module doc)."""
    return replace(condition, message=f"{condition.message} {PUBLISHED}={stamp(at)}")


def stamp(at: datetime) -> str:
    return iso(at, "milliseconds")


PUBLISHED = "Published"


def format_message(**fields: str) -> str:
    return " ".join(f"{key}={_token(value)}" for key, value in fields.items())


@dataclass(frozen=True)
class AgentCondition:
    """The agent's condition as a reader takes it: `parse_condition`'s strict reading."""

    active: bool  # status True: `event_id` names the most urgent pending event
    event_type: str = ""
    event_id: str = ""
    started: bool = False
    deadline: datetime | None = None  # None: act now
    published_at: datetime | None = None  # None: written by an agent that did not stamp it
    transition: datetime | None = None


_KEYS = frozenset(
    {"EventType", "EventId", "EventStatus", "NotBefore", "Pending", "Outcome", "VM", PUBLISHED}
)
_TOKEN = re.compile(rf"[A-Za-z0-9._:+-]{{1,{MAX_TOKEN_CHARS}}}")


def parse_condition(condition: Mapping[str, Any]) -> AgentCondition:
    """Read the agent's condition by its strict grammar; ValueError names what is wrong.

    The message is at most `MAX_MESSAGE_CHARS` of `Key=Value` words, keys from a fixed set, each
    once, values tokens. An active condition needs an EventId; an unreadable NotBefore means act
    now (never a guessed time), an unreadable Published refuses the whole condition (it decides
    which of condition and annotation is newer).
    """
    status = condition.get("status")
    message = condition.get("message", "")
    if status not in ("True", "False"):
        raise ValueError("status is neither True nor False")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        raise ValueError(f"message is not text of at most {MAX_MESSAGE_CHARS} characters")
    fields: dict[str, str] = {}
    for word in message.split():
        key, sep, value = word.partition("=")
        if not sep or key not in _KEYS or key in fields or not _TOKEN.fullmatch(value):
            raise ValueError(f"message word {word[:40]!r} is not one Key=token of the grammar")
        fields[key] = value
    published_at = None
    if PUBLISHED in fields:
        published_at = parse_iso(fields[PUBLISHED])
        if published_at is None:
            raise ValueError("Published is not an RFC 3339 time")
    transition = parse_iso(condition.get("lastTransitionTime"))
    if status == "False":
        return AgentCondition(active=False, published_at=published_at, transition=transition)
    if "EventId" not in fields:
        raise ValueError("active without an EventId")
    deadline_text = fields.get("NotBefore", NOW)
    return AgentCondition(
        active=True,
        event_type=fields.get("EventType", "Unknown"),
        event_id=fields["EventId"],
        started=fields.get("EventStatus") == "Started",
        deadline=None if deadline_text == NOW else parse_iso(deadline_text),
        published_at=published_at,
        transition=transition,
    )


ANNOTATION, CONDITION = "annotation", "condition"


def newer_of(annotation_at: datetime | None, condition_at: datetime | None) -> str:
    """Which of the two the agent wrote last: `ANNOTATION` or `CONDITION`.

    Equal stamps: the annotation (written first, in the same publish, and it lists every event).
    A condition stamped by an agent whose annotation is not: the condition (the annotation is
    left over from an agent that could not stamp, so it is the older). No stamp on the condition:
    the annotation, as agents before the stamps were read.
    """
    if condition_at is None:
        return ANNOTATION
    if annotation_at is None or condition_at > annotation_at:
        return CONDITION
    return ANNOTATION


def parse_message(message: str) -> dict[str, str]:
    """`Key=Value` pairs of a condition message; words without `=` are ignored."""
    pairs: dict[str, str] = {}
    for word in message.split():
        key, sep, value = word.partition("=")
        if sep and key:
            pairs[key] = value
    return pairs


def drained_event_ids(annotations: dict[str, str]) -> frozenset[str]:
    """EventIds (upper case) the controller has marked this node drained for."""
    raw = annotations.get(DRAINED_FOR_ANNOTATION, "")
    return frozenset(part.strip().upper() for part in raw.split(",") if part.strip())


def _token(value: str) -> str:
    return _UNSAFE.sub("_", value)[:MAX_TOKEN_CHARS] or "-"


_UNSAFE = re.compile(r"[^A-Za-z0-9._:+-]")


def _iso(moment: datetime | None, timespec: str = "seconds") -> str | None:
    return None if moment is None else iso(moment, timespec)


def _str(data: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = data.get(key)
    if value is None or value == "":
        if required:
            raise ValueError(f"{key} missing")
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} is a {type(value).__name__}, not a string")
    return value


def _names(value: object, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError(f"{key} is not a list of strings")
    return tuple(value)


def _short(exc: BaseException) -> str:
    return str(exc)[:200]

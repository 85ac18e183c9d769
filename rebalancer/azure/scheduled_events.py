"""The IMDS Scheduled Events document: its fields and a parser that never crashes.

Pure: bytes in, a `Document` (or `DocumentError`) out. Faithful to the service as documented
(api-version 2020-07-01): DocumentIncarnation, and per event EventId, EventType, ResourceType,
Resources, EventStatus, NotBefore (RFC 1123, empty once Started), Description, EventSource,
DurationInSeconds. Fields of newer api-versions are kept, not rejected; an EventType we do not
know is kept and flagged, so the caller can report it. An event without a readable EventId,
EventType or EventStatus cannot be identified and is skipped with its reason; the rest of the
document still counts. Any other odd field (NotBefore as a number, Resources as a string, a
non-string Description, ...) keeps the event and is listed in `oddities`; such an event has no
deadline to trust (`not_before` None: act now), unreadable Resources mean "may name this VM", and
callers never acknowledge it, because they cannot be sure whom it releases.
"""

from __future__ import annotations

import email.utils
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rebalancer.vocabulary import EventType

KNOWN_FIELDS = frozenset(
    {
        "EventId",
        "EventType",
        "ResourceType",
        "Resources",
        "EventStatus",
        "NotBefore",
        "Description",
        "EventSource",
        "DurationInSeconds",
    }
)


class EventStatus(StrEnum):
    SCHEDULED = "Scheduled"
    STARTED = "Started"


class DocumentError(ValueError):
    """The body is not a Scheduled Events document at all (not JSON, no incarnation, ...)."""


@dataclass(frozen=True)
class ScheduledEvent:
    event_id: str
    event_type: str  # an EventType value, or whatever newer string the service sent
    status: str  # an EventStatus value, or an unknown string
    resources: tuple[str, ...]
    resource_type: str = "VirtualMachine"
    not_before: datetime | None = None  # UTC; None when empty (Started) or unparsable
    not_before_raw: str = ""
    description: str = ""
    event_source: str = ""
    duration_seconds: int | None = None  # -1 in the document means unknown; kept as -1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    oddities: tuple[str, ...] = ()  # fields that were present but not of the documented shape
    resources_unreadable: bool = False  # Resources could not be read: it may name this VM

    @property
    def known_type(self) -> bool:
        return self.event_type in EventType.__members__.values()

    @property
    def not_before_invalid(self) -> bool:
        """A NotBefore was given but could not be read: callers must act now, never guess."""
        return bool(self.not_before_raw) and self.not_before is None


@dataclass(frozen=True)
class Document:
    incarnation: int
    events: tuple[ScheduledEvent, ...]
    skipped: tuple[str, ...] = ()  # one line per event that could not be read, with why


def parse_not_before(raw: str) -> datetime | None:
    """RFC 1123 ('Mon, 19 Sep 2016 18:29:47 GMT') to an aware UTC datetime; None if empty or bad.

    Other zones and numeric offsets are converted to UTC; a time without a zone is rejected
    rather than guessed.
    """
    text = raw.strip()
    if not text:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        return None
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


def parse_document(body: bytes | str) -> Document:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DocumentError(f"expected a JSON object, got {type(data).__name__}")
    incarnation = data.get("DocumentIncarnation")
    if isinstance(incarnation, bool) or not isinstance(incarnation, int | str):
        raise DocumentError("DocumentIncarnation missing or not an integer")
    try:
        incarnation = int(incarnation)
    except ValueError:
        raise DocumentError(f"DocumentIncarnation {incarnation!r} is not an integer") from None
    raw_events = data.get("Events", [])
    if not isinstance(raw_events, list):
        raise DocumentError("Events is not a list")
    events: list[ScheduledEvent] = []
    skipped: list[str] = []
    for index, raw in enumerate(raw_events):
        try:
            events.append(_parse_event(raw))
        except (ValueError, RecursionError) as exc:
            skipped.append(f"event {index}: {exc}")
    return Document(incarnation=incarnation, events=tuple(events), skipped=tuple(skipped))


def _parse_event(raw: object) -> ScheduledEvent:
    if not isinstance(raw, dict):
        raise ValueError(f"not an object ({type(raw).__name__})")
    event_id = _required_str(raw, "EventId")
    event_type = _required_str(raw, "EventType")
    status = _required_str(raw, "EventStatus")
    oddities: list[str] = []
    resources, resources_unreadable = _resources(raw.get("Resources", []), oddities)
    not_before_value = raw.get("NotBefore")
    not_before_raw = _optional_str(raw, "NotBefore", oddities)
    if not isinstance(not_before_value, str | None):
        # Present but not text: an unreadable deadline ("act now"), never "no deadline".
        not_before_raw = f"<{type(not_before_value).__name__}>"
    not_before = parse_not_before(not_before_raw)
    duration = raw.get("DurationInSeconds")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int)):
        oddities.append("DurationInSeconds is not an integer")
        try:
            duration = int(str(duration))
        except ValueError:
            duration = None  # an odd duration never makes the event unreadable
    resource_type = _optional_str(raw, "ResourceType", oddities) or "VirtualMachine"
    description = _optional_str(raw, "Description", oddities)
    event_source = _optional_str(raw, "EventSource", oddities)
    if oddities:
        # A document that breaks its own schema is not trusted for a deadline either: act now.
        not_before = None
        not_before_raw = not_before_raw or "<unknown>"
    return ScheduledEvent(
        event_id=event_id,
        event_type=event_type,
        status=status,
        resources=resources,
        resource_type=resource_type,
        not_before=not_before,
        not_before_raw=not_before_raw,
        description=description,
        event_source=event_source,
        duration_seconds=duration,
        extra={k: v for k, v in raw.items() if k not in KNOWN_FIELDS},
        oddities=tuple(oddities),
        resources_unreadable=resources_unreadable,
    )


def _resources(value: object, oddities: list[str]) -> tuple[tuple[str, ...], bool]:
    """The VM names of an event, and whether they could not be read (then it may name us)."""
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return tuple(value), False
    if isinstance(value, str):
        oddities.append("Resources is a string, not a list")
        return tuple(name for name in value.replace(",", " ").split() if name), False
    if isinstance(value, list):
        oddities.append("Resources has entries that are not names")
        return tuple(name for name in value if isinstance(name, str)), True
    oddities.append(f"Resources is a {type(value).__name__}, not a list")
    return (), True


def _required_str(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} missing or not a non-empty string")
    return value.strip()


def _optional_str(raw: dict[str, Any], key: str, oddities: list[str]) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        oddities.append(f"{key} is a {type(value).__name__}, not a string")
        return ""
    return value


def render_document(incarnation: int, events: list[dict[str, Any]]) -> str:
    """The document as the service writes it (used by the emulator)."""
    return json.dumps({"DocumentIncarnation": incarnation, "Events": events})


def format_not_before(moment: datetime | None) -> str:
    """RFC 1123 in GMT, as the service writes NotBefore; empty for None."""
    if moment is None:
        return ""
    return email.utils.format_datetime(moment.astimezone(UTC), usegmt=True)

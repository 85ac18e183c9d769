"""Every signal that a node is going away, read into one `Notice`.

Sources, each a pure function of a Node's JSON:
- our agent: the `spot-rebalancer.io/ScheduledEvent` condition and its annotation;
- AKS's node-problem-detector: `PreemptionScheduled`, `VMEventScheduled` and the per-type
  `*Scheduled` conditions, whose message reads `<EventType> <EventStatus>[: <NotBefore>]. ...
  EventId: <id>`;
- an operator: the `spot-rebalancer.io/drain` annotation;
- Karpenter: its `karpenter.sh/disrupted:NoSchedule` taint on a node it is about to disrupt
  (drift, consolidation, expiry, repair), which comes before its drain. No clock says when the
  pods go: Karpenter's drain does, through the Eviction API (PodDisruptionBudgets, the surge's
  hold among them, apply; do-not-disrupt pods wait), bounded by the NodeClaim's
  `terminationGracePeriod` if it has one. Its notice is open-ended (`OPEN_ENDED`): the surge
  scales back when the replacements are Ready or Karpenter has taken the old pods, never at a
  deadline of ours.
A deadline that cannot be read becomes `None`, which means "act now": never a guessed time.
What cannot be used is returned as a skip reason, for a log line and a metric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rebalancer import names
from rebalancer.node_signal import (
    ANNOTATION,
    AgentCondition,
    NodeEvents,
    PublishedEvent,
    newer_of,
    parse_condition,
)
from rebalancer.timefmt import parse_iso
from rebalancer.vocabulary import KARPENTER_DISRUPTION, MANUAL, EventType, Source

KNOWN_EVENT_TYPES = tuple(EventType)
# The deadline of a notice that has none of its own (Karpenter's disruption): later than any
# real one, so it sorts last and is never near; a valid time, so records keep it.
OPEN_ENDED = datetime(2999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Notice:
    node: str
    event_type: str  # an EventType, MANUAL, or what a source sent
    deadline: datetime | None  # None: act now
    event_id: str  # upper case; correlates the same event seen through several sources
    source: Source
    started: bool = False
    seen_at: datetime | None = None  # when the source first reported it, if it says

    @property
    def open_ended(self) -> bool:
        """Karpenter's disruption: no deadline of ours, its drain decides."""
        return self.deadline == OPEN_ENDED

    @property
    def act_now(self) -> bool:
        return self.started or self.deadline is None

    def seconds_left(self, now: datetime) -> float:
        if self.act_now or self.deadline is None:
            return 0.0
        return (self.deadline - now).total_seconds()


@dataclass(frozen=True)
class NodeNotices:
    notices: tuple[Notice, ...] = ()
    skipped: tuple[str, ...] = ()


def notices_of(node: Mapping[str, Any]) -> NodeNotices:
    """All active notices on one Node (JSON as the API serves it), merged by EventId."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    conditions = {
        str(c.get("type")): c
        for c in (node.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }
    found: list[Notice] = []
    skipped: list[str] = []
    for parse in (_from_agent, _from_npd, _from_manual):
        notices, reasons = parse(name, annotations, conditions)
        found.extend(notices)
        skipped.extend(reasons)
    found.extend(_from_karpenter(name, (node.get("spec") or {}).get("taints")))
    return NodeNotices(notices=tuple(merge(found)), skipped=tuple(skipped))


def merge(notices: Iterable[Notice]) -> list[Notice]:
    """One notice per (node, EventId): the most urgent reading wins, the agent's on a tie."""
    best: dict[tuple[str, str], Notice] = {}
    for notice in notices:
        key = (notice.node, notice.event_id)
        current = best.get(key)
        if current is None or _urgency(notice) < _urgency(current):
            best[key] = notice
    return sorted(best.values(), key=lambda n: (n.node, _urgency(n)))


def _urgency(notice: Notice) -> tuple[int, datetime, int]:
    far = datetime.max.replace(tzinfo=UTC)
    order = {Source.AGENT: 0, Source.AKS_NPD: 1, Source.MANUAL: 2, Source.KARPENTER: 3}
    return (0 if notice.act_now else 1, notice.deadline or far, order[notice.source])


Parsed = tuple[list[Notice], list[str]]


def _from_agent(node: str, annotations: Mapping[str, str], conditions: Mapping[str, Any]) -> Parsed:
    """The agent's notices: from its annotation or its condition, whichever it wrote last.

    The annotation lists every pending event; the condition names the most urgent. When the API
    server refuses the annotation (a Node whose annotations are full), the agent still writes the
    condition, and its newer `Published` stamp makes it the one read (`newer_of`): a stale
    annotation never hides the notice the condition carries.
    """
    raw_condition = conditions.get(names.CONDITION_TYPE)
    raw = annotations.get(names.EVENTS_ANNOTATION)
    if raw_condition is None and raw is None:
        return [], []
    skipped: list[str] = []
    condition = None
    if raw_condition is not None:
        try:
            condition = parse_condition(raw_condition)
        except ValueError as error:
            skipped.append(f"{node}: agent condition refused ({error})")
    state = None
    if raw is not None:
        try:
            state = NodeEvents.from_json(raw)
        except ValueError as error:
            skipped.append(f"{node}: agent annotation unreadable ({error}); using the condition")
    if state is not None and _annotation_wins(state, condition):
        if state.events:
            return [_from_event(node, event) for event in state.events], skipped
        if condition is None or not condition.active or _newer(state, condition):
            return [], skipped  # the agent's latest word: nothing pending
        skipped.append(f"{node}: agent condition True but its annotation lists no event")
    if condition is None or not condition.active:
        return [], skipped
    notice = Notice(
        node=node,
        event_type=condition.event_type,
        deadline=condition.deadline,
        event_id=condition.event_id.upper(),
        source=Source.AGENT,
        started=condition.started,
        seen_at=condition.transition,
    )
    return [notice], skipped


def _annotation_wins(state: NodeEvents, condition: AgentCondition | None) -> bool:
    if condition is None:
        # No readable condition: a stamped annotation is the agent's word; an unstamped one
        # (an agent before the stamps) never counted without its condition.
        return state.published_at is not None
    if condition.published_at is None and not condition.active:
        return False  # an agent before the stamps: its False condition says nothing is pending
    return newer_of(state.published_at, condition.published_at) == ANNOTATION


def _newer(state: NodeEvents, condition: AgentCondition) -> bool:
    return (
        state.published_at is not None
        and condition.published_at is not None
        and state.published_at > condition.published_at
    )


def _from_event(node: str, event: PublishedEvent) -> Notice:
    return Notice(
        node=node,
        event_type=event.event_type,
        deadline=None if event.act_now else event.not_before,
        event_id=event.event_id.upper(),
        source=Source.AGENT,
        started=event.status == "Started",
        seen_at=event.first_seen,
    )


# "<EventType> <EventStatus>[: <NotBefore>]" at the start of an NPD message.
_NPD_HEAD = re.compile(
    r"^\s*(?P<type>[A-Za-z]+)\s+(?P<status>[A-Za-z]+)\s*(?P<rest>[:.].*)?$", re.S
)
_NPD_TIME = re.compile(
    r"^:\s*(?P<time>[A-Za-z]{3},\s+\d{1,2}\s+[A-Za-z]{3}\s+\d{4}\s+\d{1,2}:\d{2}:\d{2}\s+[A-Za-z]+)",
    re.ASCII,
)
_EVENT_ID = re.compile(r"EventId:\s*(?P<id>[0-9A-Fa-f-]{8,})", re.I | re.ASCII)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}


def parse_npd_message(message: str) -> tuple[str, str, datetime | None, str] | None:
    """(event type, status, deadline or None, EventId or "") from an NPD condition message.

    None when the message is not an event notice at all (for example an `Advisory`).
    Only GMT/UTC deadlines are read; any other zone or shape gives None (act now).
    """
    text = " ".join(message.split())
    head = _NPD_HEAD.match(text)
    if head is None:
        return None
    status = head.group("status")
    if status not in ("Scheduled", "Started"):
        return None
    rest = head.group("rest") or ""
    deadline = None
    timed = _NPD_TIME.match(rest)
    if status == "Scheduled" and timed is not None:
        deadline = parse_rfc1123_utc(timed.group("time"))
    event_id = _EVENT_ID.search(text)
    return head.group("type"), status, deadline, event_id.group("id").upper() if event_id else ""


def parse_rfc1123_utc(text: str) -> datetime | None:
    """'Sat, 1 Aug 2026 05:41:02 GMT' (one- or two-digit day) to UTC; None for other zones."""
    parts = text.split()
    if len(parts) != 6 or parts[5].upper() not in ("GMT", "UTC"):
        return None
    _, day, month, year, clock, _ = parts
    try:
        hour, minute, second = (int(p) for p in clock.split(":"))
        return datetime(
            int(year), _MONTHS[month.title()], int(day), hour, minute, second, tzinfo=UTC
        )
    except (KeyError, ValueError):
        return None


def _from_npd(node: str, annotations: Mapping[str, str], conditions: Mapping[str, Any]) -> Parsed:
    del annotations
    types = {
        names.NPD_PREEMPTION_CONDITION: EventType.PREEMPT,
        names.NPD_ANY_EVENT_CONDITION: None,
        **names.NPD_PER_TYPE_CONDITIONS,
    }
    notices: list[Notice] = []
    skipped: list[str] = []
    for condition_type, implied_type in types.items():
        condition = conditions.get(condition_type)
        if condition is None or condition.get("status") != "True":
            continue
        message = str(condition.get("message", ""))
        parsed = parse_npd_message(message)
        if parsed is None:
            if implied_type is None:
                skipped.append(f"{node}: {condition_type} message not understood")
                continue
            if "Advisory" in message.split(":", maxsplit=1)[0]:
                skipped.append(f"{node}: {condition_type} is an advisory, not a notice")
                continue
            # The condition type alone says what is coming; the time is unknown: act now.
            parsed = (implied_type, "Scheduled", None, "")
        event_type, status, deadline, event_id = parsed
        if implied_type is not None and event_type != implied_type:
            skipped.append(f"{node}: {condition_type} carries a {event_type} event; ignored")
            continue
        transition = str(condition.get("lastTransitionTime", ""))
        notices.append(
            Notice(
                node=node,
                event_type=event_type,
                deadline=deadline,
                # Without an EventId the condition's transition time tells one event from the next.
                event_id=event_id or f"NPD-{condition_type}-{transition}".upper(),
                source=Source.AKS_NPD,
                started=status == "Started",
                seen_at=parse_iso(transition),
            )
        )
    return notices, skipped


def _from_manual(
    node: str, annotations: Mapping[str, str], conditions: Mapping[str, Any]
) -> Parsed:
    del conditions
    value = annotations.get(names.DRAIN_REQUEST_ANNOTATION)
    if value is None:
        return [], []
    deadline = None if value.strip().lower() in ("", "now", "true") else parse_iso(value)
    notice = Notice(
        node=node,
        event_type=MANUAL,
        deadline=deadline,
        event_id=f"MANUAL-{node}".upper(),
        source=Source.MANUAL,
    )
    return [notice], []


KARPENTER_EVENT_PREFIX = "KARPENTER-"


def karpenter_only(event_ids: Iterable[str]) -> bool:
    """Whether a surge was for Karpenter's disruptions alone (by the event ids it records)."""
    ids = list(event_ids)
    return bool(ids) and all(i.startswith(KARPENTER_EVENT_PREFIX) for i in ids)


def _from_karpenter(node: str, taints: Any) -> list[Notice]:
    """Karpenter's disrupted taint: the node is about to be drained by Karpenter."""
    if not isinstance(taints, list):
        return []
    disrupted = any(
        isinstance(t, dict)
        and t.get("key") == names.KARPENTER_DISRUPTED_TAINT
        and t.get("effect") == "NoSchedule"
        for t in taints
    )
    if not disrupted:
        return []
    notice = Notice(
        node=node,
        event_type=KARPENTER_DISRUPTION,
        deadline=OPEN_ENDED,
        event_id=f"{KARPENTER_EVENT_PREFIX}{node}".upper(),
        source=Source.KARPENTER,
    )
    return [notice]

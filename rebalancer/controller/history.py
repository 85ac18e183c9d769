"""The eviction history: every notice the controller has seen, kept on the cluster. Pure.

Where: a ConfigMap in the controller's own namespace, named after its Lease (`<lease>-history`,
key `history.json`). A ConfigMap and not the Lease: the Lease is rewritten every renewal by a PUT
of the whole object, so a history inside it would race every renewal, and a Lease annotation is a
poor place for a growing document. The namespace is the controller's: tenants who can write their
own Deployments cannot write here, so the record is trusted as far as RBAC goes, and is still
parsed defensively (a record that cannot be read is replaced, never obeyed).

What: one entry per notice (event id, type, node, pool, zone, VM size, priority, when first seen),
the entries of the last `RETENTION` only and at most `MAX_ENTRIES`, plus `since`: when the record
began.

Whose word: the controller's own observation, never an agent's claim (`admit`). An agent writes
only its own Node, but whatever it writes there is its claim: an annotation may list 2000 events.
So an entry is one per (node, event id), dated when the controller saw it (not the `firstSeen` a
source claims), with pool, zone and size from the Node's labels as the controller reads them;
each node adds at most `PER_NODE_LIMIT` entries per `PER_NODE_WINDOW`; and when the record is
full, the nodes holding the most entries give up their oldest first (`_fair_share`), so no node
can push out the record of another, nor weigh on any group but its own beyond its limit.

The planner reads it (the cool-down of a pool that keeps being evicted, the quiet time before a
return to spot, later the scheduler's risk model); the leader writes new notices into it;
every replica exports its counts. A new leader reads it back, so nothing that decisions depend on
lives in one process's memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from rebalancer.names import HISTORY_KEY
from rebalancer.timefmt import iso, parse_iso
from rebalancer.vocabulary import EventType

SCHEMA_VERSION = 1
RETENTION = timedelta(hours=24)
MAX_ENTRIES = 2000  # about 400 KiB of JSON at most, well under a ConfigMap's 1 MiB
# A VM gets one event at a time, rarely two within an hour (a Freeze, then the Preempt): three
# per node per hour records every real one and caps what one node can add at 72 a day.
PER_NODE_LIMIT = 3
PER_NODE_WINDOW = timedelta(hours=1)
MAX_ID_CHARS = 64  # longer ids (not Azure's GUIDs) are kept as a digest: identity is what counts
WINDOWS = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24)}


@dataclass(frozen=True)
class Entry:
    event_id: str
    event_type: str
    node: str
    pool: str
    zone: str
    sku: str
    spot: bool
    first_seen: datetime

    @property
    def preempt(self) -> bool:
        return self.event_type == EventType.PREEMPT

    def to_dict(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "eventType": self.event_type,
            "node": self.node,
            "pool": self.pool,
            "zone": self.zone,
            "sku": self.sku,
            "spot": self.spot,
            "firstSeen": iso(self.first_seen),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        first_seen = parse_iso(_text(data, "firstSeen"))
        if first_seen is None:
            raise ValueError("firstSeen is not an RFC 3339 time")
        return cls(
            event_id=_text(data, "eventId"),
            event_type=_text(data, "eventType"),
            node=_text(data, "node"),
            pool=_text(data, "pool"),
            zone=_text(data, "zone"),
            sku=_text(data, "sku"),
            spot=data.get("spot") is True,
            first_seen=first_seen,
        )


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > 256:
        raise ValueError(f"{key} is not a short string")
    return value


@dataclass(frozen=True)
class History:
    """The record as read. `since` None: there is no record yet (nothing has been watched)."""

    since: datetime | None = None
    entries: tuple[Entry, ...] = ()
    resource_version: str = ""  # of the ConfigMap it was read from; "" when there is none
    unreadable: str = ""  # why the stored record could not be read, if it could not

    def known(self) -> set[tuple[str, str]]:
        """(node, event id) of every entry: one entry per node and event."""
        return {(entry.node, entry.event_id) for entry in self.entries}

    def admit(self, candidates: Iterable[Entry], *, now: datetime) -> list[Entry]:
        """The entries the controller records of what it saw this pass (see the module doc):
        dated `now`, ids bounded, one per (node, event id) it does not know yet, at most
        `PER_NODE_LIMIT` per node within `PER_NODE_WINDOW` counting those already recorded
        (Preempts before other types, then by event id, so the choice does not depend on order).
        """
        known = self.known()
        recent: dict[str, int] = {}
        for entry in self.entries:
            if timedelta(0) <= now - entry.first_seen <= PER_NODE_WINDOW:
                recent[entry.node] = recent.get(entry.node, 0) + 1
        fresh: dict[tuple[str, str], Entry] = {}
        for candidate in candidates:
            entry = replace(
                candidate,
                event_id=bounded_id(candidate.event_id),
                event_type=bounded_id(candidate.event_type),
                first_seen=now,
            )
            if (entry.node, entry.event_id) not in known:
                fresh.setdefault((entry.node, entry.event_id), entry)
        admitted = []
        for entry in sorted(fresh.values(), key=lambda e: (e.node, not e.preempt, e.event_id)):
            if recent.get(entry.node, 0) < PER_NODE_LIMIT:
                recent[entry.node] = recent.get(entry.node, 0) + 1
                admitted.append(entry)
        return sorted(admitted, key=lambda e: (e.first_seen, e.event_id))

    def preempts(self, *, now: datetime, window: timedelta) -> list[Entry]:
        return [e for e in self.entries if e.preempt and now - e.first_seen <= window]

    def preempt_count(self, pool: str, zone: str, *, now: datetime, window: timedelta) -> int:
        return sum(
            1 for e in self.preempts(now=now, window=window) if (e.pool, e.zone) == (pool, zone)
        )

    def quiet_seconds(self, pool: str, now: datetime) -> float:
        """Seconds since the pool's last Preempt, and never more than the record has watched
        (no record yet: 0, failing closed)."""
        if self.since is None:
            return 0.0
        last = max(
            (e.first_seen for e in self.entries if e.preempt and e.pool == pool),
            default=self.since,
        )
        return max(0.0, (now - max(last, self.since)).total_seconds())

    def with_entries(self, new: Iterable[Entry], *, now: datetime) -> History:
        """This history plus `new`, pruned to the retention and the size bound."""
        kept = [e for e in (*self.entries, *new) if now - e.first_seen <= RETENTION]
        kept.sort(key=lambda e: (e.first_seen, e.event_id))
        return History(
            since=self.since or now,
            entries=_fair_share(kept, MAX_ENTRIES),
            resource_version=self.resource_version,
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": SCHEMA_VERSION,
                "since": iso(self.since) if self.since else None,
                "entries": [e.to_dict() for e in self.entries],
            },
            sort_keys=True,
            separators=(",", ":"),
        )


def bounded_id(text: str) -> str:
    """`text` if short enough to keep (the record must stay readable: `_text` refuses more than
    256 characters), else a digest of it that still tells one event from another."""
    if len(text) <= MAX_ID_CHARS:
        return text
    return "sha256-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def _fair_share(entries: list[Entry], limit: int) -> tuple[Entry, ...]:
    """At most `limit` of `entries` (sorted oldest first), dropping the oldest entries of the
    nodes that hold the most: every node keeps up to the same share, the largest that fits."""
    if len(entries) <= limit:
        return tuple(entries)
    per_node: dict[str, int] = {}
    for entry in entries:
        per_node[entry.node] = per_node.get(entry.node, 0) + 1
    low, high = 0, max(per_node.values())  # the largest share with sum(min(n, share)) <= limit
    while low < high:
        share = (low + high + 1) // 2
        if sum(min(n, share) for n in per_node.values()) <= limit:
            low = share
        else:
            high = share - 1
    skip = {node: max(0, n - low) for node, n in per_node.items()}  # each node's oldest go
    kept = []
    for entry in entries:
        if skip[entry.node]:
            skip[entry.node] -= 1
        else:
            kept.append(entry)
    return tuple(kept)


def history_from_configmap(obj: Mapping[str, Any] | None) -> History:
    """The history stored in a ConfigMap (None: no ConfigMap yet). Never raises: a record that
    cannot be read yields an empty history, marked `unreadable`, that the next write replaces."""
    if obj is None:
        return History()
    version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    text = (obj.get("data") or {}).get(HISTORY_KEY)
    try:
        return _parse(text, version)
    except (ValueError, TypeError, RecursionError) as error:
        return History(resource_version=version, unreadable=f"{type(error).__name__}: {error}")


def _parse(text: Any, resource_version: str) -> History:
    if not isinstance(text, str):
        raise ValueError("no history.json")
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != SCHEMA_VERSION:
        raise ValueError(f"not a version {SCHEMA_VERSION} record")
    since = parse_iso(data.get("since")) if isinstance(data.get("since"), str) else None
    raw = data.get("entries") or []
    if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
        raise ValueError(f"entries is not a list of at most {MAX_ENTRIES}")
    entries = tuple(Entry.from_dict(e) for e in raw if isinstance(e, dict))
    return History(since=since, entries=entries, resource_version=resource_version)

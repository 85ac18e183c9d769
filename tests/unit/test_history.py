"""The eviction history is the controller's observation: what one node's agent writes can add at
most its own few entries, and can never dilute or inflate another zone's risk. Pure tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.actions import RecordHistory
from rebalancer.controller.history import (
    MAX_ENTRIES,
    PER_NODE_LIMIT,
    PER_NODE_WINDOW,
    Entry,
    History,
    history_from_configmap,
)
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.risk import HIGH, RiskSettings, assess
from rebalancer.controller.snapshot import Snapshot

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SKU = "Standard_NC24ads_A100_v4"
REAL_ZONE, FLOOD_ZONE = "eastus-1", "eastus-2"


def node_json(
    name: str, zone: str, *, annotation: str | None = None, active: bool = False
) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True"}]
    if active:  # the agent's condition, as an agent from before the stamps wrote it
        conditions.append(
            {
                "type": names.CONDITION_TYPE,
                "status": "True",
                "message": "EventType=Preempt EventId=F0 EventStatus=Scheduled NotBefore=now",
                "lastTransitionTime": "2026-11-29T11:59:00Z",
            }
        )
    return {
        "metadata": {
            "name": name,
            "labels": {
                names.AKS_AGENTPOOL_LABEL: "spotgpu",
                names.AKS_SPOT_LABEL: "spot",
                names.INSTANCE_TYPE_LABEL: SKU,
                names.ZONE_LABEL: zone,
                names.REGION_LABEL: "eastus",
            },
            "annotations": {names.EVENTS_ANNOTATION: annotation} if annotation else {},
        },
        "spec": {},
        "status": {"conditions": conditions, "allocatable": {"nvidia.com/gpu": "1"}},
    }


def flood_annotation(count: int, *, claimed: datetime) -> str:
    """The smallest annotation that lists `count` Preempts, each claiming to be seen `claimed`."""
    seen = claimed.strftime("%Y-%m-%dT%H:%M:%SZ")
    events = [
        {"eventId": f"F{i}", "eventType": "Preempt", "eventStatus": "Scheduled", "firstSeen": seen}
        for i in range(count)
    ]
    return json.dumps({"version": 1, "vmName": "bad", "events": events}, separators=(",", ":"))


def entry(node: str, event_id: str, when: datetime, zone: str = REAL_ZONE) -> Entry:
    return Entry(event_id, "Preempt", node, "spotgpu", zone, SKU, True, when)


def snapshot(nodes: list[dict[str, Any]], history: History) -> Snapshot:
    infos = [NodeInfo.from_json(n) for n in nodes]
    return Snapshot(
        now=NOW,
        nodes={n.name: n for n in infos},
        pods={},
        workloads={},
        replicaset_owners={},
        history=history,
    )


def test_one_nodes_2000_events_neither_dilute_nor_replace_another_zones_record() -> None:
    """The reported failure: 40 real Preempts in one zone within the hour, then one node of
    another zone lists 2000 Preempts in its own annotation (within the 256 KiB limit), all
    claiming to be seen just now. The real zone still reads high; the flooder's zone gains at most
    the per-node limit."""
    real = tuple(
        entry(f"real-{i}", f"R{i}", NOW - timedelta(minutes=50) + timedelta(seconds=i))
        for i in range(40)
    )
    # A record one hour old: by the formula in risk.py, 40 Preempts of the last hour over about
    # 38 node-hours watched read 0.6 per node-hour, high.
    watched = History(since=NOW - timedelta(hours=1), entries=real)
    annotation = flood_annotation(2000, claimed=NOW)
    assert len(annotation) < 256 * 1024
    nodes = [node_json(f"live-{i}", REAL_ZONE) for i in range(10)]
    nodes.append(node_json("bad", FLOOD_ZONE, annotation=annotation, active=True))

    (record,) = [
        a
        for a in plan(snapshot(nodes, watched), Settings()).actions
        if isinstance(a, RecordHistory)
    ]

    recorded = record.history
    assert len(recorded.entries) <= MAX_ENTRIES
    assert {e.event_id for e in real} <= {e.event_id for e in recorded.entries}
    flooded = [e for e in recorded.entries if e.zone == FLOOD_ZONE]
    assert len(flooded) == PER_NODE_LIMIT and {e.node for e in flooded} == {"bad"}
    infos = [NodeInfo.from_json(n) for n in nodes]
    before = assess(nodes=infos, history=watched, now=NOW, settings=RiskSettings())
    after = assess(nodes=infos, history=recorded, now=NOW, settings=RiskSettings())
    key = ("spotgpu", REAL_ZONE, SKU)
    assert after[key].level == HIGH and after[key].rate_per_hour == before[key].rate_per_hour


def test_a_record_already_flooded_gives_the_flooder_the_same_share_as_everyone() -> None:
    """A record as an earlier version wrote it (2000 entries of one node, the newest) still keeps
    every real entry when it is next written: the node holding the most gives up its oldest."""
    real = [entry(f"real-{i}", f"R{i}", NOW - timedelta(minutes=50)) for i in range(40)]
    flood = [entry("bad", f"F{i}", NOW - timedelta(seconds=1), FLOOD_ZONE) for i in range(2000)]
    written = History(since=NOW - timedelta(days=1)).with_entries([*real, *flood], now=NOW)
    assert len(written.entries) == MAX_ENTRIES
    assert sum(1 for e in written.entries if e.node.startswith("real-")) == 40
    assert sum(1 for e in written.entries if e.node == "bad") == MAX_ENTRIES - 40


@pytest.mark.parametrize(
    ("recorded_within_window", "recorded_before", "offered", "admitted"),
    [
        (0, 0, 1, 1),
        (0, 0, PER_NODE_LIMIT + 5, PER_NODE_LIMIT),
        (PER_NODE_LIMIT - 1, 0, 5, 1),
        (PER_NODE_LIMIT, 0, 5, 0),
        (0, 10, 5, PER_NODE_LIMIT),  # entries older than the window do not count
    ],
)
def test_each_node_adds_at_most_its_limit_per_window(
    recorded_within_window: int, recorded_before: int, offered: int, admitted: int
) -> None:
    old = NOW - PER_NODE_WINDOW - timedelta(seconds=1)
    recent = NOW - PER_NODE_WINDOW + timedelta(seconds=1)
    entries = [entry("n1", f"OLD{i}", old) for i in range(recorded_before)]
    entries += [entry("n1", f"NEW{i}", recent) for i in range(recorded_within_window)]
    entries.append(entry("n2", "OTHER", recent))  # another node's entries never count against n1
    history = History(since=NOW - timedelta(days=1), entries=tuple(entries))
    offers = [entry("n1", f"E{i}", NOW) for i in range(offered)] + [entry("n2", "N2", NOW)]
    result = history.admit(offers, now=NOW)
    assert sum(1 for e in result if e.node == "n1") == admitted
    assert [e.event_id for e in result if e.node == "n2"] == ["N2"]


def test_preempts_go_first_within_a_nodes_limit() -> None:
    others = [
        Entry(f"Z{i}", "Freeze", "n1", "spotgpu", REAL_ZONE, SKU, True, NOW) for i in range(5)
    ]
    result = History(since=NOW).admit([*others, entry("n1", "P", NOW)], now=NOW)
    assert "P" in {e.event_id for e in result} and len(result) == PER_NODE_LIMIT


def test_an_entry_is_dated_when_the_controller_saw_it_and_is_one_per_node_and_event() -> None:
    claimed = NOW - timedelta(hours=23)  # a source may claim any time: it is not taken
    history = History(since=NOW - timedelta(days=1), entries=(entry("n1", "E", NOW),))
    result = history.admit(
        [entry("n1", "E", claimed), entry("n2", "E", claimed), entry("n2", "E", claimed)], now=NOW
    )
    assert [(e.node, e.event_id, e.first_seen) for e in result] == [("n2", "E", NOW)]


def test_an_id_too_long_to_keep_is_kept_as_a_digest_and_the_record_stays_readable() -> None:
    history = History(since=NOW - timedelta(days=1))
    (admitted,) = history.admit([entry("n1", "X" * 5000, NOW)], now=NOW)
    assert admitted.event_id.startswith("sha256-") and len(admitted.event_id) <= 64
    written = history.with_entries([admitted], now=NOW)
    read = history_from_configmap({"data": {names.HISTORY_KEY: written.to_json()}})
    assert read.unreadable == "" and read.entries == written.entries

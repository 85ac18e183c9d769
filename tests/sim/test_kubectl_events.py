"""`kubectl get events` against both backends: the Events the controller writes (core/v1, as
`rebalancer.kube.writes.record_event` writes them) sorted by `--sort-by=.lastTimestamp`, with
upstream's columns; the same Events through `events.k8s.io/v1`, and one written there read
back through core/v1 (one storage, two API groups, as kube-apiserver has)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from .backend import Backend

EVENTS_V1 = "events.k8s.io/v1"


def _core_event(backend: Backend, pod: str, reason: str, at: datetime) -> dict[str, Any]:
    """What the controller POSTs (rebalancer/kube/writes.py record_event)."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.", "namespace": backend.namespace},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": backend.namespace},
        "reason": reason,
        "message": f"{reason} for the test",
        "type": "Normal",
        "source": {"component": "spot-rebalancer"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": "spot-rebalancer",
        "reportingInstance": "spot-rebalancer",
    }


async def test_get_events_sorted_by_last_timestamp(backend: Backend) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    # Created newest first, so only sorting puts them in time order.
    for offset, reason in ((0, "SpotRebalancerDrained"), (-60, "SpotRebalancerCordoned")):
        await backend.create(
            "events", _core_event(backend, "llm-0", reason, now + timedelta(seconds=offset))
        )
    code, out = await backend.kubectl("get", "events", "--sort-by=.lastTimestamp")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [row.split()[2:4] for row in rows] == [
        ["SpotRebalancerCordoned", "pod/llm-0"],
        ["SpotRebalancerDrained", "pod/llm-0"],
    ]
    code, out = await backend.kubectl("get", "events", "--sort-by=.lastTimestamp", "-o", "wide")
    assert code == 0, out
    assert out.splitlines()[0].split()[-4:] == ["FIRST", "SEEN", "COUNT", "NAME"]


async def test_core_events_are_events_k8s_io_events_and_back(backend: Backend) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    core = await backend.create(
        "events", _core_event(backend, "llm-1", "SpotRebalancerCordoned", now)
    )
    code, out = await backend.kubectl("get", "events.events.k8s.io", "-o", "json")
    assert code == 0, out
    (seen,) = json.loads(out)["items"]
    assert seen["apiVersion"] == EVENTS_V1
    assert seen["metadata"]["name"] == core["metadata"]["name"]
    assert (seen["reason"], seen["note"]) == (core["reason"], core["message"])
    assert seen["regarding"]["name"] == "llm-1"
    assert seen["reportingController"] == "spot-rebalancer"
    assert seen["deprecatedLastTimestamp"] == core["lastTimestamp"]
    assert seen["deprecatedSource"] == {"component": "spot-rebalancer"}

    micro = now.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    written = await backend.create(
        "events",
        {
            "apiVersion": EVENTS_V1,
            "kind": "Event",
            "metadata": {"name": "llm-2.explore"},
            "eventTime": micro,
            "reportingController": "example.com/explorer",
            "reportingInstance": "explorer-1",
            "action": "Testing",
            "reason": "Explored",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "llm-2", "namespace": backend.namespace},
            "note": "written through events.k8s.io",
        },
        group=EVENTS_V1,
    )
    assert written["apiVersion"] == EVENTS_V1
    code, out = await backend.kubectl("get", "events", "llm-2.explore", "-o", "json")
    assert code == 0, out
    read = json.loads(out)
    assert read["apiVersion"] == "v1"
    assert (read["message"], read["involvedObject"]["name"]) == (
        "written through events.k8s.io",
        "llm-2",
    )
    assert (read["reportingComponent"], read["action"]) == ("example.com/explorer", "Testing")
    code, out = await backend.kubectl("get", "events", "--sort-by=.lastTimestamp")
    assert code == 0, out
    assert sorted(row.split()[2] for row in out.splitlines()[1:]) == [
        "Explored",
        "SpotRebalancerCordoned",
    ]

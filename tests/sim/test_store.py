"""The store's API-server semantics: resourceVersions, conflicts, no-op writes, generation,
status subresource, graceful deletion, watch history and 410, selectors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rebalancer.clock import ManualClock
from rebalancer_sim import resources as R
from rebalancer_sim.selectors import parse_field_selector, parse_label_selector
from rebalancer_sim.status import ApiError
from rebalancer_sim.store import Store


@pytest.fixture
def store() -> Store:
    store = Store(ManualClock(), history_size=5)
    store.create(R.NAMESPACES, {"metadata": {"name": "default"}})
    return store


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(json.dumps(obj)))


def _deployment(name: str = "d") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c"}]},
            },
        },
    }


def test_resource_versions_grow_and_stale_put_conflicts(store: Store) -> None:
    created = store.create(R.DEPLOYMENTS, _deployment())
    first = int(created["metadata"]["resourceVersion"])
    stale = _copy(created)
    fresh = _copy(created)
    fresh["spec"]["replicas"] = 2
    updated = store.replace(R.DEPLOYMENTS, fresh)
    assert int(updated["metadata"]["resourceVersion"]) > first
    assert updated["metadata"]["generation"] == 2
    stale["spec"]["replicas"] = 3
    with pytest.raises(ApiError) as caught:
        store.replace(R.DEPLOYMENTS, stale)
    assert (caught.value.code, caught.value.reason) == (409, "Conflict")


def test_noop_write_keeps_version_and_emits_nothing(store: Store) -> None:
    created = store.create(R.DEPLOYMENTS, _deployment())
    version, writes = store.resource_version, store.writes
    assert store.replace(R.DEPLOYMENTS, _copy(created)) is created
    assert (store.resource_version, store.writes) == (version, writes)


def test_status_and_main_resource_ignore_each_other(store: Store) -> None:
    created = store.create(R.DEPLOYMENTS, _deployment())
    with_status = _copy(created)
    with_status["status"] = {"replicas": 5}
    with_status["spec"]["replicas"] = 9
    after = store.replace(R.DEPLOYMENTS, with_status, subresource="status")
    assert (after["status"], after["spec"]["replicas"], after["metadata"]["generation"]) == (
        {"replicas": 5},
        1,
        1,
    )
    main = _copy(after)
    main["status"] = {"replicas": 0}
    main["metadata"]["labels"] = {"x": "y"}
    after = store.replace(R.DEPLOYMENTS, main)
    assert after["status"] == {"replicas": 5} and after["metadata"]["labels"] == {"x": "y"}
    assert after["metadata"]["generation"] == 1  # metadata changes do not bump generation


def test_bound_pod_deletes_gracefully_unbound_at_once(store: Store) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
    }
    store.create(R.PODS, pod)
    last, removed = store.delete(R.PODS, "default", "p")
    assert not removed
    assert last["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.pods_on_node("n1")
    store.finish_pod_termination("default", "p")
    assert store.get(R.PODS, "default", "p") is None and not store.pods_on_node("n1")
    store.create(
        R.PODS,
        {
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]},
        },
    )
    _, removed = store.delete(R.PODS, "default", "q")
    assert removed


def test_pod_spec_is_immutable_but_for_images(store: Store) -> None:
    created = store.create(
        R.PODS,
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "a"}]},
        },
    )
    changed = _copy(created)
    changed["spec"]["containers"][0]["image"] = "b"
    changed = _copy(store.replace(R.PODS, changed))
    changed["spec"]["restartPolicy"] = "Never"
    with pytest.raises(ApiError) as caught:
        store.replace(R.PODS, changed)
    assert caught.value.code == 422


def test_watch_replays_history_then_410_when_too_old(store: Store) -> None:
    start = store.resource_version
    for index in range(3):
        store.create(R.CONFIGMAPS, {"metadata": {"name": f"c{index}", "namespace": "default"}})
    watcher = store.watch(R.CONFIGMAPS, since=start)
    events = [json.loads(line) for line in watcher.pending]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "c0"),
        ("ADDED", "c1"),
        ("ADDED", "c2"),
    ]
    store.unwatch(watcher)
    for index in range(6):  # history_size 5: the oldest changes fall out
        store.create(R.CONFIGMAPS, {"metadata": {"name": f"d{index}", "namespace": "default"}})
    with pytest.raises(ApiError) as caught:
        store.watch(R.CONFIGMAPS, since=start)
    assert (caught.value.code, caught.value.reason) == (410, "Expired")
    fresh = store.watch(R.CONFIGMAPS, since=store.resource_version)
    assert not fresh.pending


def test_deleted_event_carries_new_resource_version(store: Store) -> None:
    store.create(R.CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}})
    watcher = store.watch(R.CONFIGMAPS, since=store.resource_version)
    store.delete(R.CONFIGMAPS, "default", "c")
    (line,) = watcher.pending
    event = json.loads(line)
    assert event["type"] == "DELETED"
    assert int(event["object"]["metadata"]["resourceVersion"]) == store.resource_version


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b,c!=d", {"a": "b", "c": "e"}, True),
        ("a!=b", {}, True),
        ("a in (x, y)", {"a": "y"}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("a notin (x,y)", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "1"}, False),
        ("a in (x),b", {"a": "x"}, False),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(selector)(labels) is matches


def test_field_selectors() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Running"},
    }
    predicate, node = parse_field_selector("spec.nodeName=n,status.phase!=Succeeded", "Pod")
    assert predicate(pod) and node == "n"
    predicate, node = parse_field_selector("metadata.name==q", "Pod")
    assert not predicate(pod) and node is None
    with pytest.raises(ApiError) as caught:
        parse_field_selector("spec.colour=red", "Pod")
    assert caught.value.code == 400

"""Hostile and malformed input on the objects the controller reads (issue: "a cache dies
silently", "forged records are obeyed"): one bad object is skipped and reported, every other
object is still acted on, and nothing a tenant can write makes the controller scale anything."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from rebalancer import names
from tests.loop.rig import (
    EVENT,
    Emulated,
    cluster,
    drained,
    pod,
    preempt,
    replicas,
    running,
    until,
)

pytestmark = pytest.mark.looptime

DEEP = "[" * 3000 + "]" * 3000


def hostile_surge(record: str) -> Any:
    def write(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})[names.SURGE_ANNOTATION] = record

    return write


@pytest.mark.parametrize(
    "record",
    [
        '{"baseReplicas": 1e999, "added": 1, "eventIds": [], "doomedPods": []}',
        '{"baseReplicas": 30, "added": -27, "eventIds": [], "doomedPods": []}',
        DEEP,
        '{"baseReplicas": "3", "added": 1, "eventIds": ["E"], "doomedPods": ["ml/llm-a"]}',
    ],
    ids=["infinite", "negative", "deep", "string"],
)
async def test_a_forged_surge_record_on_a_quiet_workload_is_never_obeyed(record: str) -> None:
    async with cluster() as em:
        em.edit("deployments", "ml", "llm", hostile_surge(record))
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            await asyncio.sleep(10)  # ten passes
            assert all(informer.synced.is_set() for informer in controller.informers)
            assert controller.liveness().ok
    assert replicas(em) == 3
    assert em.written("PATCH", "deployments") == []


async def test_a_hostile_record_on_the_workload_being_drained_still_drains_the_node() -> None:
    async with cluster() as em:
        em.edit("deployments", "ml", "llm", hostile_surge(DEEP))
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await until(lambda: drained(em, "spot-0"), within=40, what="the node drained")
    assert replicas(em) == 3  # no surge from a record it cannot read: a plain drain
    evicted = [w.name for w in em.written("POST", "pods/eviction")]
    assert evicted == ["llm-a"]
    warnings = [w.body["reason"] for w in em.written("POST", "events")]
    assert "SpotRebalancerInputRefused" in warnings  # its record is not ours: left alone


async def test_a_deep_annotation_on_one_node_blinds_the_controller_to_nothing_else() -> None:
    async with cluster() as em:

        def deep(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("annotations", {})[names.EVENTS_ANNOTATION] = DEEP

        em.edit("nodes", "", "spot-1", deep)
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            em.edit("nodes", "", "spot-1", deep)  # again, while watched
            preempt(em, "spot-0", seconds=30)
            await until(lambda: replicas(em) == 4, within=5, what="the surge for spot-0")
            assert controller.liveness().ok and controller.readiness().ok


class ListBug:
    """Between the controller and its client, a bug of ours (not an API error, which the cache
    handles itself): the next `times` lists of `path` raise."""

    def __init__(self, path: str, *, times: int) -> None:
        self.path, self.times = path, times
        self.client: Any = None

    def __call__(self, client: Any) -> ListBug:
        self.client = client
        return self

    async def request(self, method: str, path: str, **options: Any) -> Any:
        if method == "GET" and path == self.path and self.times > 0:
            self.times -= 1
            raise RuntimeError("a bug")
        return await self.client.request(method, path, **options)

    def stream(self, path: str, **options: Any) -> Any:
        return self.client.stream(path, **options)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(("crashes", "alive"), [(2, True), (50, False)])
async def test_a_crashing_cache_is_restarted_and_liveness_says_when_it_cannot_be(
    crashes: int, alive: bool
) -> None:
    """The pod cache's list crashes with a bug of ours (not an API error, which it handles
    itself). The supervisor restarts it; twice is recovered from, a crash loop fails /healthz
    so that the kubelet restarts the process."""
    async with cluster() as em:
        bug = ListBug("/api/v1/pods", times=crashes)
        async with running(em, client=bug) as controller:
            if alive:
                await until(lambda: controller.readiness().ok, within=30, what="caches synced")
                assert controller.liveness().ok
            else:
                await until(
                    lambda: not controller.liveness().ok, within=60, what="liveness failing"
                )
                assert "pods" in controller.liveness().reason


# ---- one tenant's value never stops planning for anyone else (issue 18, failure 1) -----------

ANCIENT = "0001-01-01T00:00:00+01:00"  # reads, then overflows when made UTC


def tenant_b(em: Emulated, annotated: dict[str, str], *, replicas: int = 1) -> None:
    """Another team's GPU Deployment in its own namespace, one replica on od-1, carrying
    `annotated` (what that team wrote on it)."""
    deployment = copy.deepcopy(em.get("deployments", "ml", "llm"))
    deployment["metadata"] = {"namespace": "team-b", "name": "chat", "annotations": annotated}
    deployment["spec"]["replicas"] = replicas
    deployment["spec"]["selector"] = {"matchLabels": {"app": "chat"}}
    em.put("deployments", deployment)
    owner = [{"kind": "Deployment", "name": "chat", "controller": True}]
    em.put(
        "replicasets",
        {"metadata": {"namespace": "team-b", "name": "chat-rs", "ownerReferences": owner}},
    )
    for index in range(replicas):
        chat = pod(f"chat-{index}", "od-1", owner="chat-rs")
        chat["metadata"]["namespace"] = "team-b"
        em.put("pods", chat)


def return_record(started_at: str) -> str:
    return json.dumps(
        {"baseReplicas": 1, "retire": "team-b/chat-0", "pool": "gpuspot",
         "startedAt": started_at, "knownPods": ["chat-0"], "completed": False},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("annotated", "replicas_b"),
    [
        ({names.MIN_ON_DEMAND: "²"}, 1),  # '²'.isdigit() is true; int('²') raises
        ({names.MIN_ON_DEMAND: "7" * 5000}, 1),  # int() refuses over 4300 digits
        ({names.SPARE_REPLICAS: "\uff11"}, 1),  # a full-width digit one
        ({names.RETURN_ANNOTATION: return_record(ANCIENT)}, 2),
        ({names.RETURN_BACKOFF_ANNOTATION: ANCIENT}, 1),
    ],
    ids=["superscript", "5000-digits", "full-width", "return-started-year-1", "backoff-year-1"],
)
async def test_one_tenants_malformed_value_never_stops_a_drain_elsewhere(
    annotated: dict[str, str], replicas_b: int
) -> None:
    async with cluster() as em:
        tenant_b(em, annotated, replicas=replicas_b)
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await until(lambda: replicas(em) == 4, within=10, what="llm surged for its doomed pod")
            await until(lambda: drained(em, "spot-0"), within=40, what="the node drained")
            errors = controller.metrics.reconcile_errors.labels("plan")._value.get()
    assert errors == 0, "planning stopped for everyone"
    chat = em.get("deployments", "team-b", "chat")
    assert chat["spec"]["replicas"] == replicas_b  # tenant B's own workload is left alone
    warnings = {
        w.body["reason"]: w.body["involvedObject"].get("name")
        for w in em.written("POST", "events")
        if w.body.get("type") == "Warning"
    }
    refusal = {"SpotRebalancerPolicyRefused", "SpotRebalancerInputRefused"}
    assert any(warnings.get(reason) == "chat" for reason in refusal), warnings


# ---- records cannot be forged into commands (issue 18, failure 8) ----------------------------


def forged(field: str, record: dict[str, Any]) -> Any:
    def write(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("annotations", {})[field] = json.dumps(record)

    return write


@pytest.mark.parametrize(
    ("field", "record"),
    [
        (names.SURGE_ANNOTATION,
         {"baseReplicas": 0, "added": 1, "eventIds": [EVENT], "doomedPods": ["ml/llm-a"],
          "deadline": None, "completed": False, "reverted": False}),
        (names.SURGE_ANNOTATION,
         {"baseReplicas": 2, "added": 1, "eventIds": [EVENT], "doomedPods": ["ml/llm-a"],
          "deadline": None, "completed": False, "reverted": False}),
        (names.RETURN_ANNOTATION,
         {"baseReplicas": 2, "retire": "ml/llm-c", "pool": "gpuspot",
          "startedAt": "2026-11-30T12:00:00Z", "knownPods": ["llm-a", "llm-b", "llm-c"],
          "completed": False, "gaveUp": False}),
    ],
    ids=["surge-to-zero", "surge-to-two", "return-to-two"],
)  # fmt: skip
async def test_a_well_formed_forged_record_is_reported_and_never_obeyed(
    field: str, record: dict[str, Any]
) -> None:
    async with cluster() as em:
        em.edit("deployments", "ml", "llm", forged(field, record))
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            await until(
                lambda: any(
                    w.body["reason"] == "SpotRebalancerInputRefused"
                    for w in em.written("POST", "events")
                ),
                within=10,
                what="a Warning Event on the workload",
            )
            await asyncio.sleep(10)  # ten passes more
    assert replicas(em) == 3
    assert em.written("PATCH", "deployments") == []
    assert em.written("DELETE", "pods") == []

"""The webhook's lookup of a workload its view does not show yet (a brand-new Deployment's first
pods): found by the pod's own owner reference, from the live cache or one GET shared by a burst,
remembered briefly, bounded in time and in GETs at once; whatever goes wrong, the pod is
admitted unplaced, never refused or held."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
import structlog

from rebalancer import names
from rebalancer.controller import owner_lookup
from rebalancer.controller.admission import review
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.owner_lookup import OwnerLookup, owner_key
from rebalancer.controller.webhook import PlacementWebhook
from rebalancer.kube.errors import NotFound, ServerError
from rebalancer.metrics import ControllerMetrics
from tests.unit.test_placement import cluster, patch_of, request, view_of
from tests.unit.test_planner import TOLERATE_BOTH

HASH = "5f6d8c9b7"
CHAT = {
    "metadata": {
        "name": "chat",
        "namespace": "ml",
        "uid": "uid-chat",
        "annotations": {names.SPREAD: "zone"},
    },
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "chat"}},
        "template": {
            "metadata": {"labels": {"app": "chat"}},
            "spec": {
                **TOLERATE_BOTH,
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        },
    },
}
CHAT_PATH = "/apis/apps/v1/namespaces/ml/deployments?fieldSelector=metadata.name=chat"


def chat_pod(uid: str = "c1", *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The review of a pod the Deployment controller's ReplicaSet `chat-<hash>` creates."""
    body = request(uid, owner=f"chat-{HASH}")
    body["request"]["object"]["metadata"]["labels"] = (
        {"app": "chat", "pod-template-hash": HASH} if labels is None else labels
    )
    return body


def pod_of(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body["request"]["object"])


class Api:
    """A Requester answering the lists of one name from `objects` (an empty list otherwise), each
    answer held until `release` is set, or failing with `error`."""

    def __init__(self, objects: dict[str, Any], *, error: Exception | None = None) -> None:
        self.objects = objects
        self.error = error
        self.release = asyncio.Event()
        self.release.set()
        self.gets: list[str] = []

    async def request(
        self, method: str, path: str, *, query: dict[str, str] | None = None, **_: Any
    ) -> Any:
        assert method == "GET"
        (selector,) = (query or {}).items()
        path = f"{path}?{selector[0]}={selector[1]}"
        self.gets.append(path)
        await self.release.wait()
        if self.error is not None:
            raise self.error
        if path.startswith("/apis/apps/v1/namespaces/gone/"):
            raise NotFound("namespaces gone not found", status=404)
        return {"items": [copy.deepcopy(self.objects[path])] if path in self.objects else []}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lookup(
    api: Api, *, live: dict[tuple[str, str, str], WorkloadInfo] | None = None
) -> tuple[OwnerLookup, Clock, list[str]]:
    clock, results = Clock(), []
    found = OwnerLookup(api, live=(live or {}).get, monotonic=clock, on_result=results.append)
    return found, clock, results


@pytest.mark.parametrize(
    ("owner", "labels", "key"),
    [
        ({"kind": "ReplicaSet", "name": f"chat-{HASH}"}, {"pod-template-hash": HASH},
         ("Deployment", "ml", "chat")),
        ({"kind": "ReplicaSet", "name": f"my-chat-{HASH}"}, {"pod-template-hash": HASH},
         ("Deployment", "ml", "my-chat")),
        ({"kind": "StatefulSet", "name": "kaito-ws"}, {}, ("StatefulSet", "ml", "kaito-ws")),
        # A ReplicaSet no Deployment made (its name does not end in the pod's template hash).
        ({"kind": "ReplicaSet", "name": "chat-manual"}, {"pod-template-hash": HASH}, None),
        ({"kind": "ReplicaSet", "name": f"chat-{HASH}"}, {}, None),
        ({"kind": "ReplicaSet", "name": HASH}, {"pod-template-hash": HASH}, None),
        ({"kind": "Job", "name": "train"}, {}, None),
    ],
)  # fmt: skip
def test_the_owner_named_by_the_pods_own_reference(
    owner: dict[str, str], labels: dict[str, str], key: tuple[str, str, str] | None
) -> None:
    pod = {"metadata": {"labels": labels, "ownerReferences": [{**owner, "controller": True}]}}
    assert owner_key(pod, "ml") == key
    not_controller = {"metadata": {"labels": labels, "ownerReferences": [owner]}}
    assert owner_key(not_controller, "ml") is None


async def test_a_burst_of_new_pods_makes_one_get_remembered_for_a_while() -> None:
    api = Api({CHAT_PATH: CHAT})
    api.release.clear()
    found, clock, results = lookup(api)
    burst = [
        asyncio.create_task(found.workload_of(pod_of(chat_pod(f"c{i}")), "ml")) for i in range(50)
    ]
    await asyncio.sleep(0)
    api.release.set()
    workloads = await asyncio.gather(*burst)
    assert {w.key if w else None for w in workloads} == {("Deployment", "ml", "chat")}
    assert api.gets == [CHAT_PATH]
    assert results == ["fetched"]
    assert await found.workload_of(pod_of(chat_pod("later")), "ml") is not None
    assert api.gets == [CHAT_PATH]
    clock.now += owner_lookup.REMEMBER_SECONDS
    assert await found.workload_of(pod_of(chat_pod("much-later")), "ml") is not None
    assert api.gets == [CHAT_PATH, CHAT_PATH]


async def test_the_live_cache_answers_without_a_get() -> None:
    api = Api({})
    chat = WorkloadInfo.from_json("Deployment", CHAT)
    found, _, results = lookup(api, live={chat.key: chat})
    assert await found.workload_of(pod_of(chat_pod()), "ml") == chat
    assert (api.gets, results) == ([], ["informer"])


async def test_no_such_workload_is_remembered_an_error_is_not() -> None:
    api = Api({})
    found, _, results = lookup(api)
    assert await found.workload_of(pod_of(chat_pod()), "ml") is None
    assert await found.workload_of(pod_of(chat_pod("again")), "ml") is None
    assert (len(api.gets), results) == (1, ["absent"])
    assert await found.workload_of(pod_of(chat_pod()), "gone") is None  # 404: no namespace
    failing = Api({CHAT_PATH: CHAT}, error=ServerError("etcd timeout", status=500))
    found, _, results = lookup(failing)
    assert await found.workload_of(pod_of(chat_pod()), "ml") is None
    failing.error = None
    assert await found.workload_of(pod_of(chat_pod("again")), "ml") is not None
    assert results == ["failed", "fetched"]


async def test_a_deployment_that_does_not_select_the_pod_or_carries_our_records_is_not_used() -> (
    None
):
    found, _, _ = lookup(Api({CHAT_PATH: CHAT}))
    other = {"app": "other", "pod-template-hash": HASH}
    assert await found.workload_of(pod_of(chat_pod(labels=other)), "ml") is None
    recorded = copy.deepcopy(CHAT)
    recorded["metadata"]["annotations"][names.SURGE_ANNOTATION] = "{}"
    found, _, results = lookup(Api({CHAT_PATH: recorded}))
    assert await found.workload_of(pod_of(chat_pod()), "ml") is None
    assert results == ["absent"]


async def test_at_most_a_few_gets_at_once() -> None:
    api = Api({})
    api.release.clear()
    found, _, results = lookup(api)

    def statefulset_pod(index: int) -> dict[str, Any]:
        owner = {"kind": "StatefulSet", "name": f"s{index}", "controller": True}
        return {"metadata": {"ownerReferences": [owner]}}

    waiting = [
        asyncio.create_task(found.workload_of(statefulset_pod(i), "ml"))
        for i in range(owner_lookup.MAX_IN_FLIGHT)
    ]
    await asyncio.sleep(0)
    assert await found.workload_of(pod_of(chat_pod()), "ml") is None
    assert results == ["busy"]
    api.release.set()
    await asyncio.gather(*waiting)
    assert len(api.gets) == owner_lookup.MAX_IN_FLIGHT


def webhook(api: Api, **kw: Any) -> tuple[PlacementWebhook, ControllerMetrics]:
    view = view_of(cluster({names.SPREAD: "zone"}))
    metrics = ControllerMetrics()
    found, _, _ = lookup(api)
    hook = PlacementWebhook(
        lambda: view, metrics=metrics, now=lambda: view.snapshot.now, log=structlog.get_logger(),
        lookup=found, **kw,
    )  # fmt: skip
    return hook, metrics


async def test_the_webhook_places_a_pod_whose_workload_its_view_lacks() -> None:
    view = view_of(cluster({names.SPREAD: "zone"}))
    assert review(chat_pod(), view, []).outcome == "unknown_workload"  # the view alone
    hook, metrics = webhook(Api({CHAT_PATH: CHAT}))
    answer = hook.answer(chat_pod(), unseen=await hook.unseen_owner(chat_pod()))
    added = patch_of(answer)[1]
    assert added["value"] == {names.PLACED: "spota/eastus-1"}  # chat's own first replica
    assert metrics.webhook_reviews.labels("placed")._value.get() == 1
    # A pod the view shows needs no lookup.
    assert await hook.unseen_owner(request("infer")) is None


@pytest.mark.looptime
async def test_a_lookup_that_does_not_answer_in_time_leaves_the_pod_unplaced() -> None:
    api = Api({CHAT_PATH: CHAT})
    api.release.clear()  # the API server never answers
    hook, metrics = webhook(api, lookup_timeout_seconds=0.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    unseen = await hook.unseen_owner(chat_pod())
    assert unseen is None
    assert loop.time() - started == pytest.approx(0.5)
    assert hook.answer(chat_pod(), unseen=unseen)["response"] == {"uid": "c1", "allowed": True}
    assert metrics.webhook_owner_lookups.labels("timeout")._value.get() == 1
    api.release.set()  # the GET left running finishes for the pods after it
    await asyncio.sleep(0.01)
    assert await hook.unseen_owner(chat_pod("c2")) is not None

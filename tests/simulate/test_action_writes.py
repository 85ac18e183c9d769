"""The simulator does to its objects what the executor's writes do to the API's, action by action.

For every action type: the real executor, through the real `Writer`, writes to a recording API
that serves the virtual object as the API would show it; the request it sends is applied to
that object by the cluster emulator's merge patch (the test bed's API server, a separate
implementation), and the result must equal the object after `rebalancer simulate` applied the
same action. A new action type fails `test_every_action_type_is_covered` until it has a case.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from rebalancer import names
from rebalancer.controller.actions import (
    ACTION_TYPES,
    Action,
    Bound,
    Cordon,
    Delete,
    EndCooldown,
    EndLoadHold,
    Evict,
    FinishReturn,
    ForgetReturn,
    ForgetSurge,
    Hold,
    MarkDrained,
    RecordHistory,
    RecordPolicy,
    Release,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    SetSpare,
    StartCooldown,
    StartReturn,
    WorkloadBasis,
)
from rebalancer.controller.executor import Executor, HistoryObject
from rebalancer.controller.history import Entry
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.records import ReturnRecord, Spare, Surge
from rebalancer.controller.seal import WORKLOAD_RECORDS, Sealer
from rebalancer.kube.errors import NotFound
from rebalancer.kube.writes import Writer
from rebalancer.retry import RetryPolicy
from rebalancer.simulate import adapter
from rebalancer.simulate.world import Pod, World
from rebalancer_sim.patch import merge_patch as api_server_merge
from tests.simulate.world_kit import GRACE, small_world, spot_node, spot_pod

SEALER = Sealer(b"k" * 32)
NS = adapter.NAMESPACE
DEPLOYMENT = "/apis/apps/v1/namespaces/inference/deployments/llm"
SURGE = Surge(2, 1, ("EVENT-1",), ("inference/llm-1",), "2024-01-01T00:00:40Z")
RETURN = ReturnRecord(2, "inference/llm-2", "spot1", "2024-01-01T00:00:00Z", ("llm-1", "llm-2"))


@dataclass
class Api:
    """Serves objects by path as the API would; records every write, answers it with {}."""

    objects: dict[str, dict[str, Any]]
    sent: list[tuple[str, str, Any]] = field(default_factory=list)

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method == "GET":
            if path not in self.objects:
                raise NotFound(path, status=404)
            return copy.deepcopy(self.objects[path])
        self.sent.append((method, path, copy.deepcopy(body)))
        return {}


def executor_writes(action: Action, objects: dict[str, dict[str, Any]]) -> list[Any]:
    api = Api(objects)

    async def no_wait(seconds: float) -> None:
        del seconds

    executor = Executor(
        Writer(cast(Any, api)),
        history=HistoryObject(NS, adapter.HISTORY_CONFIGMAP),
        policy=RetryPolicy(attempts=1),
        fence=lambda: True,
        sleep=no_wait,
        sealer=lambda: SEALER,
    )
    asyncio.run(executor.apply(action))
    return api.sent


def versioned(obj: dict[str, Any]) -> dict[str, Any]:
    served = copy.deepcopy(obj)
    served["metadata"]["resourceVersion"] = "7"
    return served


def unversioned(obj: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    result["metadata"].pop("resourceVersion", None)
    return result


# ---- node actions --------------------------------------------------------------------------


def cordoned(world: World) -> None:
    node = spot_node(world)
    node.unschedulable = True  # cordoned by an operator first: restore must keep it
    adapter.apply(world, Cordon(node.name, event_id="EVENT-1", event_type="Preempt"))


def drained(world: World) -> None:
    node = spot_node(world)
    node.annotations[names.DRAINED_FOR_ANNOTATION] = "EVENT-0"


def cooling(world: World) -> None:
    adapter.apply(
        world, StartCooldown(spot_node(world).name, until=datetime(2024, 1, 1, 1, tzinfo=UTC))
    )


def as_is(world: World) -> None:
    del world


NODE_CASES: dict[str, tuple[Callable[[World], None], Callable[[str], Action]]] = {
    "cordon": (as_is, lambda n: Cordon(n, event_id="EVENT-1", event_type="Preempt")),
    "cordon again": (cordoned, lambda n: Cordon(n, event_id="EVENT-1", event_type="Preempt")),
    "restore": (cordoned, lambda n: Restore(n, event_id="EVENT-1")),
    "restore, nothing of ours": (as_is, lambda n: Restore(n, event_id="EVENT-1")),
    "mark drained": (as_is, lambda n: MarkDrained(n, event_id="EVENT-1")),
    "mark drained, a second event": (drained, lambda n: MarkDrained(n, event_id="EVENT-1")),
    "start cool-down": (
        as_is,
        lambda n: StartCooldown(n, until=datetime(2024, 1, 1, 0, 30, tzinfo=UTC)),
    ),
    "end cool-down": (cooling, EndCooldown),
}


@pytest.mark.parametrize("case", NODE_CASES)
def test_a_node_action_does_what_its_patch_does(case: str) -> None:
    prepare, make = NODE_CASES[case]
    world = small_world()
    prepare(world)
    node = spot_node(world)
    before = adapter.node_object(node)
    action = make(node.name)
    sent = executor_writes(action, {f"/api/v1/nodes/{node.name}": versioned(before)})
    changed = adapter.apply(world, action)
    if not sent:
        assert not changed
        assert adapter.node_object(node) == before
        return
    [(method, path, patch)] = sent
    assert (method, path) == ("PATCH", f"/api/v1/nodes/{node.name}")
    expected = unversioned(api_server_merge(versioned(before), patch))
    assert adapter.node_object(node) == expected
    assert changed == (expected != before)


# ---- workload actions ----------------------------------------------------------------------


def with_surge(world: World) -> None:
    world.deployments["llm"].annotations[names.SURGE_ANNOTATION] = SURGE.to_json()
    world.deployments["llm"].replicas = 3


def with_return(world: World) -> None:
    world.deployments["llm"].annotations[names.RETURN_ANNOTATION] = RETURN.to_json()
    world.deployments["llm"].replicas = 3


def with_spare(world: World) -> None:
    world.deployments["llm"].annotations[names.SPARE_RECORD] = Spare(2, 1).to_json()
    world.deployments["llm"].replicas = 3


KEY = ("Deployment", NS, "llm")
WORKLOAD_CASES: dict[str, tuple[Callable[[World], None], Callable[[WorkloadBasis], Action]]] = {
    "scale up": (as_is, lambda b: ScaleUp(KEY, basis=b, replicas=3, record=SURGE, added=1)),
    "scale back": (with_surge, lambda b: ScaleBack(KEY, basis=b, replicas=2, record=None)),
    "scale back, record kept": (
        with_surge,
        lambda b: ScaleBack(KEY, basis=b, replicas=2, record=Surge(2, 1, (), (), None, True)),
    ),
    "forget surge": (with_surge, lambda b: ForgetSurge(KEY, basis=b)),
    "set spare": (as_is, lambda b: SetSpare(KEY, basis=b, replicas=3, record=Spare(2, 1))),
    "drop spare": (with_spare, lambda b: SetSpare(KEY, basis=b, replicas=2, record=None)),
    "record policy": (as_is, lambda b: RecordPolicy(KEY, basis=b, policy='{"maxRisk":"low"}')),
    "start return": (as_is, lambda b: StartReturn(KEY, basis=b, replicas=3, record=RETURN)),
    "finish return with back-off": (
        with_return,
        lambda b: FinishReturn(
            KEY, basis=b, replicas=2, backoff_until=datetime(2024, 1, 1, 2, tzinfo=UTC)
        ),
    ),
    "forget return": (with_return, lambda b: ForgetReturn(KEY, basis=b)),
}


def opened(obj: dict[str, Any]) -> dict[str, Any]:
    """The Deployment with our records' seals checked and taken off: the simulator trusts its
    own records (the controller's snapshot checks each seal, seal.py)."""
    result = copy.deepcopy(obj)
    identity = f"Deployment/{NS}/llm/"
    annotations = result["metadata"].get("annotations") or {}
    for key in WORKLOAD_RECORDS:
        if key in annotations:
            text = SEALER.open(identity, key, annotations[key])
            annotations[key] = json.loads(text) if text.startswith("{") else text
    return result


def records_as_data(obj: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    annotations = result["metadata"].get("annotations") or {}
    for key in WORKLOAD_RECORDS:
        if key in annotations and annotations[key].startswith("{"):
            annotations[key] = json.loads(annotations[key])
    return result


@pytest.mark.parametrize("case", WORKLOAD_CASES)
def test_a_workload_action_does_what_its_patch_does(case: str) -> None:
    prepare, make = WORKLOAD_CASES[case]
    world = small_world()
    prepare(world)
    deployment = world.deployments["llm"]
    before = adapter.deployment_object(world, deployment)
    action = make(WorkloadBasis.of(WorkloadInfo.from_json("Deployment", before)))
    sent = executor_writes(action, {DEPLOYMENT: versioned(before)})
    assert adapter.apply(world, action)
    [(method, path, patch)] = sent
    assert (method, path) == ("PATCH", DEPLOYMENT)
    expected = opened(unversioned(api_server_merge(versioned(before), patch)))
    assert records_as_data(adapter.deployment_object(world, deployment)) == expected


def test_a_workload_action_planned_from_an_older_deployment_is_written_by_neither() -> None:
    world = small_world()
    deployment = world.deployments["llm"]
    before = adapter.deployment_object(world, deployment)
    stale = WorkloadBasis.of(WorkloadInfo.from_json("Deployment", before))
    deployment.replicas = 5  # an HPA scaled it after the plan
    action = ScaleUp(KEY, basis=stale, replicas=3, record=SURGE, added=1)
    now = adapter.deployment_object(world, deployment)
    assert executor_writes(action, {DEPLOYMENT: versioned(now)}) == []
    assert not adapter.apply(world, action)
    assert adapter.deployment_object(world, deployment) == now


# ---- pod actions ---------------------------------------------------------------------------


def pod_path(pod: Pod) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{pod.name}"


@pytest.mark.parametrize(
    "make",
    [
        lambda pod: SetDeletionCost((NS, pod.name), "-100", save_original="5"),
        lambda pod: SetDeletionCost((NS, pod.name), "5", restore=True),
        lambda pod: SetDeletionCost((NS, pod.name), None),
        lambda pod: EndLoadHold((NS, pod.name)),
    ],
    ids=["lower, original saved", "restore", "remove", "load hold ended"],
)
def test_a_pod_patch_does_what_it_does(make: Callable[[Pod], Action]) -> None:
    world = small_world()
    pod = spot_pod(world)
    pod.deletion_cost, pod.original_cost = "5", "9"
    pod.annotations[names.PLACED] = "spot1/1"
    pod.annotations[names.KARPENTER_DO_NOT_DISRUPT] = "true"
    pod.annotations[names.HELD_UNTIL_READY] = "true"
    before = adapter.pod_object(pod)
    action = make(pod)
    [(method, path, patch)] = executor_writes(action, {})
    assert (method, path) == ("PATCH", pod_path(pod))
    assert adapter.apply(world, action)
    assert adapter.pod_object(pod) == api_server_merge(before, patch)


def ends_after(world: World, pod: Pod) -> list[float]:
    """When the world has the pod's end queued, seconds from now."""
    return [
        at - world.now
        for at, _, kind, name in world._queue
        if (kind, name) == ("pod_gone", pod.name)
    ]


@pytest.mark.parametrize("cut", [None, 7, -3])
def test_an_eviction_ends_the_pod_within_the_grace_its_body_carries(cut: int | None) -> None:
    world = small_world()
    pod = spot_pod(world)
    action = Evict((NS, pod.name), pod.uid, pod.node or "", "EVENT-1", grace_seconds=cut)
    [(method, path, body)] = executor_writes(action, {})
    assert (method, path) == ("POST", pod_path(pod) + "/eviction")
    assert adapter.apply(world, action)
    assert pod.deleting
    options = body["deleteOptions"]
    assert options["preconditions"] == {"uid": pod.uid}
    assert ends_after(world, pod) == [options.get("gracePeriodSeconds", GRACE)]


def test_a_deletion_ends_the_pod_within_the_grace_its_options_carry() -> None:
    world = small_world()
    pod = spot_pod(world)
    action = Delete((NS, pod.name), pod.uid, pod.node or "", "EVENT-1", grace_seconds=2)
    [(method, path, body)] = executor_writes(action, {})
    assert (method, path) == ("DELETE", pod_path(pod))
    assert adapter.apply(world, action)
    assert body["preconditions"] == {"uid": pod.uid}
    assert ends_after(world, pod) == [body["gracePeriodSeconds"]]


def test_a_deletion_shortens_the_grace_of_a_pod_already_terminating_and_never_lengthens_it() -> (
    None
):
    # The API server shortens a graceful deletion when a DELETE asks for less time; the planner
    # sends one at the deadline for a pod whose deletionTimestamp is past it.
    world = small_world()
    pod = spot_pod(world)
    evict = Evict((NS, pod.name), pod.uid, pod.node or "", "EVENT-1")
    assert adapter.apply(world, evict)
    [view] = [p for p in adapter.snapshot(world).pods.values() if p.name == pod.name]
    assert view.deleting
    assert view.deletion_at == adapter.at(world.now + GRACE)  # its deletionTimestamp
    world.now += 10
    longer = Delete((NS, pod.name), pod.uid, pod.node or "", "EVENT-1", grace_seconds=GRACE)
    assert not adapter.apply(world, longer)
    shorter = Delete((NS, pod.name), pod.uid, pod.node or "", "EVENT-1", grace_seconds=2)
    [(_, _, body)] = executor_writes(shorter, {})
    assert adapter.apply(world, shorter)
    assert min(ends_after(world, pod)) == body["gracePeriodSeconds"]
    [view] = [p for p in adapter.snapshot(world).pods.values() if p.name == pod.name]
    assert view.deletion_at == adapter.at(world.now + 2)


@pytest.mark.parametrize("kind", [Evict, Delete])
def test_a_pod_of_another_uid_under_the_same_name_is_not_touched(kind: type) -> None:
    world = small_world()
    pod = spot_pod(world)
    action = kind((NS, pod.name), "an-older-pod", pod.node or "", "EVENT-1", grace_seconds=2)
    assert executor_writes(action, {})[0][2]  # sent, with the UID precondition the API checks
    assert not adapter.apply(world, action)
    assert not pod.deleting


# ---- the rest ------------------------------------------------------------------------------


def test_the_history_is_read_back_from_the_configmap_the_executor_writes() -> None:
    world = small_world()
    adapter.snapshot(world)  # the controller starts its record
    assert world.history is not None
    entry = Entry(
        node="aks-spot1-000001", pool="spot1", zone="1", sku="a100", spot=True, event_id="EVENT-1",
        event_type="Preempt", first_seen=adapter.at(world.now),
    )  # fmt: skip
    history = world.history.with_entries([entry], now=adapter.at(world.now))
    action = RecordHistory(history, (entry,))
    [(method, _, body)] = executor_writes(action, {})
    assert method == "POST"
    assert not adapter.apply(world, action)  # nothing a pod or node sees
    assert world.history.to_json() == body["data"][names.HISTORY_KEY]
    assert world.history.entries == history.entries


# Writes to objects the virtual cluster does not have: no other evictor heeds a hold, no HPA.
NOT_IN_THE_WORLD: dict[type, Action] = {
    Hold: Hold(NS, "llm", {"matchLabels": {"app": "llm"}}),
    Release: Release(NS, "spot-rebalancer-hold-llm"),
    Bound: Bound(NS, "llm", 3, 6, "2,6", basis=(2, 6, None)),
    ReportBlocked: ReportBlocked(KEY, "no on-demand pool"),
}


@pytest.mark.parametrize("kind", NOT_IN_THE_WORLD, ids=lambda k: k.__name__)
def test_writes_to_objects_the_world_has_not_change_nothing_in_it(kind: type) -> None:
    world = small_world()
    version = world.version
    assert not adapter.apply(world, NOT_IN_THE_WORLD[kind])
    assert world.version == version


def test_every_action_type_is_covered() -> None:
    covered = {type(make("n")) for _, make in NODE_CASES.values()}
    basis = WorkloadBasis(replicas=2, surge=None, return_record=None)
    covered |= {type(make(basis)) for _, make in WORKLOAD_CASES.values()}
    covered |= {SetDeletionCost, EndLoadHold, Evict, Delete, RecordHistory, *NOT_IN_THE_WORLD}
    assert covered == set(ACTION_TYPES)

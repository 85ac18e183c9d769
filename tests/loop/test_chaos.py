"""Chaos: the controller killed at 20 points of an eviction, of a cancelled eviction and of a
return to spot, each time followed by a new controller, with the invariants checked after each.

A kill is SIGKILL as the API server sees it (tests/fakes/api.py `Killable`): it lands right after
one of the controller's writes has been applied (the k-th, k drawn from all the writes the
scenario makes without a kill), and nothing the process sends afterwards arrives: no Lease
release, no queued Event. The next controller has to wait for the Lease to expire, and must
finish the job from what is on the cluster alone.

Each run proves its kill happened, at the write it was meant for. Throughout each run (after
every write and every step of the world, the moment of the kill included) the owner keeps
N - 1 Ready replicas at least, N its replicas before the notice; at the end nothing of ours is
left: no hold PodDisruptionBudget, no lowered pod-deletion-cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rebalancer import names
from tests.fakes.api import FakeApi, Killable, Write
from tests.loop.rig import (
    annotations,
    cancel,
    cluster,
    node,
    preempt,
    replicas,
    running,
    until,
)
from tests.loop.world import World

pytestmark = pytest.mark.looptime

KILLS = 20
FAST_LEASE = {
    "lease_duration_seconds": 4.0,
    "renew_deadline_seconds": 3.0,
    "retry_period_seconds": 1.0,
    "cooldown_seconds": 5.0,
    "return_quiet_seconds": 20.0,
}
OURS = (
    names.CORDONED_FOR,
    names.WAS_UNSCHEDULABLE,
    names.ADDED_LB_EXCLUSION,
    names.DRAINED_FOR_ANNOTATION,
)


def controller(client: Any, identity: str, **overrides: Any) -> Any:
    return running(client, identity, **FAST_LEASE, **overrides)


@dataclass
class Run:
    api: FakeApi
    writes: list[Write] = field(default_factory=list)
    base_replicas: int = 0  # the owner's replicas before the notice (N)
    killed_after: int | None = None  # writes applied when the kill landed
    ready_at_kill: int | None = None
    fewest_ready: int | None = None  # Ready replicas, fewest seen after any write or world step


async def play(
    scenario: Callable[[FakeApi, World], Awaitable[None]], kill_after: int | None, **overrides: Any
) -> Run:
    """The scenario, with the first controller killed after its `kill_after`-th write (None:
    never); a second controller (a new process) takes over as soon as the first is dead."""
    api = cluster()
    run = Run(api, base_replicas=replicas(api))
    first = Killable(api)
    killed = asyncio.Event()

    def count_ready() -> None:
        ready = len(world.ready_pods())
        run.fewest_ready = ready if run.fewest_ready is None else min(run.fewest_ready, ready)

    world = World(api, after_step=count_ready)

    def maybe_kill(write: Write) -> None:
        count_ready()
        if kill_after is not None and not first.dead and len(api.writes) >= kill_after:
            first.kill()
            run.killed_after = len(api.writes)
            run.ready_at_kill = len(world.ready_pods())
            killed.set()

    api.after_write = maybe_kill
    playing = asyncio.create_task(world.run())
    try:
        async with controller(first, "ctl-a", **overrides):
            driving = asyncio.create_task(scenario(api, world))
            if kill_after is None:
                await driving
            else:
                waiting = asyncio.ensure_future(killed.wait())
                await asyncio.wait({driving, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()  # the kill may never come: the assertions say so, not a leak
                if killed.is_set():
                    async with controller(Killable(api), "ctl-b", **overrides):
                        await driving
                else:
                    await driving
    finally:
        playing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await playing
    run.writes = list(api.writes)
    return run


def kill_points(total: int, seed: int) -> list[int]:
    return sorted(random.Random(seed).sample(range(1, total + 1), min(KILLS, total)))


def most_replicas(writes: list[Write]) -> int:
    counts = [
        int((w.body.get("spec") or {}).get("replicas"))
        for w in writes
        if w.resource == "deployments"
        and w.status < 300
        and (w.body.get("spec") or {}).get("replicas")
    ]
    return max(counts, default=3)


# ---- scenarios -------------------------------------------------------------------------------


async def an_eviction(api: FakeApi, world: World) -> None:
    await until(lambda: api.written("POST", "leases"), within=10, what="a leader")
    world.deadlines["spot-0"] = preempt(api, "spot-0", seconds=30)
    await until(lambda: ("nodes", "", "spot-0") not in api.objects, within=40, what="the VM gone")
    await until(
        lambda: replicas(api) == 3 and len(world.ready_pods()) == 3
        and names.SURGE_ANNOTATION not in annotations(api, "deployments", "ml", "llm"),
        within=40, what="settled after the eviction",
    )  # fmt: skip


async def a_cancelled_eviction(api: FakeApi, world: World) -> None:
    await until(lambda: api.written("POST", "leases"), within=10, what="a leader")
    preempt(api, "spot-0", seconds=30)
    await asyncio.sleep(12)  # the replacement loaded (10 s), costs lowered, maybe scaled back
    cancel(api, "spot-0")
    await until(
        lambda: replicas(api) == 3
        and not any(k in annotations(api, "nodes", "", "spot-0") for k in OURS)
        and names.SURGE_ANNOTATION not in annotations(api, "deployments", "ml", "llm"),
        within=40, what="everything undone",
    )  # fmt: skip
    await asyncio.sleep(10)  # the cool-down ends, nothing more to do


async def a_return(api: FakeApi, world: World) -> None:
    await until(lambda: api.written("POST", "leases"), within=10, what="a leader")
    world.deadlines["spot-0"] = preempt(api, "spot-0", seconds=30)
    await until(lambda: ("nodes", "", "spot-0") not in api.objects, within=40, what="the VM gone")
    api.put_object("nodes", node("spot-3", "gpuspot", spot=True))  # spot capacity is back
    await until(
        lambda: on_demand(api) == 0 and replicas(api) == 3 and len(world.ready_pods()) == 3
        and names.RETURN_ANNOTATION not in annotations(api, "deployments", "ml", "llm"),
        within=120, what="the replicas back on spot",
    )  # fmt: skip


def on_demand(api: FakeApi) -> int:
    pods = [o for (r, ns, _), o in api.objects.items() if r == "pods" and ns == "ml"]
    return sum(1 for p in pods if p["spec"]["nodeName"].startswith("od-"))


# ---- the invariants ----------------------------------------------------------------------------


def no_double_surge(writes: list[Write]) -> None:
    assert most_replicas(writes) <= 4, "a workload went above its base replicas plus one"


def nothing_of_ours_left(api: FakeApi) -> list[str]:
    """Hold PodDisruptionBudgets, and pods whose deletion cost we lowered (the scenario's pods
    have none of their own), still there once the notice is handled."""
    left = []
    for (resource, namespace, name), obj in api.objects.items():
        meta = obj["metadata"]
        ours = (meta.get("labels") or {}).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY
        if resource == "poddisruptionbudgets" and ours:
            left.append(f"hold {namespace}/{name}")
        marks = {names.DELETION_COST, names.ORIGINAL_COST_ANNOTATION}
        if resource == "pods" and marks & set(meta.get("annotations") or {}):
            left.append(f"lowered cost on {namespace}/{name}")
    return left


def kept_safe(run: Run, where: str) -> None:
    """At least N - 1 Ready throughout (the kill's moment included), nothing of ours left."""
    assert run.base_replicas == 3, "the scenario's owner has 3 replicas"
    assert run.fewest_ready is not None and run.fewest_ready >= run.base_replicas - 1, (
        f"{where}: {run.fewest_ready} Ready at one point, fewer than N - 1 = {run.base_replicas - 1}"
    )
    assert nothing_of_ours_left(run.api) == [], where


@pytest.mark.parametrize(
    ("name", "scenario", "seed"),
    [("eviction", an_eviction, 1), ("cancelled", a_cancelled_eviction, 2), ("return", a_return, 3)],
)
async def test_killed_at_twenty_points_a_new_controller_finishes_cleanly(
    name: str, scenario: Callable[[FakeApi, World], Awaitable[None]], seed: int
) -> None:
    # Returns only where the scenario is one: elsewhere the quiet pool would start one.
    options = {"return_enabled": name == "return"}
    undisturbed = await play(scenario, None, **options)
    kept_safe(undisturbed, "without a kill")
    points = kill_points(len(undisturbed.writes), seed)
    assert len(points) == KILLS
    kills = 0
    for point in points:
        run = await play(scenario, point, **options)
        api, writes = run.api, run.writes
        assert run.killed_after == point, f"meant to kill after write {point}: {run.killed_after}"
        assert run.ready_at_kill is not None and run.ready_at_kill >= run.base_replicas - 1, (
            f"killed after write {point} with {run.ready_at_kill} Ready"
        )
        kills += 1
        kept_safe(run, f"killed after write {point}")
        no_double_surge(writes)
        assert replicas(api) == 3, f"killed after write {point}: not back at base replicas"
        if name == "eviction":
            marks = [
                w
                for w in writes
                if w.name == "spot-0" and names.DRAINED_FOR_ANNOTATION in str(w.body)
            ]
            assert marks and marks[0].status < 300, (
                f"killed after write {point}: never marked drained"
            )
        if name == "cancelled":
            node_now = api.get("nodes", "", "spot-0")
            assert not any(k in annotations(api, "nodes", "", "spot-0") for k in OURS)
            assert not node_now["spec"].get("unschedulable")
            assert [t["key"] for t in node_now["spec"]["taints"]] == [
                "kubernetes.azure.com/scalesetpriority"
            ]
            assert names.LB_EXCLUSION_LABEL not in node_now["metadata"]["labels"]
        if name == "return":
            assert on_demand(api) == 0
    assert kills == KILLS

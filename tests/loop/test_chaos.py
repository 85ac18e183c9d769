"""Chaos: the controller killed at 20 points of an eviction, of a cancelled eviction and of a
return to spot, each time followed by a new controller, with the invariants checked after each.

A kill is SIGKILL as the API server sees it (tests/fakes/api.py `Killable`): it lands right after
one of the controller's writes has been applied (the k-th, k drawn from all the writes the
scenario makes without a kill), and nothing the process sends afterwards arrives: no Lease
release, no queued Event. The next controller has to wait for the Lease to expire, and must
finish the job from what is on the cluster alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
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


async def play(
    scenario: Callable[[FakeApi, World], Awaitable[None]], kill_after: int | None, **overrides: Any
) -> tuple[FakeApi, list[Write]]:
    """The scenario, with the first controller killed after its `kill_after`-th write (None:
    never); a second controller (a new process) takes over as soon as the first is dead."""
    api = cluster()
    world = World(api)
    first = Killable(api)
    killed = asyncio.Event()

    def maybe_kill(write: Write) -> None:
        if kill_after is not None and not first.dead and len(api.writes) >= kill_after:
            first.kill()
            killed.set()

    api.after_write = maybe_kill
    playing = asyncio.create_task(world.run())
    try:
        async with controller(first, "ctl-a", **overrides):
            driving = asyncio.create_task(scenario(api, world))
            if kill_after is None:
                await driving
            else:
                await asyncio.wait({driving, asyncio.ensure_future(killed.wait())},
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if killed.is_set():
                    async with controller(Killable(api), "ctl-b", **overrides):
                        await driving
                else:
                    await driving
    finally:
        playing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await playing
    return api, list(api.writes)


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


@pytest.mark.parametrize(
    ("name", "scenario", "seed"),
    [("eviction", an_eviction, 1), ("cancelled", a_cancelled_eviction, 2), ("return", a_return, 3)],
)
async def test_killed_at_twenty_points_a_new_controller_finishes_cleanly(
    name: str, scenario: Callable[[FakeApi, World], Awaitable[None]], seed: int
) -> None:
    # Returns only where the scenario is one: elsewhere the quiet pool would start one.
    options = {"return_enabled": name == "return"}
    _, undisturbed = await play(scenario, None, **options)
    points = kill_points(len(undisturbed), seed)
    assert len(points) == KILLS
    for point in points:
        api, writes = await play(scenario, point, **options)
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
            leftovers = [
                p["metadata"]["name"] for (r, ns, _), p in api.objects.items()
                if r == "pods" and names.ORIGINAL_COST_ANNOTATION in (p["metadata"].get("annotations") or {})
            ]  # fmt: skip
            assert leftovers == [], f"killed after write {point}: costs left lowered on {leftovers}"
        if name == "return":
            assert on_demand(api) == 0

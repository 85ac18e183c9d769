"""Chaos: the controller killed after each of its decisions (20 of them at most) in an eviction,
a cancelled eviction and a return to spot, each time followed by a new controller, with the
invariants checked after each.

On the emulator on virtual time. A kill is SIGKILL as the API server sees it: it lands right
after one of the first controller's writes has been applied (the k-th of its decisions: its
writes but Lease renewals and Events, k from the writes it makes in the same scenario without a
kill), and from then on nothing that controller sends is
applied: no Lease release, no queued Event. The next controller has to wait for the Lease to
expire, and must finish the job from what is on the cluster alone.

Each run proves its kill happened at the write it was meant for. Throughout each run (every
20 ms and at every write of either controller, the moment of the kill included) the owner keeps
N - 1 Ready replicas at least, N its replicas before the notice; at the end nothing of ours is
left: no hold PodDisruptionBudget, no lowered pod-deletion-cost, no surge or return record.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rebalancer import names
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from tests.e2e.rig import sampling, scenario
from tests.tap import Request, Tap
from tests.virtual.rig import VirtualRig, running

pytestmark = pytest.mark.looptime

KILLS = 20
LLM = ("inference", "llm")
FAST_LEASE = {
    "REBALANCER_LEASE_DURATION_SECONDS": "4",
    "REBALANCER_RENEW_DEADLINE_SECONDS": "3",
    "REBALANCER_RETRY_PERIOD_SECONDS": "1",
    "REBALANCER_COOLDOWN_SECONDS": "5",
    "REBALANCER_RETURN_QUIET_SECONDS": "20",
}
OURS = (
    names.CORDONED_FOR,
    names.WAS_UNSCHEDULABLE,
    names.ADDED_LB_EXCLUSION,
    names.DRAINED_FOR_ANNOTATION,
)


@dataclass
class Chaos:
    """The API server's view of two controller processes: every write they make, and the kill."""

    kill_after: int | None  # the first controller's writes applied when it is killed
    rig: VirtualRig | None = None
    writes: list[Request] = field(default_factory=list)
    killed_after: int | None = None
    ready_at_kill: int | None = None
    fewest_ready: int | None = None
    left: list[str] = field(default_factory=list)  # of ours, at the end
    counting: bool = False  # during the scenario: the cluster is Ready before it
    on_kill: Callable[[], None] = lambda: None  # the next process starts

    def note_ready(self) -> None:
        if self.rig is not None:
            ready = self.rig.ready_count()
            self.fewest_ready = (
                ready if self.fewest_ready is None else min(self.fewest_ready, ready)
            )

    def first_writes(self) -> int:
        """The first controller's decisions: its writes but its Lease's and its Events' (renewals
        come with time, Events are sent by a queue of their own and merged when repeated: how
        many there are varies with a run's timing, not with what it decides)."""
        return sum(1 for w in self.writes if w.who == "ctl-a" and decision(w.path))

    def prepare(self, cluster: ClusterEmulator) -> None:
        """Tap the emulator's API server (before it serves): a dead process is unreachable."""
        tap = Tap(reads=False)
        tap.cut = lambda request: request.who == "ctl-a" and self.killed_after is not None
        tap.after_write = self.written
        tap.install(cluster)

    def written(self, write: Request) -> None:
        """A controller's write answered (before the answer leaves): the kill lands here."""
        if not write.who.startswith("ctl-") or not self.counting:
            return
        self.writes.append(write)
        self.note_ready()
        if (
            write.who == "ctl-a"
            and self.kill_after is not None
            and (self.first_writes() >= self.kill_after)
        ):
            self.killed_after = self.first_writes()
            self.ready_at_kill = self.rig.ready_count() if self.rig else None
            self.on_kill()


Scenario = Callable[[VirtualRig], Awaitable[None]]


def decision(path: str) -> bool:
    return "/leases" not in path and "/events" not in path


def deployment_annotations(rig: VirtualRig) -> dict[str, str]:
    return dict(rig.deployment()["metadata"].get("annotations") or {})


def on_demand(rig: VirtualRig) -> int:
    return sum(1 for p in rig.pods() if rig.pool_of(p["spec"].get("nodeName", "")) == "gpuondemand")


async def settled(rig: VirtualRig, what: str, *, within: float = 60) -> None:
    await rig.wait_for(
        lambda: (
            rig.deployment()["spec"]["replicas"] == 3
            and rig.ready_count() == 3
            and names.SURGE_ANNOTATION not in deployment_annotations(rig)
            and names.RETURN_ANNOTATION not in deployment_annotations(rig)
        ),
        timeout=within,
        what=what,
    )


def cooling(rig: VirtualRig) -> bool:
    return any(
        names.COOLDOWN_UNTIL in ((rig.node(n) or {}).get("metadata", {}).get("annotations") or {})
        for n in rig.spot_nodes()
    )


async def an_eviction(rig: VirtualRig) -> None:
    doomed = rig.spot_nodes()[0]
    event = rig.cluster.preempt(doomed, notice_seconds=30)
    await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
    # Acknowledged by the agent, which it does only once the node is marked drained.
    assert rig.cluster.imds.events[event.event_id].acknowledged_by, "never marked drained"
    await settled(rig, "settled after the eviction")
    await rig.wait_for(lambda: not cooling(rig), timeout=30, what="the cool-down over")


async def a_cancelled_eviction(rig: VirtualRig) -> None:
    doomed = rig.spot_nodes()[0]
    event = rig.cluster.preempt(doomed, notice_seconds=30)
    await asyncio.sleep(12)  # the replacement loaded (3 s), costs lowered, maybe scaled back
    assert rig.cluster.imds.cancel(event.event_id)
    await settled(rig, "everything undone")
    await rig.wait_for(
        lambda: (
            not any(
                k in ((rig.node(doomed) or {}).get("metadata", {}).get("annotations") or {})
                for k in OURS
            )
        ),
        timeout=20,
        what="the node restored",
    )
    node = rig.node(doomed)
    assert node is not None and not node["spec"].get("unschedulable")
    assert names.EVICTING_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
    assert names.LB_EXCLUSION_LABEL not in node["metadata"]["labels"]


async def a_return(rig: VirtualRig) -> None:
    doomed = rig.spot_nodes()[0]
    rig.cluster.preempt(doomed, notice_seconds=30)
    await rig.wait_for(lambda: rig.node(doomed) is None, timeout=40, what="the VM gone")
    await rig.wait_for(lambda: on_demand(rig) == 1, timeout=20, what="the fail-over")
    rig.cluster.cloud.create_vm("gpuspot", delay_seconds=1)  # spot capacity is back
    await rig.wait_for(lambda: on_demand(rig) == 0, timeout=120, what="the replica back on spot")
    await settled(rig, "settled on spot")


async def play(
    tmp_path: Path,
    scenario_run: Scenario,
    kill_after: int | None,
    agent_env: dict[str, str],
    **env: str,
) -> Chaos:
    """The scenario with the first controller killed after its `kill_after`-th write (None:
    never); a second controller (a new process) starts as soon as the first is dead."""
    chaos = Chaos(kill_after)
    tmp_path.mkdir(parents=True)  # noqa: ASYNC240  (before anything runs)
    data = scenario()
    data["settings"] = {**data["settings"], "nodeProblemDetectorSeconds": 1}
    async with running(tmp_path, data, prepare=chaos.prepare) as rig:
        chaos.rig = rig
        chaos.on_kill = lambda: rig.start_controller("ctl-b", **FAST_LEASE, **env)
        rig.start_agents(**agent_env)
        rig.start_controller("ctl-a", **FAST_LEASE, **env)
        await rig.until_ready()
        chaos.counting = True
        async with sampling(rig):
            await scenario_run(rig)
        chaos.counting = False  # a stop's writes (the Lease released) are not the scenario's
        chaos.note_ready()
        chaos.fewest_ready = min(chaos.fewest_ready or 3, rig.min_ready[LLM])
        chaos.left = nothing_of_ours_left(rig)
    return chaos


def nothing_of_ours_left(rig: VirtualRig) -> list[str]:
    left = []
    for pdb in rig.cluster.store.items(R.PDBS):
        if (pdb["metadata"].get("labels") or {}).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY:
            left.append(f"hold {pdb['metadata']['namespace']}/{pdb['metadata']['name']}")
    marks = {names.DELETION_COST, names.ORIGINAL_COST_ANNOTATION}
    for pod in rig.pods():
        if marks & set(pod["metadata"].get("annotations") or {}):
            left.append(f"lowered cost on {pod['metadata']['name']}")
    return left


def kill_points(total: int, seed: int) -> list[int]:
    return sorted(random.Random(seed).sample(range(1, total + 1), min(KILLS, total)))


def most_replicas(writes: list[Request]) -> int:
    counts = [
        int((w.body or {}).get("spec", {}).get("replicas") or 0)
        for w in writes
        if "/deployments/" in w.path and isinstance(w.body, dict)
    ]
    return max(counts, default=3)


def kept_safe(chaos: Chaos, where: str) -> None:
    """At least N - 1 Ready throughout (the kill's moment included), nothing of ours left."""
    assert chaos.fewest_ready is not None and chaos.fewest_ready >= 2, (
        f"{where}: {chaos.fewest_ready} Ready at one point, fewer than N - 1 = 2"
    )
    assert chaos.left == [], where
    assert most_replicas(chaos.writes) <= 4, f"{where}: above its base replicas plus one"


@pytest.mark.parametrize(
    ("name", "scenario_run", "seed"),
    [("eviction", an_eviction, 1), ("cancelled", a_cancelled_eviction, 2), ("return", a_return, 3)],
)
async def test_killed_at_twenty_points_a_new_controller_finishes_cleanly(
    tmp_path: Path, name: str, scenario_run: Scenario, seed: int
) -> None:
    # Returns only where the scenario is one: elsewhere the quiet pool would start one.
    env = {"REBALANCER_RETURN_ENABLED": "true" if name == "return" else "false"}
    # A cancellation needs an event not yet started: drained, it is not acknowledged to Azure.
    agents = {"REBALANCER_ACK_ENABLED": "false" if name == "cancelled" else "true"}
    # Two runs without a kill: how many decisions a run makes varies a little with timing (a
    # cool-down written again a moment later, say), and every kill point must be reached.
    totals = []
    for attempt in range(2):
        undisturbed = await play(
            tmp_path / f"undisturbed-{attempt}", scenario_run, None, agents, **env
        )
        kept_safe(undisturbed, "without a kill")
        totals.append(undisturbed.first_writes())
    total = min(totals)
    assert total >= 10, f"only {total} writes: the scenario did not play out"
    points = kill_points(total, seed)  # every one of them, up to KILLS
    for point in points:
        # A run that makes fewer writes than this one (the variation above, on a loaded
        # machine) never reaches the kill: it is kept safe all the same, and played again.
        for attempt in range(3):
            chaos = await play(
                tmp_path / f"kill-{point}-{attempt}", scenario_run, point, agents, **env
            )
            if chaos.killed_after == point:
                break
            kept_safe(chaos, f"meant to kill after write {point}, not reached")
        assert chaos.killed_after == point, f"meant to kill after write {point}: not reached"
        assert chaos.ready_at_kill is not None and chaos.ready_at_kill >= 2, (
            f"killed after write {point} with {chaos.ready_at_kill} Ready"
        )
        kept_safe(chaos, f"killed after write {point}")

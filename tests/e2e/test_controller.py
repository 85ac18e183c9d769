"""What only processes prove about the controller: real agent and controller processes on the
cluster emulator, one killed (SIGKILL: its lease is never released) or paused (SIGSTOP: it
must write nothing once its lease may have expired). A notice's life otherwise is in
tests/virtual/test_controller.py, on virtual time.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.e2e.rig import Rig, running, sampling, scenario

pytestmark = pytest.mark.e2e


def _deadline_of(rig: Rig, event_id: str) -> float:
    return rig.cluster.imds.events[event_id].not_before.timestamp()


FAST_LEASE = {
    "REBALANCER_LEASE_DURATION_SECONDS": "4",
    "REBALANCER_RENEW_DEADLINE_SECONDS": "3",
    "REBALANCER_RETRY_PERIOD_SECONDS": "1",
}


async def test_the_other_replica_finishes_when_the_leader_dies_mid_drain(tmp_path: Path) -> None:
    data = scenario()
    data["workloads"][0]["startupSeconds"] = 8  # the surge is still loading when the leader dies
    async with running(tmp_path, data) as rig:
        rig.start_agents()
        rig.start_controller("controller-a", **FAST_LEASE)
        rig.start_controller("controller-b", **FAST_LEASE)
        await rig.until_ready()
        leader = await rig.wait_for_leader(["controller-a", "controller-b"])
        follower = "controller-b" if leader == "controller-a" else "controller-a"
        doomed = rig.spot_nodes()[0]
        async with sampling(rig):
            event = rig.cluster.preempt(doomed, notice_seconds=40)
            deadline = _deadline_of(rig, event.event_id)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
            )
            rig.stop(leader, signal.SIGKILL)  # no release: the lease must expire
            killed = time.monotonic()
            await rig.wait_for_metric(follower, "rebalancer_controller_leader", 1, timeout=10)
            takeover = time.monotonic() - killed
            await rig.wait_for(lambda: rig.drained_for(doomed), timeout=30, what="the node drained")
            assert time.time() < deadline
            await rig.wait_for(lambda: rig.node(doomed) is None, timeout=20, what="the VM gone")
            await rig.wait_for(lambda: rig.ready_count() == 3, timeout=10, what="3 Ready")
        assert takeover < 4 + 2, f"the follower took {takeover:.1f}s to lead (lease 4 s)"
        assert rig.deployment()["spec"]["replicas"] == 3
        assert rig.max_replicas[("inference", "llm")] == 4, "surged twice"
        # The killed leader's Surge Event may be lost with it (SIGKILL: nothing is flushed).
        assert len(rig.events("SpotRebalancerSurge")) <= 1
        assert rig.min_ready[("inference", "llm")] == 3


async def test_a_paused_leader_writes_nothing_after_its_lease_may_have_expired(
    tmp_path: Path,
) -> None:
    """The leader is stopped (SIGSTOP) for twice its lease while a Preempt comes; the other
    replica takes over and fails over. Resumed, the old leader must write nothing at all: every
    write the API server receives is audited by the identity in its User-Agent."""
    writes: list[tuple[float, str, str, str]] = []

    def audit(cluster: Any) -> None:
        handle = cluster.api._handle

        async def recorded(request: web.Request) -> web.StreamResponse:
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                agent = request.headers.get("User-Agent", "")
                writes.append((time.monotonic(), request.method, request.path, agent))
            return await handle(request)

        cluster.api._handle = recorded

    async with running(tmp_path, prepare=audit) as rig:
        rig.start_agents()
        rig.start_controller("controller-a", **FAST_LEASE)
        rig.start_controller("controller-b", **FAST_LEASE)
        await rig.until_ready()
        leader = await rig.wait_for_leader(["controller-a", "controller-b"])
        follower = "controller-b" if leader == "controller-a" else "controller-a"
        doomed = rig.spot_nodes()[0]
        async with sampling(rig):
            rig.processes[leader].send_signal(signal.SIGSTOP)
            paused = time.monotonic()
            await rig.wait_for_metric(follower, "rebalancer_controller_leader", 1, timeout=10)
            rig.cluster.preempt(doomed, notice_seconds=30)
            await rig.wait_for(
                lambda: rig.deployment()["spec"]["replicas"] == 4, timeout=10, what="the surge"
            )
            await asyncio.sleep(max(0.0, paused + 8 - time.monotonic()))  # twice the lease
            rig.processes[leader].send_signal(signal.SIGCONT)
            resumed = time.monotonic()
            await rig.wait_for(lambda: rig.drained_for(doomed), timeout=30, what="the node drained")
            await asyncio.sleep(max(0.0, resumed + 5 - time.monotonic()))  # time to misbehave
        # A stopped process sends nothing: a write the API server took between SIGSTOP and
        # SIGCONT left before the pause (in flight while this loop sent the signal).
        by_old_leader = [w for w in writes if f"; {leader})" in w[3] and w[0] >= resumed]
        assert by_old_leader == [], f"the paused leader wrote after it resumed: {by_old_leader}"
        assert any(f"; {follower})" in w[3] for w in writes), "writes are not attributed"
        assert rig.max_replicas[("inference", "llm")] == 4, "surged twice"
        assert "stopped leading" in rig.log(leader)

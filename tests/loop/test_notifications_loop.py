"""What the recorder hands the notifier, with the real controller loop on the emulator (virtual
time): a notice acted on, a blocked fail-over and a missed deadline, each once though the loop
sees them pass after pass. (Sending them: tests/unit/test_notify.py, tests/e2e.)"""

from __future__ import annotations

import asyncio

import pytest

from rebalancer.controller.messages import Kind, Notification
from tests.loop.rig import (
    EVENT,
    azure_takes,
    cluster,
    preempt,
    running,
    until,
    vm_goes_at_cordon,
)

pytestmark = pytest.mark.looptime


async def test_a_notice_and_its_missed_deadline_are_told_once() -> None:
    offered: list[Notification] = []
    async with cluster() as em, running(em) as controller:
        controller.recorder._notify = offered.append  # before its first pass
        await until(lambda: controller.elector.is_leader, within=10, what="leading")

        # The VM goes the moment the node is cordoned: 3 s were never enough to drain it.
        vm_goes_at_cordon(em, "spot-0")
        preempt(em, "spot-0", seconds=3)
        await until(
            lambda: any(n.kind is Kind.DEADLINE_MISSED for n in offered), within=5, what="missed"
        )
        await asyncio.sleep(5)  # five passes and more: nothing said twice
    notice, missed = offered
    assert notice.kind is Kind.NOTICE and notice.key == (Kind.NOTICE, "spot-0", EVENT)
    assert notice.facts["pool"] == "gpuspot" and notice.facts["event type"] == "Preempt"
    assert missed.key == (Kind.DEADLINE_MISSED, "spot-0", EVENT)
    assert missed.facts["why"] == "late_notice" and missed.warning


async def test_a_blocked_failover_is_told_once_per_workload_and_cause() -> None:
    offered: list[Notification] = []
    async with cluster() as em:
        for name in ("od-0", "od-1"):  # no on-demand pool left to fail over to
            azure_takes(em, name)
        async with running(em) as controller:
            controller.recorder._notify = offered.append
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=60)
            await until(
                lambda: any(n.kind is Kind.FAILOVER_BLOCKED for n in offered),
                within=5,
                what="the blocked fail-over told",
            )
            await asyncio.sleep(5)
    blocked = [n for n in offered if n.kind is Kind.FAILOVER_BLOCKED]
    assert len(blocked) == 1
    assert blocked[0].facts["workload"] == "Deployment/ml/llm" and blocked[0].warning
    assert [n.kind for n in offered].count(Kind.NOTICE) == 1

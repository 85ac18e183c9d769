"""Fencing at send time: a leader whose writes wait in its request budget sends none of them
once it may have lost the Lease.

The whole controller runs against the emulator on virtual time with a slow budget (2 requests a
second, no burst), so a drain of 24 pods queues its evictions for 12 s. Then the leader's Lease
renewals stop getting through (a cut to the API server that only its renewals meet, the way a
paused process or a stuck connection looks from outside: the tap answers them 503), another
replica takes the Lease when it expires, and every write the first leader made is checked
against two moments the test reads from the API server alone (the tap): the renew deadline
after its last successful renewal, and the moment the other replica acquired the Lease.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rebalancer.kube.leader import LeaderElector
from rebalancer.vocabulary import Rejection
from tests.loop.emulated import connect
from tests.loop.rig import CLOCK, NAMESPACE, Emulated, cluster, preempt, running, until

pytestmark = pytest.mark.looptime

LEASE = {"lease_duration_seconds": 4.0, "renew_deadline_seconds": 3.0, "retry_period_seconds": 1.0}
PODS = 24


def stateful_pod(index: int) -> dict[str, Any]:
    """A pod of a StatefulSet the controller does not surge: drained by eviction at once."""
    return {
        "metadata": {
            "namespace": "cache",
            "name": f"cache-{index}",
            "annotations": {},
            "ownerReferences": [{"kind": "StatefulSet", "name": "cache", "controller": True}],
        },
        "spec": {
            "nodeName": "spot-0",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def lease_holder(em: Emulated) -> str:
    lease = em.find("leases", NAMESPACE, "ctl")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def test_writes_queued_behind_the_budget_are_not_sent_once_the_lease_may_be_lost() -> None:
    cut = False
    async with cluster() as em:
        for index in range(PODS):
            em.put("pods", stateful_pod(index))
        em.tap.cut = lambda request: cut and request.who == "ctl-a" and "/leases" in request.path
        other_client = await connect(em, "ctl-b")
        other = LeaderElector(
            other_client,
            namespace=NAMESPACE, name="ctl", identity="ctl-b", clock=CLOCK,
            lease_duration=4.0, renew_deadline=3.0, retry_period=1.0,
        )  # fmt: skip
        stop = asyncio.Event()
        async with running(em, "ctl-a", client_qps=2.0, client_burst=1, **LEASE) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="ctl-a leading")
            campaigning = asyncio.create_task(other.run(stop))
            preempt(em, "spot-0", seconds=120)
            # Every cache lists and watches first, at 2 requests a second: about 10 s.
            await until(
                lambda: em.written("POST", "pods/eviction"), within=20, what="the first eviction"
            )
            cut = True  # its renewals stop getting through; its evictions are still queued
            await until(lambda: other.is_leader, within=10, what="ctl-b leading")
            acquired = CLOCK.monotonic()
            assert lease_holder(em) == "ctl-b"
            await asyncio.sleep(15)  # longer than the rest of the queue takes at 2 a second
            fenced = controller.metrics.registry.get_sample_value(
                "rebalancer_controller_actions_total",
                {"action": "Evict", "outcome": "rejected_fenced"},
            )
        stop.set()
        await campaigning
        await other_client.close()

    renewals = [  # its acquisition and every renewal that got through
        w.at for w in em.written(resource="leases") if w.body["spec"]["holderIdentity"] == "ctl-a"
    ]
    renew_deadline = max(renewals) + LEASE["renew_deadline_seconds"]
    sent = [  # every write of ctl-a's that reached the server, its Lease's aside
        (w.at, w.method, w.path)
        for w in em.written(ok=False, who="ctl-a")
        if w.resource != "leases"
    ]
    late = [(at, method, path) for at, method, path in sent if at > renew_deadline]
    assert late == [], f"sent after its renew deadline ({renew_deadline:.1f} s): {late}"
    assert all(at < acquired for at, _, _ in sent)
    # Not vacuous: evictions were still queued when the deadline came, and were refused, counted.
    evicted = [path for _, method, path in sent if path.endswith("/eviction")]
    assert 0 < len(evicted) < PODS
    assert fenced, f"no eviction counted as {Rejection.FENCED.value}"

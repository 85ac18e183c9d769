"""Notifications: the product's agent and controller on the cluster emulator, on virtual time,
and a webhook receiver on 127.0.0.1 that gets what a Slack channel would."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import serve
from tests.receiver import SECRET_PATH, Receiver
from tests.virtual.rig import running

pytestmark = pytest.mark.looptime


async def test_a_preempt_is_notified_once_and_the_url_never_logged(tmp_path: Path) -> None:
    receiver = Receiver()
    async with serve(receiver.app()) as base, running(tmp_path) as rig:
        rig.start_agents()
        rig.start_controller(
            REBALANCER_NOTIFY_WEBHOOK_URL=base + SECRET_PATH,
            REBALANCER_NOTIFY_TARGET="slack",
            REBALANCER_NOTIFY_CLUSTER_NAME="e2e",
        )
        await rig.until_ready()
        doomed = rig.spot_nodes()[0]
        event = rig.cluster.preempt(doomed, notice_seconds=30)
        (body,) = await receiver.wait_for(
            lambda bodies: [b for b in bodies if doomed in b["text"]],
            timeout=15,
            what="the notice's notification",
        )
        assert body["text"].startswith(f"Preempt notice on {doomed}: acting")
        text = body["blocks"][0]["text"]["text"]
        assert f"*event id:* {event.event_id}" in text and "*pool:* gpuspot" in text
        assert "cluster e2e" in body["blocks"][1]["elements"][0]["text"]
        await rig.wait_for_metric(
            "controller-0",
            'rebalancer_notifications_total{outcome="sent",target="slack"}',
            1,
            timeout=5,
        )
        # The node is acted on over many passes (cordon, surge, drain): told once.
        await rig.wait_for(lambda: rig.drained_for(doomed), timeout=40, what="the node drained")
        await rig.more_passes("controller-0", 3)
    assert len(receiver.bodies) == 1
    log = rig.log("controller-0")
    assert '"notification sent"' in log
    assert "s3cr3t" not in log

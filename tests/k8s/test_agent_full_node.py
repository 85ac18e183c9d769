"""The agent on a real API server, on a Node whose annotations are at the 256 KiB limit: the
server refuses its annotation (422), the condition still goes through (within the chart's
admission policy, with the pod-bound token the kubelet would mount), and the controller reads the
Preempt from the condition, not the stale annotation's Freeze."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog
import structlog.testing

from rebalancer import names
from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.config import AgentSettings
from rebalancer.controller.actions import Cordon
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.snapshot import Snapshot
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.metrics import AgentMetrics
from rebalancer.node_signal import NodeEvents, parse_condition
from rebalancer_sim.imds import ImdsEmulator
from tests.helpers import serve
from tests.integration.test_agent import JumpClock
from tests.k8s.test_admission_policy import OWN, Guarded, guarded

pytestmark = pytest.mark.k8s
__all__ = ["guarded"]  # the module's fixture: the chart's policy, a token bound to a pod on OWN

VM = "aks-gpuspot-12345678-vmss_0"
BLOB = "someone.else/blob"
LIMIT = 256 * 1024  # the API server's total for a Node's annotations (keys and values)


def annotation_bytes(node: dict[str, object]) -> int:
    annotations = node["metadata"].get("annotations") or {}  # type: ignore[index]
    return sum(len(key) + len(value) for key, value in annotations.items())


async def test_a_preempt_behind_a_refused_annotation_is_read_from_the_condition(
    guarded: Guarded, tmp_path: Path
) -> None:
    plane = guarded.plane
    clock = JumpClock()
    imds = ImdsEmulator(clock=clock)
    client = await KubeClient.connect(str(guarded.pod_kubeconfig(tmp_path / "agent.kubeconfig")))
    try:
        async with serve(imds.app()) as imds_url:
            imds_client = ImdsClient(
                base_url=f"{imds_url}/vms/{VM}", min_interval_seconds=0.0, clock=clock
            )
            agent = Agent(
                settings=AgentSettings(node_name=OWN, vm_name=VM, imds_url=f"{imds_url}/vms/{VM}"),  # type: ignore[call-arg]
                imds=imds_client,
                nodes=NodeApi(client),
                metrics=AgentMetrics(),
                clock=clock,
                log=structlog.get_logger(),
            )
            try:
                assert await agent._initialize()
                freeze = imds.schedule("Freeze", [VM])
                await agent.tick()
                node = guarded.node(OWN)
                published = NodeEvents.from_json(
                    node["metadata"]["annotations"][names.EVENTS_ANNOTATION]
                )
                assert [e.event_id for e in published.events] == [freeze.event_id]

                # Someone else fills the Node's annotations to just under the limit.
                room = LIMIT - annotation_bytes(node) - len(BLOB) - 64
                patch = tmp_path / "blob.json"
                patch.write_text(json.dumps({"metadata": {"annotations": {BLOB: "x" * room}}}))
                plane.kubectl("patch", "node", OWN, "--type", "merge", "--patch-file", str(patch))

                clock.advance(1)
                preempt = imds.schedule("Preempt", [VM])
                with structlog.testing.capture_logs() as logs:
                    await agent.tick()
            finally:
                await imds_client.close()

        node = guarded.node(OWN)
        annotations = node["metadata"]["annotations"]
        stale = NodeEvents.from_json(annotations[names.EVENTS_ANNOTATION])
        assert [e.event_id for e in stale.events] == [freeze.event_id]  # refused: still the Freeze
        (written,) = [c for c in node["status"]["conditions"] if c["type"] == names.CONDITION_TYPE]
        condition = parse_condition(written)
        assert condition.event_id == preempt.event_id and condition.published_at is not None
        assert stale.published_at is not None and condition.published_at > stale.published_at
        refused = [line for line in logs if line["event"].startswith("annotation refused")]
        assert len(refused) == 1
        assert (
            agent._metrics.registry.get_sample_value(
                "rebalancer_agent_node_writes_total", {"outcome": "annotation_refused"}
            )
            == 1
        )

        # The controller reads the Node as the API serves it, and acts on the Preempt.
        info = NodeInfo.from_json(node)
        assert [(n.event_type, n.event_id) for n in info.notices] == [
            ("Preempt", preempt.event_id.upper())
        ]
        state = Snapshot(
            now=clock.now(), nodes={OWN: info}, pods={}, workloads={}, replicaset_owners={}
        )
        (cordon,) = [a for a in plan(state, Settings()).actions if isinstance(a, Cordon)]
        assert (cordon.event_id, cordon.event_type) == (preempt.event_id.upper(), "Preempt")
    finally:
        await client.close()
        plane.kubectl("annotate", "node", OWN, f"{BLOB}-", f"{names.EVENTS_ANNOTATION}-")
        removal = {"status": {"conditions": [{"type": names.CONDITION_TYPE, "$patch": "delete"}]}}
        plane.kubectl(
            "patch", "node", OWN, "--subresource=status", "--type", "strategic",
            "-p", json.dumps(removal),
        )  # fmt: skip

"""The agent's loop against the IMDS emulator and a Kubernetes API, both over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.clock import ManualClock
from rebalancer.config import AgentSettings
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.metrics import AgentMetrics
from rebalancer.node_signal import (
    CONDITION_TYPE,
    DRAINED_FOR_ANNOTATION,
    EVENTS_ANNOTATION,
    NodeEvents,
    parse_message,
)
from rebalancer_sim.imds import ImdsEmulator
from tests.fakes.kube import FakeNodeApi, write_kubeconfig
from tests.helpers import serve

NODE = "aks-gpu-12345678-vmss000003"
VM = "aks-gpu-12345678-vmss_3"
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/aks-gpu-12345678-vmss/virtualMachines/3"
)


@dataclass
class Rig:
    clock: ManualClock
    imds: ImdsEmulator
    kube: FakeNodeApi
    imds_url: str
    kubeconfig: Path
    clients: list[object]

    async def agent(self, **settings: object) -> Agent:
        options: dict[str, object] = {"node_name": NODE, "imds_url": f"{self.imds_url}/vms/{VM}"}
        options.update(settings)
        config = AgentSettings(**options)  # type: ignore[arg-type]
        kube = await KubeClient.connect(str(self.kubeconfig))
        imds = ImdsClient(base_url=str(options["imds_url"]), min_interval_seconds=0.0)
        self.clients += [kube, imds]
        agent = Agent(
            settings=config,
            imds=imds,
            nodes=NodeApi(kube),
            metrics=AgentMetrics(),
            clock=self.clock,
            log=structlog.get_logger(),
        )
        assert await agent._initialize()
        return agent

    def condition(self) -> dict[str, str]:
        condition = self.kube.condition(NODE, CONDITION_TYPE)
        assert condition is not None, "no condition written"
        return condition

    def annotation(self) -> NodeEvents:
        return NodeEvents.from_json(
            self.kube.nodes[NODE]["metadata"]["annotations"][EVENTS_ANNOTATION]
        )

    def writes(self) -> int:
        return sum(1 for r in self.kube.requests if r.method == "PATCH")


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    clock = ManualClock()
    imds = ImdsEmulator(clock=clock)
    kube = FakeNodeApi()
    kube.add_node(NODE, PROVIDER_ID)
    async with serve(imds.app()) as imds_url, serve(kube.app()) as kube_url:
        rig = Rig(clock, imds, kube, imds_url, write_kubeconfig(tmp_path / "kc", kube_url), [])
        yield rig
        for client in rig.clients:
            await client.close()  # type: ignore[attr-defined]


def sample(agent: Agent, name: str, **labels: str) -> float:
    value = agent._metrics.registry.get_sample_value(name, labels or None)
    return value or 0.0


async def test_preempt_is_published_once(rig: Rig) -> None:
    agent = await rig.agent()
    await agent.tick()
    assert rig.condition()["status"] == "False"
    assert rig.condition()["reason"] == "NoScheduledEvents"

    event = rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    condition = rig.condition()
    assert (condition["status"], condition["reason"]) == ("True", "EventScheduled")
    fields = parse_message(condition["message"])
    assert fields["EventId"] == event.event_id and fields["EventType"] == "Preempt"
    assert fields["NotBefore"] == event.not_before.strftime("%Y-%m-%dT%H:%M:%SZ")
    (published,) = rig.annotation().events
    assert published.event_id == event.event_id and published.resources == (VM,)
    assert sample(agent, "rebalancer_agent_scheduled_events_seen_total", event_type="Preempt") == 1
    assert sample(agent, "rebalancer_agent_publish_latency_seconds_count") == 1
    assert (
        sample(agent, "rebalancer_agent_notice_lead_time_seconds_sum", event_type="Preempt") == 30
    )

    writes = rig.writes()
    rig.clock.advance(1)
    await agent.tick()
    await agent.tick()
    assert rig.writes() == writes, "an unchanged document must not be written again"
    assert sample(agent, "rebalancer_agent_scheduled_events_seen_total", event_type="Preempt") == 1


async def test_only_this_vms_condition_and_annotation_are_touched(rig: Rig) -> None:
    npd = {"type": "PreemptionScheduled", "status": "False", "reason": "NoPreemption"}
    rig.kube.nodes[NODE]["status"]["conditions"].append(npd)
    rig.kube.nodes[NODE]["metadata"]["annotations"]["someone/else"] = "keep"
    agent = await rig.agent()
    rig.imds.schedule("Preempt", ["another-vm_1"])  # same placement group, not us
    await agent.tick()
    assert rig.kube.condition(NODE, "PreemptionScheduled") == npd
    assert rig.kube.nodes[NODE]["metadata"]["annotations"]["someone/else"] == "keep"
    assert rig.condition()["reason"] == "NoScheduledEvents"
    status_patches = [r for r in rig.kube.requests if r.path.endswith("/status")]
    assert status_patches[0].content_type == "application/strategic-merge-patch+json"
    assert [c["type"] for c in status_patches[0].body["status"]["conditions"]] == [CONDITION_TYPE]


async def test_cancelled_event_turns_the_condition_false(rig: Rig) -> None:
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    rig.clock.advance(5)
    rig.imds.cancel(event.event_id)
    await agent.tick()
    condition = rig.condition()
    assert (condition["status"], condition["reason"]) == ("False", "EventCancelled")
    assert parse_message(condition["message"])["EventId"] == event.event_id
    assert condition["lastTransitionTime"] == rig.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rig.annotation().events == ()
    assert (
        sample(
            agent,
            "rebalancer_agent_scheduled_events_ended_total",
            event_type="Preempt",
            outcome="cancelled",
        )
        == 1
    )


async def test_started_then_finished_is_completed(rig: Rig) -> None:
    agent = await rig.agent()
    rig.imds.schedule("Redeploy", [VM], notice_seconds=10, started_seconds=5)
    await agent.tick()
    rig.clock.advance(10)
    await agent.tick()
    condition = rig.condition()
    assert (condition["reason"], parse_message(condition["message"])["NotBefore"]) == (
        "EventStarted",
        "now",
    )
    rig.clock.advance(5)
    await agent.tick()
    assert rig.condition()["reason"] == "EventCompleted"


async def test_acknowledges_only_after_the_drained_mark(rig: Rig) -> None:
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    await agent.tick()
    assert rig.imds.events[event.event_id].acknowledged_by == []

    rig.kube.nodes[NODE]["metadata"]["annotations"][DRAINED_FOR_ANNOTATION] = event.event_id.lower()
    await agent.tick()
    assert rig.imds.events[event.event_id].acknowledged_by == [VM]
    assert (
        sample(agent, "rebalancer_agent_acknowledgements_total", event_type="Preempt", outcome="ok")
        == 1
    )
    await agent.tick()  # now Started: never acknowledged twice
    assert rig.condition()["reason"] == "EventStarted"
    assert (
        sample(agent, "rebalancer_agent_acknowledgements_total", event_type="Preempt", outcome="ok")
        == 1
    )


@pytest.mark.parametrize(
    ("event_type", "resources", "settings"),
    [
        ("Freeze", [VM], {}),  # not in the default list
        ("Preempt", [VM, "other_vm_2"], {}),  # would release the other VM too
        ("Preempt", [VM], {"ack_enabled": False}),
    ],
)
async def test_events_that_are_never_acknowledged(
    rig: Rig, event_type: str, resources: list[str], settings: dict[str, object]
) -> None:
    agent = await rig.agent(**settings)
    event = rig.imds.schedule(event_type, resources)
    rig.kube.nodes[NODE]["metadata"]["annotations"][DRAINED_FOR_ANNOTATION] = event.event_id
    await agent.tick()
    await agent.tick()
    assert rig.imds.events[event.event_id].acknowledged_by == []


@pytest.mark.parametrize("status", [500, 409, 429, 403])
async def test_api_errors_lose_nothing(rig: Rig, status: int) -> None:
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    rig.kube.failures = [status, status]
    await agent.tick()
    assert not agent.readiness().ok and "cannot write the Node" in agent.readiness().reason
    assert sample(agent, "rebalancer_agent_node_writes_total", outcome="error") == 1
    await agent.tick()  # second injected failure
    await agent.tick()
    assert rig.condition()["status"] == "True"
    assert parse_message(rig.condition()["message"])["EventId"] == event.event_id
    assert agent.readiness().ok


async def test_imds_outage_shows_on_readiness_and_recovers(rig: Rig) -> None:
    agent = await rig.agent()
    await agent.tick()
    assert agent.readiness().ok
    rig.imds.add_fault(VM, "status", status=404, count=1)
    await agent.tick()
    assert sample(agent, "rebalancer_agent_imds_polls_total", outcome="http_error") == 1
    rig.imds.add_fault(VM, "garbage", count=1)
    await agent.tick()
    assert sample(agent, "rebalancer_agent_imds_polls_total", outcome="parse_error") == 1
    rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    assert rig.condition()["status"] == "True"


async def test_restart_resumes_without_duplicates(rig: Rig) -> None:
    first = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    await first.tick()
    transition = rig.condition()["lastTransitionTime"]
    rig.clock.advance(3)

    second = await rig.agent()  # a new process, same node
    await second.tick()
    assert sample(second, "rebalancer_agent_scheduled_events_seen_total", event_type="Preempt") == 0
    assert rig.annotation().events[0].first_seen == first.tracker.pending[event.event_id].first_seen  # type: ignore[union-attr]
    assert rig.condition()["lastTransitionTime"] == transition


async def test_malformed_annotation_at_start_is_skipped(rig: Rig) -> None:
    rig.kube.nodes[NODE]["metadata"]["annotations"][EVENTS_ANNOTATION] = "{not json"
    agent = await rig.agent()
    assert sample(agent, "rebalancer_agent_skipped_total", reason="malformed_annotation") == 1
    await agent.tick()
    assert rig.annotation().events == ()


async def test_vm_name_sources(rig: Rig) -> None:
    assert (await rig.agent()).vm_name == VM  # from providerID
    assert (await rig.agent(vm_name="override_1")).vm_name == "override_1"
    rig.kube.nodes[NODE]["spec"]["providerID"] = ""
    assert (await rig.agent()).vm_name == VM  # from IMDS instance metadata


async def test_node_missing_is_reported_not_fatal(rig: Rig) -> None:
    config = AgentSettings(node_name="no-such-node", imds_url=f"{rig.imds_url}/vms/{VM}")
    kube = await KubeClient.connect(str(rig.kubeconfig))
    imds = ImdsClient(base_url=config.imds_url, min_interval_seconds=0.0)
    rig.clients += [kube, imds]
    agent = Agent(
        settings=config,
        imds=imds,
        nodes=NodeApi(kube),
        metrics=AgentMetrics(),
        clock=rig.clock,
        log=structlog.get_logger(),
    )
    assert not await agent._initialize()
    assert not agent.readiness().ok and "not found" in agent.readiness().reason
    assert json.loads(json.dumps(agent.liveness().ok))

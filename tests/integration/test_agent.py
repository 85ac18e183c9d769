"""The agent's loop against the IMDS emulator and a Kubernetes API (the cluster emulator's, its
control loops off: the test writes the Node as others would), both over real HTTP; the API
server's side of each request from the tap (tests/tap.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from rebalancer import names
from rebalancer.agent.agent import Agent
from rebalancer.azure.imds import ImdsClient
from rebalancer.clock import ManualClock
from rebalancer.config import AgentSettings
from rebalancer.controller.actions import Cordon
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.snapshot import Snapshot
from rebalancer.kube.client import KubeClient
from rebalancer.kube.nodes import NodeApi
from rebalancer.metrics import AgentMetrics
from rebalancer.node_signal import (
    CONDITION_TYPE,
    DRAINED_FOR_ANNOTATION,
    EVENTS_ANNOTATION,
    NodeEvents,
    parse_condition,
    parse_message,
    stamp,
)
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.imds import ImdsEmulator
from tests.helpers import serve
from tests.tap import Tap, api_server

NODE = "aks-gpu-12345678-vmss000003"
VM = "aks-gpu-12345678-vmss_3"
PROVIDER_ID = (
    "azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/aks-gpu-12345678-vmss/virtualMachines/3"
)


class JumpClock(ManualClock):
    """Virtual time in which a sleep is over at once: it moves the clock by its length.

    `on_wake` runs after every sleep, at the virtual time the sleeper wakes up.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_wake: Callable[[], None] | None = None

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        if self.on_wake is not None:
            self.on_wake()
        await asyncio.sleep(0)


@dataclass
class Rig:
    clock: JumpClock
    imds: ImdsEmulator
    cluster: ClusterEmulator
    tap: Tap
    imds_url: str
    kubeconfig: Path
    clients: list[object]

    async def agent(self, *, imds_min_interval: float = 0.0, **settings: object) -> Agent:
        options: dict[str, object] = {"node_name": NODE, "imds_url": f"{self.imds_url}/vms/{VM}"}
        options.update(settings)
        config = AgentSettings(**options)  # type: ignore[arg-type]
        kube = await KubeClient.connect(str(self.kubeconfig))
        imds = ImdsClient(
            base_url=str(options["imds_url"]),
            min_interval_seconds=imds_min_interval,
            clock=self.clock,
        )
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

    def node(self) -> dict[str, Any]:
        """The Node as the API server has it now."""
        return self.cluster.store.must_get(R.NODES, "", NODE)  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def editing(self) -> Iterator[dict[str, Any]]:
        """Change the Node as another component would (not through the API: not tapped)."""
        node = copy.deepcopy(self.node())
        node["metadata"].setdefault("annotations", {})
        node["metadata"].setdefault("labels", {})
        yield node
        self.cluster.store.update(R.NODES, node)

    def annotate(self, key: str, value: str) -> None:
        with self.editing() as node:
            node["metadata"]["annotations"][key] = value

    def annotations(self) -> dict[str, str]:
        return dict(self.node()["metadata"].get("annotations") or {})

    def kube_condition(self, type_: str) -> dict[str, Any] | None:
        for condition in self.node()["status"].get("conditions") or []:
            if condition["type"] == type_:
                return dict(condition)
        return None

    def condition(self) -> dict[str, str]:
        condition = self.kube_condition(CONDITION_TYPE)
        assert condition is not None, "no condition written"
        return condition

    def annotation(self) -> NodeEvents:
        return NodeEvents.from_json(self.annotations()[EVENTS_ANNOTATION])

    def writes(self) -> int:
        return sum(1 for r in self.tap.requests if r.method == "PATCH")


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    clock = JumpClock()
    imds = ImdsEmulator(clock=clock)
    node = {"metadata": {"name": NODE}, "spec": {"providerID": PROVIDER_ID}}
    async with (
        serve(imds.app()) as imds_url,
        api_server(tmp_path, (R.NODES, node)) as (cluster, tap),
    ):
        rig = Rig(clock, imds, cluster, tap, imds_url, cluster.kubeconfig_path, [])
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
    with rig.editing() as node:
        node["status"]["conditions"] = [npd]
        node["metadata"]["annotations"]["someone/else"] = "keep"
    agent = await rig.agent()
    rig.imds.schedule("Preempt", ["another-vm_1"])  # same placement group, not us
    await agent.tick()
    assert rig.kube_condition("PreemptionScheduled") == npd
    assert rig.annotations()["someone/else"] == "keep"
    assert rig.condition()["reason"] == "NoScheduledEvents"
    status_patches = [r for r in rig.tap.requests if r.path.endswith("/status")]
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

    rig.annotate(DRAINED_FOR_ANNOTATION, event.event_id.lower())
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


async def test_an_acknowledged_redeploy_is_on_the_node_before_the_vm_goes(rig: Rig) -> None:
    """The VM goes down as soon as Azure starts the acknowledged event; the agent that starts
    with it again finds the event gone and must say it ran. The real control plane showed it
    (tests/k8s/test_redeploy.py): the acknowledgement reached the Node only at the next tick,
    which never came, and the restarted agent reported the Redeploy cancelled."""
    agent = await rig.agent()
    event = rig.imds.schedule("Redeploy", [VM], notice_seconds=60, started_seconds=5)
    rig.annotate(DRAINED_FOR_ANNOTATION, event.event_id)
    await agent.tick()  # seen, published, acknowledged: Azure starts it and the VM goes off
    assert rig.imds.events[event.event_id].acknowledged_by == [VM]
    rig.clock.advance(6)  # back on its new host; the event is gone
    again = await rig.agent()
    await again.tick()
    assert rig.condition()["reason"] == "EventCompleted"


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
    rig.annotate(DRAINED_FOR_ANNOTATION, event.event_id)
    await agent.tick()
    await agent.tick()
    assert rig.imds.events[event.event_id].acknowledged_by == []


@pytest.mark.parametrize("status", [500, 409, 429, 403])
async def test_api_errors_lose_nothing(rig: Rig, status: int) -> None:
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    rig.tap.fail("", f"/nodes/{NODE}", status, times=2)
    await agent.tick()  # the annotation, then the condition: both fail, each counted
    assert not agent.readiness().ok and "cannot write the Node" in agent.readiness().reason
    assert sample(agent, "rebalancer_agent_node_writes_total", outcome="error") == 2
    assert rig.kube_condition(CONDITION_TYPE) is None
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


@pytest.mark.parametrize(
    "annotation",
    [
        "{not json",
        "[" * 3000 + "]" * 3000,  # a RecursionError in the decoder once crashed the agent here
        '{"vmName": ' + "[" * 3000 + "]" * 3000 + "}",
        '{"events": [{"eventId": ' + "[" * 3000 + "]" * 3000 + "}]}",
    ],
    ids=["not-json", "deep-array", "deep-vm-name", "deep-event-id"],
)
async def test_malformed_annotation_at_start_is_skipped(rig: Rig, annotation: str) -> None:
    rig.annotate(EVENTS_ANNOTATION, annotation)
    event = rig.imds.schedule("Preempt", [VM])
    with structlog.testing.capture_logs() as logs:
        agent = await rig.agent()
        await agent.tick()
        await agent.tick()
    assert sample(agent, "rebalancer_agent_skipped_total", reason="malformed_annotation") == 1
    assert [line["event"] for line in logs].count(
        "ignoring malformed annotation of an earlier run"
    ) == 1
    (published,) = rig.annotation().events
    assert published.event_id == event.event_id
    assert rig.condition()["status"] == "True"


async def test_vm_name_sources(rig: Rig) -> None:
    assert (await rig.agent()).vm_name == VM  # from providerID
    assert (await rig.agent(vm_name="override_1")).vm_name == "override_1"
    with rig.editing() as node:
        node["spec"]["providerID"] = ""
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


# ---- hostile or odd input (issue 12) -----------------------------------------------------------


def kube_time(moment: object) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")  # type: ignore[attr-defined]


async def test_retry_after_60_does_not_hold_the_poll(rig: Rig) -> None:
    agent = await rig.agent(imds_min_interval=0.25)
    await agent.tick()  # the first call is done: the long first-call allowance is over
    rig.imds.add_fault(VM, "status", status=429, count=1, retry_after="60")
    event = rig.imds.schedule("Preempt", [VM])
    unhealthy: list[str] = []

    def check_liveness() -> None:
        if not agent.liveness().ok:
            unhealthy.append(agent.liveness().reason)

    rig.clock.on_wake = check_liveness
    started = rig.clock.monotonic()
    await agent.tick()
    took = rig.clock.monotonic() - started
    assert took <= 3.0 + 0.25, "a Retry-After is honoured for at most 3 s within a tick"
    assert unhealthy == []
    assert rig.condition()["status"] == "True"
    fields = parse_message(rig.condition()["message"])
    assert (fields["EventId"], fields["EventStatus"]) == (event.event_id, "Scheduled")
    left = (event.not_before - rig.clock.now()).total_seconds()
    assert left >= 30 - 3.0 - 0.25  # the notice is still useful


async def test_persistent_429_keeps_polling_at_a_bounded_rate(rig: Rig) -> None:
    agent = await rig.agent(imds_min_interval=0.25)
    await agent.tick()
    fault_seconds, budget = 20.0, 5.0  # budget: ImdsClient's retry budget per poll
    rig.imds.add_fault(VM, "status", status=429, seconds=fault_seconds, retry_after="60")
    rig.imds.rate_limit_per_second = None  # real time barely moves here: the rate is checked below
    fault_ends = rig.clock.monotonic() + fault_seconds
    unhealthy: list[str] = []
    rig.clock.on_wake = lambda: None if agent.liveness().ok else unhealthy.append("dead")
    event = None
    published_at = None
    while published_at is None and rig.clock.monotonic() < fault_ends + 30:
        if event is None and rig.clock.monotonic() >= 5:
            event = rig.imds.schedule("Preempt", [VM])
        requests_before, started = rig.imds.vms[VM].requests, rig.clock.monotonic()
        await agent.tick()
        took = rig.clock.monotonic() - started
        assert took <= budget + 0.25
        assert rig.imds.vms[VM].requests - requests_before <= 5 * max(1.0, took)
        assert not unhealthy and agent.liveness().ok
        if rig.kube_condition(CONDITION_TYPE)["status"] == "True":  # type: ignore[index]
            published_at = rig.clock.monotonic()
        rig.clock.advance(1.0)  # the loop's poll interval
    assert event is not None and published_at is not None
    # seen within one poll (retry budget + interval) of IMDS answering again, while Scheduled
    assert published_at <= fault_ends + budget + 1.0 + 0.25
    fields = parse_message(rig.condition()["message"])
    assert (fields["EventId"], fields["EventStatus"]) == (event.event_id, "Scheduled")


def document(incarnation: int, *events: dict[str, object]) -> str:
    return json.dumps({"DocumentIncarnation": incarnation, "Events": list(events)})


def preempt(event_id: str, **fields: object) -> dict[str, object]:
    event: dict[str, object] = {
        "EventId": event_id,
        "EventStatus": "Scheduled",
        "EventType": "Preempt",
        "ResourceType": "VirtualMachine",
        "Resources": [VM],
        "NotBefore": "Tue, 16 Mar 2027 00:58:46 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }
    event.update(fields)
    return event


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("NotBefore", 1773622726),
        ("Resources", VM),
        ("Description", {"text": "odd"}),
        ("Resources", 7),  # cannot tell whom it names: it may name us
    ],
    ids=["not-before-number", "resources-string", "description-object", "resources-number"],
)
async def test_a_preempt_with_an_odd_field_is_acted_on_at_once(
    rig: Rig, field: str, value: object
) -> None:
    agent = await rig.agent()
    real = rig.imds.schedule("Preempt", [VM])  # so an acknowledgement would be accepted
    rig.annotate(DRAINED_FOR_ANNOTATION, real.event_id)
    body = document(5, preempt(real.event_id, **{field: value}))
    polls = 3
    rig.imds.add_fault(VM, "garbage", count=polls, body=body)
    with structlog.testing.capture_logs() as logs:
        for _ in range(polls):
            await agent.tick()
    fields = parse_message(rig.condition()["message"])
    assert rig.condition()["status"] == "True"
    assert fields["EventId"] == real.event_id
    assert fields["NotBefore"] == "now"  # a NotBefore in a malformed entry is not trusted
    (published,) = rig.annotation().events
    assert published.oddities and published.oddities[0].startswith(field)
    odd_lines = [line for line in logs if line["event"].startswith("event read with odd fields")]
    assert len(odd_lines) == 1, "logged once, not on every poll"
    assert sample(agent, "rebalancer_agent_skipped_total", reason="odd_field") == 1
    assert rig.imds.events[real.event_id].acknowledged_by == []  # never released to Azure


async def test_a_malformed_event_is_logged_once(rig: Rig) -> None:
    agent = await rig.agent()
    body = document(3, {"EventType": "Preempt", "EventStatus": "Scheduled"})  # no EventId
    rig.imds.add_fault(VM, "garbage", count=3, body=body)
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await agent.tick()
    assert [line["event"] for line in logs].count("skipped a malformed event") == 1
    assert sample(agent, "rebalancer_agent_skipped_total", reason="malformed_event") == 1


async def test_200_pending_events_stay_under_the_annotation_limit(rig: Rig) -> None:
    agent = await rig.agent()
    count = 200
    events = [
        # scheduled in order, each due sooner than the one before: the last is the most urgent
        rig.imds.schedule(
            "Preempt", [VM], notice_seconds=30 + count - index, description="d" * 1500
        )
        for index in range(count)
    ]
    await agent.tick()
    raw = rig.annotations()[EVENTS_ANNOTATION]
    assert len(raw.encode()) <= 32 * 1024
    published = rig.annotation()
    kept = [event.event_id for event in published.events]
    assert 0 < len(kept) < count and published.omitted == count - len(kept)
    assert set(kept) == {event.event_id for event in events[count - len(kept) :]}
    fields = parse_message(rig.condition()["message"])
    assert (fields["EventId"], fields["Pending"]) == (events[-1].event_id, str(count))
    assert agent.readiness().ok


async def test_condition_is_written_when_the_annotation_cannot_be(rig: Rig) -> None:
    rig.annotate("someone.else/blob", "x" * (256 * 1024 - 100))  # the Node is nearly full
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    assert EVENTS_ANNOTATION not in rig.annotations()
    assert parse_message(rig.condition()["message"])["EventId"] == event.event_id
    assert not agent.readiness().ok and "write_annotation" in agent.readiness().reason
    patches = rig.writes()
    await agent.tick()  # the annotation is tried again; the condition already says it all
    assert rig.writes() == patches + 1
    with rig.editing() as node:
        del node["metadata"]["annotations"]["someone.else/blob"]
    await agent.tick()
    assert rig.annotation().events[0].event_id == event.event_id
    assert agent.readiness().ok


async def test_duplicate_event_ids_never_release_another_vm(rig: Rig) -> None:
    agent = await rig.agent()
    real = rig.imds.schedule("Preempt", [VM])
    rig.annotate(DRAINED_FOR_ANNOTATION, real.event_id)
    body = document(
        4,
        preempt(real.event_id, Resources=[VM, "other-vm_9"]),
        preempt(real.event_id, Resources=[VM]),  # the last entry names only us
    )
    rig.imds.add_fault(VM, "garbage", count=2, body=body)
    await agent.tick()
    await agent.tick()
    assert rig.imds.events[real.event_id].acknowledged_by == []
    (published,) = rig.annotation().events
    assert sorted(published.resources) == sorted([VM, "other-vm_9"])


async def test_same_incarnation_with_other_content_is_not_ignored(rig: Rig) -> None:
    agent = await rig.agent()
    rig.imds.add_fault(VM, "garbage", count=1, body=document(9))
    await agent.tick()
    assert rig.condition()["status"] == "False"
    rig.imds.add_fault(VM, "garbage", count=1, body=document(9, preempt("DUP-INC-1")))
    await agent.tick()
    assert parse_message(rig.condition()["message"])["EventId"] == "DUP-INC-1"


async def test_a_preempt_behind_a_refused_annotation_reaches_the_controller(rig: Rig) -> None:
    """A Freeze is published; then the Node's annotations fill up (someone else's 256 KiB) and a
    Preempt comes: the API refuses the annotation (422), the condition is written with a newer
    stamp, and the controller reads the Preempt from it, not the stale Freeze, and cordons."""
    with rig.editing() as node:  # a node that runs our agent, as the planner checks
        node["metadata"]["labels"][names.AKS_SPOT_LABEL] = "spot"
    agent = await rig.agent()
    freeze = rig.imds.schedule("Freeze", [VM])
    await agent.tick()
    assert [e.event_id for e in rig.annotation().events] == [freeze.event_id]

    # Full to the byte: 256 KiB of keys and values (the limit), so any growth is refused.
    used = sum(len(k.encode()) + len(v.encode()) for k, v in rig.annotations().items())
    blob = "someone.else/blob"
    rig.annotate(blob, "x" * (256 * 1024 - used - len(blob)))
    rig.clock.advance(1)
    preempt = rig.imds.schedule("Preempt", [VM])
    with structlog.testing.capture_logs() as logs:
        await agent.tick()
        rig.clock.advance(1)
        await agent.tick()  # refused again: counted again, said once
    assert [e.event_id for e in rig.annotation().events] == [freeze.event_id]  # stale
    assert parse_message(rig.condition()["message"])["EventId"] == preempt.event_id

    # The controller, reading this Node as the API serves it.
    node = NodeInfo.from_json(rig.node())
    assert [(n.event_type, n.event_id) for n in node.notices] == [
        ("Preempt", preempt.event_id.upper())
    ]
    state = Snapshot(
        now=rig.clock.now(), nodes={NODE: node}, pods={}, workloads={}, replicaset_owners={}
    )
    (cordon,) = [a for a in plan(state, Settings()).actions if isinstance(a, Cordon)]
    assert (cordon.event_id, cordon.event_type) == (preempt.event_id.upper(), "Preempt")

    # The agent said why the annotation is stale: counted per refusal, logged once.
    assert sample(agent, "rebalancer_agent_node_writes_total", outcome="annotation_refused") == 2
    refused = [line for line in logs if line["event"].startswith("annotation refused")]
    assert len(refused) == 1 and preempt.event_id in refused[0]["condition_message"]


async def test_annotation_and_condition_carry_one_stamp_and_a_restart_never_stamps_older(
    rig: Rig,
) -> None:
    agent = await rig.agent()
    event = rig.imds.schedule("Preempt", [VM])
    await agent.tick()
    first = parse_condition(rig.condition()).published_at
    assert first is not None and rig.annotation().published_at == first

    # An earlier run's stamps from a clock that was ahead (it stepped back since).
    ahead = first + timedelta(days=1)
    earlier = replace(rig.annotation(), published_at=ahead).to_json()
    with rig.editing() as node:
        node["metadata"]["annotations"][EVENTS_ANNOTATION] = earlier
        for condition in node["status"]["conditions"]:
            if condition["type"] == CONDITION_TYPE:
                condition["message"] = condition["message"].replace(stamp(first), stamp(ahead))
    restarted = await rig.agent()
    rig.clock.advance(5)
    rig.imds.cancel(event.event_id)
    await restarted.tick()
    later = parse_condition(rig.condition()).published_at
    assert later is not None and later > ahead and rig.annotation().published_at == later

"""On-demand GPU nodes kept empty after their pods left (`on-demand-fallback-kept-idle`): the
controller watches its snapshots (`idle_nodes.IdleWatch`) and the doctor warns from what it saw,
never from the autoscaler's settings, which AKS does not show in the cluster."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import structlog

from rebalancer.clock import ManualClock
from rebalancer.controller.checkup import (
    WARNING,
    IdleSpell,
    diagnose,
    idle_fallback_findings,
    setup_of,
)
from rebalancer.controller.doctor import IDLE_LIMIT_SECONDS, Doctor
from rebalancer.controller.idle_nodes import IdleWatch
from rebalancer.controller.model import NodeInfo, PodInfo
from rebalancer.controller.planner import Settings
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import Check
from tests.unit.kube_objects import node, pod

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GPU = "sku=gpu:NoSchedule"
LIMIT = 300.0


def view(at_minutes: float, nodes: Sequence[NodeInfo], pods: Sequence[PodInfo]) -> Snapshot:
    return Snapshot(
        now=T0 + timedelta(minutes=at_minutes),
        nodes={n.name: n for n in nodes},
        pods={p.key: p for p in pods},
        workloads={},
        replicaset_owners={},
    )


ON_DEMAND = NodeInfo.from_json(node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]))
SPOT = NodeInfo.from_json(node("spot-0", "gpuspot", spot=True, gpus=1, taints=[GPU]))
CPU = NodeInfo.from_json(node("sys-0", "system", spot=False, gpus=0, taints=[], sku="D4s"))
ON_OD = PodInfo.from_json(pod("llm-a", "od-0", owner=("ReplicaSet", "llm-rs")))
ON_SPOT = PodInfo.from_json(pod("llm-b", "spot-0", owner=("ReplicaSet", "llm-rs")))
CPU_POD = PodInfo.from_json(pod("logger", "od-0", owner=("DaemonSet", "logs"), gpus=0))


def watch(frames: Sequence[tuple[float, Sequence[NodeInfo], Sequence[PodInfo]]]) -> IdleWatch:
    idle = IdleWatch()
    for minutes, nodes, pods in frames:
        idle.observe(view(minutes, nodes, pods))
    return idle


def test_an_on_demand_node_removed_after_its_pod_left_is_one_spell_as_long_as_seen_empty() -> None:
    # The replica serves on od-0 until minute 5, goes (back to spot), od-0 is empty from
    # minute 6 (a DaemonSet's pod without GPUs does not keep it busy) and gone at minute 17.
    frames: list[tuple[float, Sequence[NodeInfo], Sequence[PodInfo]]] = [
        (0, [ON_DEMAND, SPOT], [ON_OD, CPU_POD]),
        (5, [ON_DEMAND, SPOT], [ON_OD, CPU_POD]),
        (6, [ON_DEMAND, SPOT], [ON_SPOT, CPU_POD]),
        (11, [ON_DEMAND, SPOT], [ON_SPOT, CPU_POD]),
        (16.5, [ON_DEMAND, SPOT], [ON_SPOT]),
        (17, [SPOT], [ON_SPOT]),
    ]
    [spell] = watch(frames).spells()
    assert (spell.node, spell.pool) == ("od-0", "gpuondemand")
    assert spell.seconds == (16.5 - 6) * 60  # first to last time seen empty: a lower bound
    assert spell.ended == T0 + timedelta(minutes=17)


def test_nodes_not_seen_losing_their_pods_and_spot_or_cpu_nodes_are_not_judged() -> None:
    frames: list[tuple[float, Sequence[NodeInfo], Sequence[PodInfo]]] = [
        # od-0 already empty when the controller started: its pod's leaving was not seen.
        (0, [ON_DEMAND, SPOT, CPU], [ON_SPOT]),
        (20, [ON_DEMAND, SPOT, CPU], []),  # spot-0 empty: a spot node, not the fallback
        (30, [], []),
    ]
    assert watch(frames).spells() == ()


def test_a_node_that_gets_a_pod_again_ends_its_spell_without_one() -> None:
    frames: list[tuple[float, Sequence[NodeInfo], Sequence[PodInfo]]] = [
        (0, [ON_DEMAND], [ON_OD]),
        (1, [ON_DEMAND], []),
        (8, [ON_DEMAND], [ON_OD]),  # reused by the next fail-over: keeping it paid off
        (9, [ON_DEMAND], []),
        (11, [], []),
    ]
    [spell] = watch(frames).spells()
    assert spell.seconds == 0.0  # seen empty once, at minute 9, then gone


def test_spells_older_than_a_day_are_forgotten() -> None:
    idle = IdleWatch()
    for minutes, nodes, pods in [(0, [ON_DEMAND], [ON_OD]), (1, [ON_DEMAND], []), (20, [], [])]:
        idle.observe(view(minutes, nodes, pods))
    assert len(idle.spells()) == 1
    idle.observe(view(20 + 24 * 60 + 1, [], []))
    assert idle.spells() == ()


def spell(seconds: float, pool: str = "gpuondemand", name: str = "od-0") -> IdleSpell:
    return IdleSpell(name, pool, seconds, T0)


def test_the_doctor_warns_per_pool_when_a_node_stayed_empty_past_the_limit() -> None:
    spells = [spell(660), spell(120, name="od-1"), spell(200, pool="other")]
    [finding] = idle_fallback_findings(spells, limit_seconds=LIMIT)
    assert finding.check == Check.FALLBACK_KEPT_IDLE
    assert finding.severity == WARNING
    assert (finding.object.kind, finding.object.name) == ("NodePool", "gpuondemand")
    assert "1 GPU node of 2" in finding.what
    assert "at least 11 min" in finding.what
    assert f"{(660 + 120) / 3600:.2f} node-hours" in finding.what
    assert "scale-down-unneeded-time=" in finding.command


def test_no_warning_within_the_limit_or_without_evidence() -> None:
    assert idle_fallback_findings([spell(LIMIT), spell(30)], limit_seconds=LIMIT) == []
    assert idle_fallback_findings([], limit_seconds=LIMIT) == []


def test_diagnose_checks_idle_fallback_only_when_the_controller_watched() -> None:
    state = view(0, [ON_DEMAND, SPOT], [ON_SPOT])
    watched = setup_of(
        state, settings=Settings(), daemonsets=None, idle_spells=[spell(900)],
        idle_limit_seconds=LIMIT,
    )  # fmt: skip
    assert [f.check for f in diagnose(watched)] == [Check.FALLBACK_KEPT_IDLE]
    plugin = setup_of(state, settings=Settings(), daemonsets=None)  # one look: no history
    assert diagnose(plugin) == []


class NoDaemonSets:
    async def request(self, method: str, path: str, **_: object) -> dict[str, object]:
        return {"items": []}


async def test_the_controllers_doctor_reports_what_its_watch_saw_as_a_gauge() -> None:
    metrics = ControllerMetrics()
    doctor = Doctor(
        client=cast(Any, NoDaemonSets()),
        settings=ControllerSettings(),
        metrics=metrics,
        events=None,
        leading=lambda: True,
        clock=ManualClock(T0),
        log=structlog.get_logger(),
    )
    frames: list[tuple[float, Sequence[NodeInfo], Sequence[PodInfo]]] = [
        (0, [ON_DEMAND, SPOT], [ON_OD]),
        (1, [ON_DEMAND, SPOT], [ON_SPOT]),
        (11, [ON_DEMAND, SPOT], [ON_SPOT]),
    ]
    for minutes, nodes, pods in frames:
        doctor.idle.observe(view(minutes, nodes, pods))
    assert await doctor.check(view(12, [SPOT], [ON_SPOT])) == [
        *idle_fallback_findings(doctor.idle.spells(), limit_seconds=IDLE_LIMIT_SECONDS)
    ]
    found = {
        sample.labels["check"]: sample.value
        for family in metrics.registry.collect()
        if family.name == "rebalancer_doctor_findings"
        for sample in family.samples
    }
    assert found[Check.FALLBACK_KEPT_IDLE] == 1

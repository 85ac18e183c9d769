"""`rebalancer demo`: one spot eviction on an emulated AKS GPU cluster, told as a timeline, and
the same eviction without us, side by side.

Two emulated clusters (Kubernetes API + IMDS on 127.0.0.1) run in this process, both built from
the shipped scenario `autodrain-pdb`: 3 spot A100 replicas that take 90 s to load their model,
a warm on-demand node, a PDB maxUnavailable 1 and AKS node auto-drain on, as in AKS. In the
first, the agents (one per spot node) and the controller run as real `rebalancer` processes; the
second has AKS's plain cordon-and-drain only. Both get the same Preempt at the same moment.

The summary gives, for each, the lowest Ready count and the Ready deficit in replica-seconds,
and what the scenario makes unavoidable: a doomed replica is gone at NotBefore at the latest,
and its replacement cannot be Ready sooner than a model load after the notice. A 30 s notice
cannot hide a 90 s load. The demo succeeds (exit 0) when the node was drained before NotBefore
and our deficit is no more than the unavoidable plus the controller's drain margin and a few
seconds of reaction, all computed from the scenario.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rebalancer import names
from rebalancer.vocabulary import DEFAULT_DEADLINE_MARGIN_SECONDS
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.measure import ReadyDeficit, unavoidable_deficit
from rebalancer_sim.product_processes import RebalancerProcesses
from rebalancer_sim.scenario import Scenario, load_scenario
from rebalancer_sim.serve import explore_lines, run_rebalancer

DEMO_SCENARIO = "autodrain-pdb"  # sim/rebalancer_sim/scenarios/autodrain-pdb.yaml
NAMESPACE, DEPLOYMENT = "inference", "llm"
# What the processes may add per doomed replica to the unavoidable deficit: the agent's 1 s IMDS
# poll, watch and plan, a controller pass up to 1 s late at the deadline (resync 1 s), the
# emulator's ticks and the 50 ms sampling.
REACTION_SECONDS = 4.0


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)

    def say(self, who: str, what: str) -> None:
        line = f"  +{time.monotonic() - self.started:6.2f}s  {who:<11} {what}"
        self.lines.append(line)
        print(line, flush=True)


@dataclass
class Observed:
    """What the demo watches for, so each change is told once."""

    condition: str = ""
    cordoned: bool = False
    replicas: int = 0
    pods: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (node, ready)
    drained: bool = False
    drained_at: float | None = None
    acknowledged: bool = False
    node_state: str = "Ready"
    cooldown: set[str] = field(default_factory=set)
    min_ready: int = 1_000
    desired: int = 0


def _pool_of(cluster: ClusterEmulator, node_name: str) -> str:
    node = cluster.store.get(R.NODES, "", node_name)
    if node is None:
        return "?"
    return str((node["metadata"].get("labels") or {}).get(names.AKS_AGENTPOOL_LABEL, "?"))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _observe(
    cluster: ClusterEmulator, doomed: str, event_id: str, seen: Observed, timeline: Timeline
) -> None:
    store = cluster.store
    node = store.get(R.NODES, "", doomed)
    if node is not None:
        for condition in node["status"].get("conditions") or []:
            published = condition["type"] == names.CONDITION_TYPE and condition["status"] == "True"
            if published and not seen.condition:
                seen.condition = condition["message"]
                timeline.say("agent", f"published the notice on the Node: {condition['message']}")
        if node["spec"].get("unschedulable") and not seen.cordoned:
            seen.cordoned = True
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            timeline.say("controller", f"cordoned {doomed}; taints now {taints}")
        drained = (node["metadata"].get("annotations") or {}).get(names.DRAINED_FOR_ANNOTATION)
        if drained and not seen.drained:
            seen.drained = True
            seen.drained_at = time.monotonic() - timeline.started
            timeline.say("controller", f"marked the node drained for event {drained}")
        ready = next(
            (c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"), "?"
        )
        if ready != "True" and seen.node_state == "Ready":
            seen.node_state = "NotReady"
            timeline.say("azure", f"VM evicted: {doomed} is NotReady")
    elif seen.node_state != "deleted":
        seen.node_state = "deleted"
        timeline.say("azure", f"Node {doomed} deleted with its VM")
    for other in cluster.nodes("gpuspot"):
        other_name = other["metadata"]["name"]
        keys = {t["key"] for t in other["spec"].get("taints") or []}
        if names.COOLDOWN_TAINT in keys and other_name not in seen.cooldown:
            seen.cooldown.add(other_name)
            timeline.say("controller", f"steering away: {other_name} tainted PreferNoSchedule")
    event = cluster.imds.events.get(event_id)
    if event is not None and event.acknowledged_by and not seen.acknowledged:
        seen.acknowledged = True
        timeline.say("agent", "acknowledged the event to Azure (the eviction may start now)")
    deployment = store.get(R.DEPLOYMENTS, NAMESPACE, DEPLOYMENT)
    if deployment is not None:
        replicas = int(deployment["spec"]["replicas"])
        if seen.replicas and replicas != seen.replicas:
            verb = "surged" if replicas > seen.replicas else "scaled back"
            timeline.say(
                "controller",
                f"{verb} Deployment {DEPLOYMENT}: replicas {seen.replicas} -> {replicas}",
            )
        seen.replicas = replicas
    pods = {
        p["metadata"]["name"]: p
        for p in store.items(R.PODS, NAMESPACE)
        if p["metadata"].get("deletionTimestamp") is None
    }
    for name, pod in pods.items():
        node_name = pod["spec"].get("nodeName") or ""
        ready = _ready(pod)
        before = seen.pods.get(name)
        if node_name and (before is None or before[0] != node_name):
            timeline.say(
                "scheduler", f"pod {name} -> {node_name} (pool {_pool_of(cluster, node_name)})"
            )
        if ready and (before is None or not before[1]) and seen.replicas:
            timeline.say("kubelet", f"pod {name} Ready on {node_name}")
        seen.pods[name] = (node_name, ready)
    for name in [n for n in seen.pods if n not in pods]:
        timeline.say("kubelet", f"pod {name} removed from {seen.pods.pop(name)[0]}")
    ready_count = sum(1 for _, is_ready in seen.pods.values() if is_ready)
    seen.min_ready = min(seen.min_ready, ready_count)


def _ready_count(cluster: ClusterEmulator) -> int:
    return sum(
        1
        for p in cluster.pods(NAMESPACE)
        if p["metadata"].get("deletionTimestamp") is None
        and p["metadata"]["name"].startswith(DEPLOYMENT)
        and _ready(p)
    )


def _all_ready(cluster: ClusterEmulator, replicas: int) -> bool:
    return _ready_count(cluster) == replicas


def _scenario() -> Scenario:
    scenario = load_scenario(DEMO_SCENARIO)
    scenario.timeline = []  # the demo preempts once the processes run
    scenario.settings.node_delete_delay_seconds = 3
    return scenario


def _on_demand_provisioning(scenario: Scenario, pool: str) -> float:
    """0 when a warm on-demand node has room for the replacement, else the pool's delay."""
    spec = next(p for p in scenario.pools if p.name == pool)
    return 0.0 if spec.count > 0 else spec.provisioning_seconds


async def _demo(notice_seconds: float, *, keep: bool) -> int:
    scenario = _scenario()
    workload = next(w for w in scenario.workloads if w.name == DEPLOYMENT)
    load = workload.startup_seconds
    if not isinstance(load, (int, float)):
        raise SystemExit(f"{DEMO_SCENARIO}: the demo needs one startupSeconds, not a range")
    load = float(load)
    replicas = workload.replicas
    provisioning = _on_demand_provisioning(scenario, "gpuondemand")
    margin = DEFAULT_DEADLINE_MARGIN_SECONDS
    workdir = Path(tempfile.mkdtemp(prefix="rebalancer-demo-"))
    ours = ClusterEmulator(scenario)
    alone = ClusterEmulator(_scenario())
    urls = await ours.start(kubeconfig_dir=workdir)
    (workdir / "alone").mkdir()
    await alone.start(kubeconfig_dir=workdir / "alone")
    processes = RebalancerProcesses(ours, workdir)
    timeline = Timeline()
    print(
        f"spot-rebalancer demo: two emulated AKS clusters, each with {replicas} spot A100 nodes "
        f"serving Deployment {NAMESPACE}/{DEPLOYMENT}\n(model load {load:g} s, PDB "
        "maxUnavailable 1), a warm on-demand A100 node, and AKS node auto-drain on, as in AKS.\n"
        "The first runs spot-rebalancer; the second has AKS's plain cordon-and-drain only."
    )
    print(f"Kubernetes API {urls.api}  (kubeconfig {urls.kubeconfig}); logs in {workdir}\n")
    try:
        for cluster in (ours, alone):
            await cluster.wait_for(
                functools.partial(_all_ready, cluster, replicas),
                timeout=30,
                message=f"the {replicas} replicas Ready",
            )
        spot_nodes = processes.spot_nodes()
        processes.start()
        await ours.wait_for(
            processes.reported_in,
            timeout=30,
            message="the agents to report in and the controller to lead",
        )

        seen = Observed()
        _observe(ours, spot_nodes[0], "", seen, Timeline(lines=[]))  # the state before
        timeline.started = time.monotonic()
        doomed = spot_nodes[0]
        doomed_alone = sorted(n["metadata"]["name"] for n in alone.nodes("gpuspot"))[0]
        event = ours.preempt(doomed, notice_seconds=notice_seconds)
        alone.preempt(doomed_alone, notice_seconds=notice_seconds)
        vm = ours.vm_name_for(doomed)
        timeline.say("azure", f"Preempt for VM {vm} ({doomed}), {notice_seconds:g} s of notice")
        deficits = {
            "ours": ReadyDeficit(baseline=replicas),
            "alone": ReadyDeficit(baseline=replicas),
        }
        told_alone = 0
        told_ours = 0
        deadline = time.monotonic() + max(notice_seconds, load + provisioning) + 30
        while time.monotonic() < deadline:
            now = time.monotonic()
            _observe(ours, doomed, event.event_id, seen, timeline)
            deficits["ours"].sample(now, _ready_count(ours))
            deficits["alone"].sample(now, _ready_count(alone))
            for _, what in ours.auto_drain.log[told_ours:]:
                timeline.say("aks", what)
            told_ours = len(ours.auto_drain.log)
            for _, what in alone.auto_drain.log[told_alone:]:
                timeline.say("aks alone", f"(second cluster) {what}")
            told_alone = len(alone.auto_drain.log)
            settled = all(
                _ready_count(c) == replicas and c.store.get(R.NODES, "", n) is None
                for c, n in ((ours, doomed), (alone, doomed_alone))
            )
            if settled and seen.replicas == replicas:
                break
            processes.sync()
            if processes.exited():
                timeline.say("demo", "a rebalancer process exited early; see its log")
                break
            await asyncio.sleep(0.05)
        print()
        unavoidable = unavoidable_deficit(
            notice_seconds=notice_seconds, load_seconds=load, provisioning_seconds=provisioning
        )
        allowed = unavoidable + margin + REACTION_SECONDS
        drained_in_time = seen.drained_at is not None and seen.drained_at < notice_seconds
        ok = (
            drained_in_time
            and seen.node_state == "deleted"
            and deficits["ours"].replica_seconds <= allowed
        )
        placement = ", ".join(
            f"{pool}: {count}"
            for pool, count in sorted(
                Counter(_pool_of(ours, node) for node, _ in seen.pods.values()).items()
            )
        )
        ours_d, alone_d = deficits["ours"], deficits["alone"]
        print("What happened (the same Preempt, at the same moment, in both clusters):")
        print(f"  {'':<44}{'spot-rebalancer':>18}{'auto-drain alone':>19}")
        print(
            f"  {'lowest Ready count of ' + DEPLOYMENT + f' (of {replicas})':<44}"
            f"{ours_d.lowest if ours_d.lowest is not None else '?':>18}"
            f"{alone_d.lowest if alone_d.lowest is not None else '?':>19}"
        )
        print(
            f"  {'Ready deficit, replica-seconds':<44}"
            f"{ours_d.replica_seconds:>18.1f}{alone_d.replica_seconds:>19.1f}"
        )
        print(
            f"  {'AKS auto-drain: evictions done / refused':<44}"
            f"{f'{ours.auto_drain.evictions} / {ours.auto_drain.blocked}':>18}"
            f"{f'{alone.auto_drain.evictions} / {alone.auto_drain.blocked}':>19}"
        )
        if ours.auto_drain.blocked and not ours.auto_drain.evictions:
            print(
                "  With us, AKS's evictions of the doomed replica were refused (the timeline says "
                "why) until we\n  deleted it ourselves near the deadline."
            )
        if seen.drained_at is not None:
            print(
                f"  Our node was drained {seen.drained_at:.1f} s after the notice, "
                f"{notice_seconds - seen.drained_at:.1f} s before NotBefore."
            )
        else:
            print("  Our node was NOT marked drained before the VM went away.")
        print(
            f"  Unavoidable: a {notice_seconds:g} s notice against a {load:g} s model load"
            + (f" and {provisioning:g} s to provision a node" if provisioning else "")
            + f" is {unavoidable:.0f} replica-seconds;\n  we allow ourselves the controller's "
            f"{margin:g} s drain margin and {REACTION_SECONDS:g} s of reaction: "
            f"{allowed:.0f} replica-seconds."
        )
        bought = alone_d.replica_seconds - ours_d.replica_seconds
        print(
            f"  What spot-rebalancer bought here: {bought:.1f} replica-seconds. What no one can"
            " buy: the unavoidable\n  (placement before the notice is for that: docs/placement.md)."
        )
        print(f"  Replicas now run on: {placement}.")
        print(f"  Logs of the agents and the controller: {workdir}")
        print(
            "  "
            + (
                "OK: no more capacity lost than the scenario makes unavoidable."
                if ok
                else "NOT OK: more capacity lost than the scenario makes unavoidable, or the "
                "node was not drained in time; see the logs."
            )
        )
        code = 0 if ok else 1
        await alone.stop()
        if keep:
            await _keep(ours, processes, workdir)
        return code
    finally:
        await processes.stop()
        await ours.stop()
        await alone.stop()


async def _keep(cluster: ClusterEmulator, processes: RebalancerProcesses, workdir: Path) -> None:
    """`--keep`: the first cluster, its agents and its controller run on until Ctrl-C."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    assert cluster.urls is not None
    print(f"\nKept running (--keep): cluster emulator on {cluster.urls.api}")
    print(f"  kubeconfig:  {cluster.urls.kubeconfig}")
    for line in explore_lines(cluster, processes):
        print(line, flush=True)
    await run_rebalancer(cluster, workdir, stop, processes=processes)


def run_demo(*, notice_seconds: float = 30.0, keep: bool = False) -> int:
    return asyncio.run(_demo(notice_seconds, keep=keep))

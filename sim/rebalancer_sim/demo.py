"""`rebalancer demo`: one spot eviction on an emulated AKS GPU cluster, told as a timeline.

The cluster emulator (Kubernetes API + IMDS on 127.0.0.1) runs in this process; the agents (one
per spot node) and the controller run as real `rebalancer` processes against it, exactly as they
would in a cluster. A Preempt is scheduled for one spot GPU node; the timeline shows what each
part did and when, and the summary says whether serving capacity ever dipped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rebalancer import names
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario

DEMO_SCENARIO = """
name: demo
description: a small AKS GPU cluster serving one model on spot, with an on-demand fallback pool
cluster: {name: demo, region: eastus}
settings: {nodeDeleteDelaySeconds: 3, shutdownSeconds: 1}
pools:
  - {name: system, priority: regular, mode: system, vmSize: Standard_D4s_v5, zones: ["1"],
     cpu: 4, memory: 16Gi, gpus: 0, count: 1}
  - {name: gpuspot, priority: spot, vmSize: Standard_NC24ads_A100_v4, zones: ["1"], cpu: 24,
     memory: 220Gi, gpus: 1, count: 3, pricePerHour: 3.673, spotPricePerHour: 0.444433}
  - {name: gpuondemand, priority: regular, vmSize: Standard_NC24ads_A100_v4, zones: ["1"],
     cpu: 24, memory: 220Gi, gpus: 1, count: 1, minCount: 1, maxCount: 3,
     provisioningSeconds: 10, pricePerHour: 3.673}
workloads:
  - name: llm
    namespace: inference
    replicas: 3
    requests: {cpu: "4", memory: 32Gi, nvidia.com/gpu: 1}
    tolerations:
      - kubernetes.azure.com/scalesetpriority=spot:NoSchedule
      - sku=gpu:NoSchedule
    preferSpot: 100
    startupSeconds: 6
    terminationGracePeriodSeconds: 10
    pdb: {maxUnavailable: 1}
"""


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


def _has_condition(cluster: ClusterEmulator, node_name: str) -> bool:
    node = cluster.store.get(R.NODES, "", node_name)
    conditions = (node or {"status": {}})["status"].get("conditions") or []
    return any(c["type"] == names.CONDITION_TYPE for c in conditions)


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "rebalancer.cli", *args],
        env={**os.environ, **env},
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


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
    deployment = store.get(R.DEPLOYMENTS, "inference", "llm")
    if deployment is not None:
        replicas = int(deployment["spec"]["replicas"])
        if seen.replicas and replicas != seen.replicas:
            verb = "surged" if replicas > seen.replicas else "scaled back"
            timeline.say(
                "controller", f"{verb} Deployment llm: replicas {seen.replicas} -> {replicas}"
            )
        seen.replicas = replicas
    pods = {
        p["metadata"]["name"]: p
        for p in store.items(R.PODS, "inference")
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


async def _demo(notice_seconds: float) -> int:
    scenario = parse_scenario(yaml.safe_load(DEMO_SCENARIO))
    workdir = Path(tempfile.mkdtemp(prefix="rebalancer-demo-"))
    cluster = ClusterEmulator(scenario)
    urls = await cluster.start(kubeconfig_dir=workdir)
    processes: list[subprocess.Popen[bytes]] = []
    timeline = Timeline()
    print("spot-rebalancer demo: an emulated AKS cluster with 3 spot A100 nodes, 1 on-demand A100")
    print("node and 1 system node; Deployment inference/llm, 3 replicas, model load 6 s.")
    print(f"Kubernetes API {urls.api}  (kubeconfig {urls.kubeconfig}); logs in {workdir}\n")
    try:
        await cluster.wait_for(
            lambda: (
                sum(
                    1
                    for p in cluster.pods("inference")
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions") or []
                    )
                )
                == 3
            ),
            timeout=30,
            message="the 3 replicas Ready",
        )
        common = {"REBALANCER_KUBECONFIG": str(urls.kubeconfig), "REBALANCER_LOG_FORMAT": "json"}
        spot_nodes = sorted(n["metadata"]["name"] for n in cluster.nodes("gpuspot"))
        for index, node_name in enumerate(spot_nodes):
            env = {
                **common,
                "NODE_NAME": node_name,
                "REBALANCER_IMDS_URL": cluster.imds_url_for(node_name),
                "REBALANCER_HTTP_HOST": "127.0.0.1",
                "REBALANCER_HTTP_PORT": "0",
            }
            processes.append(_spawn(["agent"], env, workdir / f"agent-{index}.log"))
        controller_env = {
            **common,
            "REBALANCER_NAMESPACE": "default",
            "REBALANCER_HTTP_HOST": "127.0.0.1",
            "REBALANCER_HTTP_PORT": "0",
            "REBALANCER_IDENTITY": "controller-0",
        }
        processes.append(_spawn(["controller"], controller_env, workdir / "controller.log"))
        await cluster.wait_for(
            lambda: all(
                any(
                    c["type"] == names.CONDITION_TYPE
                    for c in (cluster.store.get(R.NODES, "", n) or {"status": {}})["status"].get(
                        "conditions"
                    )
                    or []
                )
                for n in spot_nodes
            ),
            timeout=30,
            message="the agents to report in",
        )
        await asyncio.sleep(2.0)  # the controller lists, elects itself and plans once

        seen = Observed()
        _observe(cluster, spot_nodes[0], "", seen, Timeline(lines=[]))  # the state before
        timeline.started = time.monotonic()
        doomed = spot_nodes[0]
        event = cluster.preempt(doomed, notice_seconds=notice_seconds)
        vm = cluster.vm_name_for(doomed)
        timeline.say("azure", f"Preempt for VM {vm} ({doomed}), {notice_seconds:g} s of notice")
        deadline = time.monotonic() + notice_seconds + 30
        while time.monotonic() < deadline:
            _observe(cluster, doomed, event.event_id, seen, timeline)
            ready = sum(1 for _, r in seen.pods.values() if r)
            if seen.node_state == "deleted" and seen.replicas == 3 and ready == 3:
                break
            if any(p.poll() is not None for p in processes):
                timeline.say("demo", "a rebalancer process exited early; see its log")
                break
            await asyncio.sleep(0.05)
        print()
        ok = seen.min_ready >= 3 and seen.node_state == "deleted" and seen.drained
        placement = ", ".join(
            f"{pool}: {count}"
            for pool, count in sorted(
                Counter(_pool_of(cluster, node) for node, _ in seen.pods.values()).items()
            )
        )
        print("What happened:")
        print(f"  Ready replicas of llm, lowest during the eviction: {seen.min_ready} of 3.")
        if seen.drained_at is not None:
            print(
                f"  Node drained {seen.drained_at:.1f} s after the notice, "
                f"{notice_seconds - seen.drained_at:.1f} s before the deadline."
            )
        else:
            print("  The node was NOT drained before the VM went away.")
        print(f"  Replicas now run on: {placement}.")
        print(f"  Logs of the agents and the controller: {workdir}")
        print("  " + ("OK: no capacity was lost." if ok else "NOT OK: see the logs."))
        return 0 if ok else 1
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        await cluster.stop()


def run_demo(*, notice_seconds: float = 30.0) -> int:
    return asyncio.run(_demo(notice_seconds))

"""Placement by policy against today's reactive behaviour, on the emulator with real processes:
three spot A100 pools in three zones whose capacity follows real spot traces (issue 14).

    python -m bench.bench_placement            # 2 windows x 4 variants at once, about 16 minutes
    python -m bench.bench_placement --variants reactive,spread --start 2480 --ticks 12

One invocation runs the same emulated AKS cluster several times at once, in this process (one
per trace window and variant), each with its own `rebalancer controller` and one
`rebalancer agent` per spot node as real processes (as `tests/e2e/rig.py` runs them):

- pools `gpuspot1`, `gpuspot2`, `gpuspot3`, one zone each (eastus-1, -2, -3), `--nodes` A100
  nodes each (1 GPU per node), not autoscaled: the trace alone takes and gives back their VMs;
  an on-demand A100 pool autoscaled from 0 (60 s to provision), declared to the controller with
  REBALANCER_POOLS; the spot VMs take 60 s to provision too;
- Deployment inference/llm of `--replicas` replicas, each loading its model for 90 s, with a
  PDB maxUnavailable 1; 30 s Preempt notices; AKS node auto-drain on, as in AKS;
- each spot pool replays one trace of `--traces` (by default the three zones of
  availability/16-node/aws-08-27-2023: us-east-2b, us-west-2a and us-west-2c, in that order)
  from tick `--start` for `--ticks` ticks, with the 300 s between ticks compressed to `--gap`
  seconds. The default windows, three hours each:
  - ticks 71-106: shallow dips in us-east-2b, then one wave that empties both us-west-2 zones
    in the same tick (a correlated wave) and, two ticks later, us-east-2b for three ticks;
  - ticks 2480-2515: us-east-2b (at 12 of 16 at the start) emptied five times, us-west-2a once
    near the end, us-west-2c never: waves in one zone at a time.
  Which of our VMs a drop takes is the simulator's own model
  (`rebalancer.simulate.trace.slot_timeline`, seeded with `--seed`): a trace of 16 instances is
  16 slots, our nodes hold some, a drop from 16 to 10 takes each with probability 6/16, a wave
  to 0 takes them all; a pool below `--nodes` gets a VM back as soon as a slot is free again.
  Every run of a window gets exactly the same slot history, at the same moments (one clock).

The runs (`--variants`, comma-separated):

- `reactive`: today's controller, no policy and no webhook: the scheduler and the workload's
  preferSpot decide where replicas go; a replica under notice is replaced by a surge wherever
  the scheduler puts it (free spot nodes first);
- `spread`: the webhook on and `spot-rebalancer.io/spread: zone` (other keys at their defaults:
  max-risk high, min-on-demand 0, failover-to on-demand);
- `spread-spot`: the same with `failover-to: spot` (replacements go to the least used spot zone
  that is not under notice, on-demand only when none is left);
- `cautious`: `spread: zone`, `max-risk: medium`, `min-on-demand: 1` (one replica always on
  on-demand, and no replica placed in a spot zone the risk model calls high);
- `target`: `availability-target: 99.9` (docs/targets.md), with the target's recovery set as a
  user would for this cluster (`REBALANCER_TARGET_RECOVERY_SECONDS` = provisioning + load -
  notice = 120 s). Its record of waves is in wall time while the trace is compressed: it sees
  waves 15 times as often as the trace had them, so it keeps more on-demand than it would.

All start alike: the replicas are created once the processes run (and the webhook has its
certificate), while each spot pool has one node, so every run starts with one replica per zone
(what kube-scheduler's default zone spreading would do; the emulator's scheduler spreads per
node only, see below), except `cautious`, whose webhook puts one on on-demand. Then the pools
are filled to `--nodes` and the trace starts.

Measured over the window, for each run, with the simulator's own measuring code
(`rebalancer.simulate.engine.RunResult` over `Sample`s taken every 0.1 s, as
`tests/virtual/test_simulate_faithful.py` does): availability (the fraction of time with all
replicas Ready), the lowest Ready count, the deficit in replica-seconds, cost (every GPU VM
billed at the bundled prices from its request until it is gone: idle spot nodes too, the same
in every run), the share of Ready replica-time served from on-demand; and how many of our
Preempts hit a replica.

Time: notices, model loads, provisioning and shutdowns are real; the trace is compressed by
300 / `--gap` (15 by default), and so are the timers that count in the trace's time: the
controller's cool-down and return quiet time (600 s each by default) and the autoscaler's
scale-down delay (600 s). The risk model is not compressed: it starts from its prior (0.05
evictions per node-hour, at the edge of low and medium) and learns from the Preempts it sees,
each a full eviction in its history (half-life 6 h: nothing decays within a run); a few
Preempts in a zone make it high, so `max-risk` refuses a zone only after it has been hit (the
printout gives the levels at the end).

Not like a real cluster: the emulator's scheduler spreads a workload's replicas over nodes, not
zones (kube-scheduler's default PodTopologySpread also scores zones), so `reactive`
replacements and returns go to the first free spot nodes by name outside a cooled-down zone;
one process on a shared machine, so every step is a little late (about a second).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rebalancer import names
from rebalancer.azure.prices import BUNDLED
from rebalancer.simulate.engine import RunResult
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.trace import SlotEvent, SlotTimeline, Trace, slot_timeline
from rebalancer.simulate.workload import parse_distribution
from rebalancer.simulate.world import Counters, Sample
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from tests.e2e.rig import Rig, ready, running
from tests.helpers import free_port

DEFAULT_TRACES = (
    Path(__file__).resolve().parents[2]
    / "shared/data/spot-traces/availability/16-node/aws-08-27-2023"
)
SPOT_POOLS = ("gpuspot1", "gpuspot2", "gpuspot3")  # zones 1, 2 and 3
ON_DEMAND_POOL = "gpuondemand"
VM_SIZE = "Standard_NC24ads_A100_v4"
REGION = "eastus"
NAMESPACE, WORKLOAD = "inference", "llm"
GPU_TOLERATIONS = ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule", "sku=gpu:NoSchedule"]

LOAD_SECONDS = 90.0
NOTICE_SECONDS = 30.0
PROVISION_SECONDS = 60.0  # on-demand and spot GPU nodes alike
SHUTDOWN_SECONDS = 5.0
GRACE_SECONDS = 30
TRACE_TIMERS_SECONDS = 600.0  # cool-down, return quiet time, autoscaler scale-down: compressed
SAMPLE_SECONDS = 0.1
# The chart's webhook objectSelector: only pods with this label reach the webhook.
PLACEMENT_LABEL = f"{names.PREFIX}/placement"


@dataclass(frozen=True)
class Variant:
    name: str
    annotations: dict[str, str]  # the placement policy on the Deployment; none: no webhook

    @property
    def webhook(self) -> bool:
        return bool(self.annotations)

    @property
    def label(self) -> str:
        if not self.annotations:
            return "no policy, no webhook"
        return ", ".join(
            f"{key.removeprefix(names.PREFIX + '/')}: {value}"
            for key, value in self.annotations.items()
        )


VARIANTS = {
    v.name: v
    for v in (
        Variant("reactive", {}),
        Variant("spread", {names.SPREAD: "zone"}),
        Variant("spread-spot", {names.SPREAD: "zone", names.FAILOVER_TO: "spot"}),
        Variant(
            "cautious",
            {names.SPREAD: "zone", names.MAX_RISK: "medium", names.MIN_ON_DEMAND: "1"},
        ),
        Variant("target", {names.AVAILABILITY_TARGET: "99.9"}),
    )
}


def cluster_data(replicas: int) -> dict[str, Any]:
    """One spot node per zone to start with (the trace's driver adds the others); the
    Deployment at 0 replicas until the processes run."""
    spot = [
        {"name": pool, "priority": "spot", "vmSize": VM_SIZE, "zones": [str(zone)],
         "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 1,
         "provisioningSeconds": PROVISION_SECONDS}
        for zone, pool in enumerate(SPOT_POOLS, start=1)
    ]  # fmt: skip
    return {
        "name": "bench-placement",
        "cluster": {"name": "bench-placement", "region": REGION},
        "settings": {
            "nodeDeleteDelaySeconds": 5,
            "nodeAutoDrain": True,
            "nodeProblemDetectorSeconds": 1,  # new spot nodes report before their agent runs
            "shutdownSeconds": SHUTDOWN_SECONDS,
        },
        "pools": [
            {"name": "system", "priority": "regular", "mode": "system", "vmSize": "Standard_D4s_v5",
             "zones": ["1"], "cpu": 4, "memory": "16Gi", "gpus": 0, "count": 1},
            *spot,
            {"name": ON_DEMAND_POOL, "priority": "regular", "vmSize": VM_SIZE,
             "zones": ["1", "2", "3"], "cpu": 24, "memory": "220Gi", "gpus": 1, "count": 0,
             "minCount": 0, "maxCount": 2 * replicas, "provisioningSeconds": PROVISION_SECONDS},
        ],
        "workloads": [
            {"name": WORKLOAD, "namespace": NAMESPACE, "replicas": 0,
             "labels": {"app": WORKLOAD, PLACEMENT_LABEL: "enabled"},
             "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": 1},
             "tolerations": GPU_TOLERATIONS, "preferSpot": 100,
             "startupSeconds": LOAD_SECONDS, "shutdownSeconds": SHUTDOWN_SECONDS,
             "terminationGracePeriodSeconds": GRACE_SECONDS, "pdb": {"maxUnavailable": 1}},
        ],
    }  # fmt: skip


# The on-demand pool is at 0 nodes until it is needed: declared, as the README asks.
DECLARED_ON_DEMAND_POOL = {
    "name": ON_DEMAND_POOL,
    "spot": False,
    "gpus": 1,
    "labels": {names.AKS_AGENTPOOL_LABEL: ON_DEMAND_POOL},
    "taints": ["sku=gpu:NoSchedule"],
}


def gpu_price(pool_name: str, cluster: ClusterEmulator) -> float:
    pool = cluster.cloud.pools[pool_name]
    price = BUNDLED.price(pool.vm_size, cluster.cloud.cluster.region, spot=pool.is_spot)
    assert price is not None, (pool.vm_size, cluster.cloud.cluster.region)
    return price


@dataclass
class Run:
    """One emulated cluster, its processes, its copy of the slot history and its samples."""

    variant: Variant
    rig: Rig
    nodes_per_pool: int
    alive: dict[str, set[int]] = field(default_factory=dict)  # pool -> alive slots
    occupied: dict[str, dict[int, str]] = field(default_factory=dict)  # pool -> slot -> node
    doomed: set[str] = field(default_factory=set)  # nodes with a Preempt
    preempts: Counter[str] = field(default_factory=Counter)  # pool -> Preempts of our nodes
    replicas_hit: int = 0  # replicas on a node when its Preempt came
    samples: list[Sample] = field(default_factory=list)
    ready_seconds: float = 0.0  # Ready replica-seconds
    on_demand_ready_seconds: float = 0.0  # of them on on-demand nodes
    spot_cost: float = 0.0  # USD, the RunResult's cost split by capacity
    on_demand_cost: float = 0.0
    last_on_demand: int = 0
    last_rates: tuple[float, float] = (0.0, 0.0)
    log: list[str] = field(default_factory=list)  # capacity events and placement changes
    last_state: str = ""
    webhook_port: int = 0
    agent_restarts: int = 0

    @property
    def cluster(self) -> ClusterEmulator:
        return self.rig.cluster

    # ---- capacity ----------------------------------------------------------------------------

    def start_slots(self, timelines: dict[str, SlotTimeline]) -> None:
        """Each pool's first node takes the lowest alive slot, as the simulator's nodes do."""
        for pool in SPOT_POOLS:
            self.alive[pool] = set(timelines[pool].initially_alive)
            self.occupied[pool] = {}
            for node in self.rig.pool_nodes(pool):
                free = self.alive[pool] - set(self.occupied[pool])
                if free:
                    self.occupied[pool][min(free)] = node

    def apply(self, pool: str, event: SlotEvent, at: float) -> None:
        if event.alive:
            self.alive[pool].add(event.slot)
            return
        self.alive[pool].discard(event.slot)
        node = self.occupied[pool].get(event.slot)
        if node is None or node in self.doomed:
            return
        vm = self.cluster.cloud.vms.get(node)
        if vm is None:
            return
        if vm.state == "provisioning":  # Azure no longer has room for the request
            self.cluster.cloud.take_away(node)
            self.log.append(f"{at:7.1f}s {pool}: request for {node} refused (slot lost)")
            return
        on_node = [p for p in self.rig.pods(NAMESPACE) if p["spec"].get("nodeName") == node]
        self.cluster.preempt(node, notice_seconds=event.notice_seconds)
        self.doomed.add(node)
        self.preempts[pool] += 1
        self.replicas_hit += len(on_node)
        self.log.append(
            f"{at:7.1f}s {pool}: Preempt {node} ({event.notice_seconds:g} s notice), "
            f"{len(on_node)} replica(s) on it"
        )

    def maintain(self, *, at: float, boot_now: bool = False) -> None:
        """Free the slots of VMs that are gone; give a pool below its size a VM on a free
        alive slot; an agent on every spot node, none on nodes that are gone."""
        cloud = self.cluster.cloud
        for pool in SPOT_POOLS:
            occupied = self.occupied[pool]
            for slot, node in list(occupied.items()):
                vm = cloud.vms.get(node)
                if vm is None or vm.state not in ("provisioning", "running"):
                    del occupied[slot]
                    self.doomed.discard(node)
            serving = [n for n in occupied.values() if n not in self.doomed]
            free = sorted(self.alive[pool] - set(occupied))
            for slot in free[: max(0, self.nodes_per_pool - len(serving))]:
                vm = cloud.create_vm(pool, delay_seconds=0 if boot_now else PROVISION_SECONDS)
                occupied[slot] = vm.node_name
                self.log.append(f"{at:7.1f}s {pool}: new VM {vm.node_name} (slot {slot})")
        live = {node for pool in SPOT_POOLS for node in self.rig.pool_nodes(pool)}
        for name in [n for n in self.rig.processes if n.startswith("agent-")]:
            if name.removeprefix("agent-") not in live:
                self.rig.stop(name)
            elif self.rig.processes[name].poll() is not None:  # as the DaemonSet would
                del self.rig.processes[name]
                self.agent_restarts += 1
                self.log.append(f"{at:7.1f}s {name} exited; restarted")
        for node in sorted(live):
            if f"agent-{node}" not in self.rig.processes:
                self.start_agent(node)

    def start_agent(self, node: str) -> None:
        """`rebalancer agent` for the node; its HTTP port chosen by the system (port 0): dozens
        of processes start here, and a free port picked in advance can be taken meanwhile."""
        self.rig.spawn(
            f"agent-{node}",
            ["agent"],
            NODE_NAME=node,
            REBALANCER_IMDS_URL=self.rig.imds_url_for(node),
            REBALANCER_HTTP_PORT="0",
        )

    # ---- measuring ---------------------------------------------------------------------------

    def placement(self) -> tuple[int, int, str]:
        """Ready replicas, of them on on-demand, and where the replicas are (* not Ready)."""
        where: Counter[str] = Counter()
        ready_count = on_demand = 0
        for pod in self.rig.pods(NAMESPACE):
            node = pod["spec"].get("nodeName")
            pool = self.rig.pool_of(node) if node else ""
            if pool in SPOT_POOLS:
                key = f"z{SPOT_POOLS.index(pool) + 1}"
            else:
                key = "od" if pool else "pending"
            is_ready = ready(pod)
            where[key + ("" if is_ready else "*")] += 1
            ready_count += is_ready
            on_demand += is_ready and pool == ON_DEMAND_POOL
        return ready_count, on_demand, " ".join(f"{k}:{n}" for k, n in sorted(where.items()))

    def billed_rates(self) -> tuple[float, float]:
        """USD per hour of the GPU VMs Azure bills now (from the request until gone): spot,
        on-demand."""
        spot = on_demand = 0.0
        for vm in self.cluster.cloud.vms.values():
            if vm.state in ("provisioning", "running") and vm.pool.gpus:
                price = gpu_price(vm.pool.name, self.cluster)
                if vm.pool.is_spot:
                    spot += price
                else:
                    on_demand += price
        return spot, on_demand

    def sample(self, at: float) -> None:
        cloud = self.cluster.cloud
        ready_count, on_demand, where = self.placement()
        spot_rate, on_demand_rate = self.billed_rates()
        if self.samples:  # the interval since the last sample, at the last sample's values
            last, elapsed = self.samples[-1], at - self.samples[-1].at
            self.ready_seconds += last.ready * elapsed
            self.on_demand_ready_seconds += self.last_on_demand * elapsed
            self.spot_cost += self.last_rates[0] * elapsed / 3600
            self.on_demand_cost += self.last_rates[1] * elapsed / 3600
        self.last_on_demand, self.last_rates = on_demand, (spot_rate, on_demand_rate)
        sample = Sample(
            at=at,
            ready=ready_count,
            cost_rate=spot_rate + on_demand_rate,
            on_demand_nodes=len(cloud.pool_vms(ON_DEMAND_POOL)),
            spot_nodes=sum(len(cloud.pool_vms(pool)) for pool in SPOT_POOLS),
        )
        self.samples.append(sample)
        state = f"Ready {ready_count}  [{where}]  on-demand nodes {sample.on_demand_nodes}"
        if state != self.last_state:
            self.log.append(f"{at:7.1f}s {state}")
            self.last_state = state

    def result(self, horizon: float, replicas: int) -> RunResult:
        on_demand_price = gpu_price(ON_DEMAND_POOL, self.cluster)
        return RunResult(
            policy=self.variant.name,
            label="emulator",
            horizon=horizon,
            needed=replicas,
            samples=tuple(self.samples),
            counters=Counters(),
            all_on_demand_cost=replicas * on_demand_price * horizon / 3600.0,
            wall_seconds=horizon,
        )


def window(trace: Trace, *, start: int, ticks: int, gap: float) -> Trace:
    data = trace.data[start : start + ticks]
    if len(data) < ticks:
        raise SystemExit(f"{trace.source}: only {len(trace.data)} ticks, window ends past it")
    return Trace(trace.name, trace.source, gap, data)


def controller_env(variant: Variant, *, compressed_timer: float, port: int) -> dict[str, str]:
    env = {
        "REBALANCER_POOLS": json.dumps([DECLARED_ON_DEMAND_POOL]),
        "REBALANCER_COOLDOWN_SECONDS": str(compressed_timer),
        "REBALANCER_RETURN_QUIET_SECONDS": str(compressed_timer),
    }
    if variant.webhook:
        env |= {"REBALANCER_WEBHOOK_ENABLED": "true", "REBALANCER_WEBHOOK_PORT": str(port)}
    if names.AVAILABILITY_TARGET in variant.annotations:
        # As a user sets it for this cluster: an on-demand node plus the load, less the notice.
        recovery = PROVISION_SECONDS + LOAD_SECONDS - NOTICE_SECONDS
        env["REBALANCER_TARGET_RECOVERY_SECONDS"] = str(recovery)
    return env


async def start_run(
    stack: contextlib.AsyncExitStack,
    variant: Variant,
    *,
    workdir: Path,
    replicas: int,
    nodes_per_pool: int,
    compressed_timer: float,
) -> Run:
    def prepare(cluster: ClusterEmulator) -> None:
        cluster.autoscaler.scale_down_unneeded_seconds = compressed_timer

    rig = await stack.enter_async_context(running(workdir, cluster_data(replicas), prepare=prepare))
    run = Run(variant=variant, rig=rig, nodes_per_pool=nodes_per_pool)
    if variant.webhook:
        deployment = copy.deepcopy(rig.deployment(WORKLOAD, NAMESPACE))
        deployment["metadata"].setdefault("annotations", {}).update(variant.annotations)
        rig.cluster.store.update(R.DEPLOYMENTS, deployment)
        run.webhook_port = free_port()
        rig.register_webhook(run.webhook_port)
    for pool in SPOT_POOLS:
        for node in rig.pool_nodes(pool):
            run.start_agent(node)
    rig.start_controller(
        **controller_env(variant, compressed_timer=compressed_timer, port=run.webhook_port)
    )
    return run


async def warm_up(run: Run, replicas: int) -> None:
    """The controller synced (and its CA in the webhook's configuration), then the replicas
    created and Ready."""
    rig = run.rig
    await rig.wait_for_metric("controller-0", "rebalancer_controller_cache_synced", 1, timeout=60)
    if run.variant.webhook:

        def ca_bundle() -> bool:
            configuration = rig.cluster.store.get(R.MUTATING_WEBHOOKS, "", "spot-rebalancer")
            client = (configuration or {}).get("webhooks", [{}])[0].get("clientConfig", {})
            return bool(client.get("caBundle"))

        await rig.wait_for(ca_bundle, timeout=60, what="the controller's CA in the webhook")
        deadline = time.monotonic() + 30
        while True:  # it listens a moment after putting its CA in; before, pods go unplaced
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", run.webhook_port)
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{run.variant.name}: the webhook never listened") from None
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            break
        await rig.more_passes("controller-0", 2)  # it answers not_ready before its first pass
    rig.cluster.scale(WORKLOAD, replicas)
    await rig.wait_for(
        lambda: rig.ready_count(NAMESPACE, WORKLOAD) >= replicas,
        timeout=LOAD_SECONDS + PROVISION_SECONDS + 120,
        what=f"{replicas} Ready replicas ({run.variant.name})",
    )


def check_processes(runs: list[Run]) -> None:
    """A controller that exits ends the benchmark (agents are restarted by `maintain`)."""
    for run in runs:
        for name, process in run.rig.processes.items():
            if not name.startswith("agent-") and process.poll() is not None:
                raise SystemExit(
                    f"{run.variant.name}: {name} exited ({process.returncode}); "
                    f"see {run.rig.workdir}/{name}.log"
                )


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text: (name, labels, value) per sample line."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        sample, value = line.rsplit(" ", 1)
        name, _, rest = sample.partition("{")
        labels = {}
        for part in rest.rstrip("}").split('",'):
            key, _, label = part.partition('="')
            if key:
                labels[key] = label.rstrip('"')
        out.append((name, labels, float(value)))
    return out


async def final_metrics(run: Run) -> dict[str, str]:
    """What the controller says it did: surges, returns, moves, placements, risk levels."""
    totals: Counter[str] = Counter()
    levels: dict[str, str] = {}
    for name, labels, value in metric_samples(await run.rig.metrics("controller-0")):
        outcome = labels.get("outcome", "")
        if name == "rebalancer_controller_failovers_total" and labels.get("stage") == "started":
            totals["surges"] += int(value)
        elif name == "rebalancer_controller_returns_total" and outcome == "started":
            totals["returns started"] += int(value)
        elif name == "rebalancer_controller_returns_total" and outcome == "ReturnedToSpot":
            totals["returned"] += int(value)
        elif name == "rebalancer_controller_risk_moves_total" and outcome == "started":
            totals["moves started"] += int(value)
        elif name == "rebalancer_controller_risk_moves_total" and outcome == "MovedOffRisk":
            totals["moved"] += int(value)
        elif name == "rebalancer_placements_total":
            totals[f"placed {labels.get('capacity')}"] += int(value)
        elif name == "rebalancer_pool_eviction_risk_level" and labels.get("pool") in SPOT_POOLS:
            levels[labels["pool"]] = ("low", "medium", "high")[int(value)]
    out = {key: str(value) for key, value in totals.items()}
    out["risk at the end"] = " ".join(
        f"z{SPOT_POOLS.index(p) + 1}:{levels[p]}" for p in SPOT_POOLS if p in levels
    )
    return out


def table(rows: list[tuple[str, list[str]]], headers: list[str]) -> str:
    width = max(len(label) for label, _ in rows) + 2
    columns = [max(len(h), *(len(r[1][i]) for r in rows)) + 2 for i, h in enumerate(headers)]
    lines = [" " * width + "".join(h.rjust(c) for h, c in zip(headers, columns, strict=True))]
    for label, values in rows:
        lines.append(
            label.ljust(width) + "".join(v.rjust(c) for v, c in zip(values, columns, strict=True))
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Window:
    """One stretch of the three traces, compressed, and the slot history it makes."""

    start: int
    traces: dict[str, Trace]  # spot pool -> its trace's window
    timelines: dict[str, SlotTimeline]
    events: tuple[tuple[float, str, SlotEvent], ...]  # (at, pool, event), in time order

    @classmethod
    def of(cls, traces: list[Trace], *, start: int, ticks: int, gap: float, seed: int) -> Window:
        windows = {
            pool: window(t, start=start, ticks=ticks, gap=gap)
            for pool, t in zip(SPOT_POOLS, traces, strict=True)
        }
        notice = parse_distribution(str(NOTICE_SECONDS), what="notice")
        timelines = {
            pool: slot_timeline(w, seed=seed, notice=notice, until=ticks * gap)
            for pool, w in windows.items()
        }
        events = sorted(
            ((e.at, pool, e) for pool, tl in timelines.items() for e in tl.events),
            key=lambda item: (item[0], item[1], item[2].slot),
        )
        return cls(start, windows, timelines, tuple(events))

    def describe(self, real_gap: float) -> list[str]:
        lines = []
        for pool, w in self.traces.items():
            drops = sum(1 for a, b in zip(w.data, w.data[1:], strict=False) if b < a)
            lines.append(
                f"  {pool}: {Path(w.source).stem} ticks {self.start}-{self.start + len(w.data) - 1}"
                f" ({drops} drops), instances per tick (f: 15 or 16): "
                + "".join(f"{min(v, 15):x}" for v in w.data)
            )
        return lines


def report(runs: list[Run], metrics: list[dict[str, str]], *, horizon: float, replicas: int) -> str:
    """The side-by-side table of one window's runs."""
    results = [run.result(horizon, replicas) for run in runs]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: list[str]) -> None:
        rows.append((label, values))

    def webhook_only(values: list[str]) -> list[str]:
        return [v if run.variant.webhook else "-" for v, run in zip(values, runs, strict=True)]

    row("availability (all replicas Ready)", [f"{r.availability:.1%}" for r in results])
    row("lowest Ready", [f"{min(s.ready for s in r.samples)} of {r.needed}" for r in results])
    row(
        "outages (count, longest s)",
        [f"{len(r.outages)}, {max(r.outages, default=0):.0f}" for r in results],
    )
    row("deficit, replica-seconds", [f"{r.deficit_replica_hours * 3600:.0f}" for r in results])
    row("Preempts of our nodes", [str(sum(run.preempts.values())) for run in runs])
    row("  replicas on them", [str(run.replicas_hit) for run in runs])
    row("cost, USD (GPU VMs billed)", [f"{r.cost:.3f}" for r in results])
    row("  spot / on-demand", [f"{run.spot_cost:.3f} / {run.on_demand_cost:.3f}" for run in runs])
    row("  of all replicas on on-demand", [f"{r.cost / r.all_on_demand_cost:.0%}" for r in results])
    row(
        "Ready replica-time on on-demand",
        [f"{run.on_demand_ready_seconds / max(run.ready_seconds, 1e-9):.0%}" for run in runs],
    )
    for key in ("surges", "returns started", "returned", "moves started", "moved"):
        row(f"controller: {key}", [m.get(key, "0") for m in metrics])
    row(
        "webhook: placed spot / on-demand",
        webhook_only(
            [f"{m.get('placed spot', '0')} / {m.get('placed on_demand', '0')}" for m in metrics]
        ),
    )
    row(
        "webhook calls failed open",
        webhook_only([str(run.cluster.admission.outcomes().get("failed-open", 0)) for run in runs]),
    )
    row("risk levels at the end", [m.get("risk at the end", "") for m in metrics])
    lines = ["", table(rows, [run.variant.name for run in runs])]
    if len({tuple(sorted(run.preempts.items())) for run in runs}) > 1:
        lines.append(
            "  note: the runs' Preempts per pool differ (a VM still provisioning when its slot "
            "was lost is refused instead): "
            + "; ".join(f"{run.variant.name} {dict(run.preempts)}" for run in runs)
        )
    restarts = {run.variant.name: run.agent_restarts for run in runs if run.agent_restarts}
    if restarts:
        lines.append(f"  note: agents that exited and were restarted: {restarts}")
    return "\n".join(lines)


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, list[str]]:
    """Run, print the figures; the runs' timelines (capacity events, placement changes)."""
    variants = [VARIANTS[name] for name in args.variants.split(",")]
    traces = load_traces([Path(args.traces)])[: len(SPOT_POOLS)]
    if len(traces) < len(SPOT_POOLS):
        raise SystemExit(f"{args.traces}: {len(SPOT_POOLS)} traces needed, found {len(traces)}")
    real_gap = traces[0].gap_seconds
    compression = real_gap / args.gap
    horizon = args.ticks * args.gap
    windows = [
        Window.of(traces, start=start, ticks=args.ticks, gap=args.gap, seed=args.seed)
        for start in args.starts
    ]
    compressed_timer = TRACE_TIMERS_SECONDS / compression
    print(
        f"{len(windows) * len(variants)} runs at once: {len(windows)} trace window(s) x "
        f"{len(variants)} variants; {args.replicas} replicas of {VM_SIZE} "
        f"({LOAD_SECONDS:g} s model load, {NOTICE_SECONDS:g} s notices), spot pools of "
        f"{args.nodes} nodes in zones 1-3 (gpuspot1-3), on-demand autoscaled from 0 "
        f"({PROVISION_SECONDS:g} s to provision, spot VMs too)"
    )
    print(
        f"  traces {args.traces}, {args.ticks} ticks each, one every {args.gap:g} s instead of "
        f"{real_gap:g} s (compressed {compression:g}x: {horizon:g} s of wall time for "
        f"{horizon * compression / 3600:g} h of the trace); cool-down, return quiet time and "
        f"scale-down delay {compressed_timer:g} s; seed {args.seed}; logs in {workdir}"
    )
    started_at = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        runs = {
            (w.start, v.name): await start_run(
                stack,
                v,
                workdir=workdir / f"{w.start}-{v.name}",
                replicas=args.replicas,
                nodes_per_pool=args.nodes,
                compressed_timer=compressed_timer,
            )
            for w in windows
            for v in variants
        }
        await asyncio.gather(*(warm_up(run, args.replicas) for run in runs.values()))
        for (start, _), run in runs.items():
            run.start_slots(next(w for w in windows if w.start == start).timelines)
            run.maintain(at=0.0, boot_now=True)
            run.sample(0.0)
        print(f"  warmed up in {time.monotonic() - started_at:.0f} s; the traces start")
        origin = time.monotonic()
        pending = {w.start: list(w.events) for w in windows}
        while (elapsed := time.monotonic() - origin) < horizon:
            for start, events in pending.items():
                while events and events[0][0] <= elapsed:
                    at, pool, event = events.pop(0)
                    for variant in variants:
                        runs[(start, variant.name)].apply(pool, event, at)
            for run in runs.values():
                run.maintain(at=elapsed)
                run.sample(elapsed)
            check_processes(list(runs.values()))
            await asyncio.sleep(SAMPLE_SECONDS)  # the sampling period, not a synchronisation
        for run in runs.values():
            run.sample(horizon)
        metrics = {key: await final_metrics(run) for key, run in runs.items()}
    wall = time.monotonic() - started_at
    for w in windows:
        print(f"\nwindow from tick {w.start}:")
        print("\n".join(w.describe(real_gap)))
        keys = [(w.start, v.name) for v in variants]
        print(
            report(
                [runs[k] for k in keys],
                [metrics[k] for k in keys],
                horizon=horizon,
                replicas=args.replicas,
            )
        )
    print()
    for v in variants:
        print(f"  {v.name}: {v.label}")
    print(f"  wall time {wall:.0f} s; timelines: {workdir}/<window>-<run>.timeline.txt")
    return {f"{start}-{name}": run.log for (start, name), run in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated runs")
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), help="folder of 3 traces")
    parser.add_argument(
        "--start", default="71,2480", help="first tick of each window, comma-separated"
    )
    parser.add_argument("--ticks", type=int, default=36, help="ticks in a window")
    parser.add_argument("--gap", type=float, default=20.0, help="wall seconds per trace tick")
    parser.add_argument("--nodes", type=int, default=2, help="nodes per spot pool")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="which slots a drop takes")
    parser.add_argument("--workdir", default=None, help="logs and timelines (default: a temp dir)")
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    args.starts = [int(start) for start in args.start.split(",")]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-placement-"))
    for start in args.starts:
        for name in args.variants.split(","):
            (workdir / f"{start}-{name}").mkdir(parents=True, exist_ok=True)
    timelines = asyncio.run(bench(args, workdir))
    for name, lines in timelines.items():
        (workdir / f"{name}.timeline.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A virtual AKS cluster on a virtual clock: pools, nodes, pods, Deployments, and the few
controllers a GPU inference service meets (ReplicaSet, scheduler, cluster autoscaler, spot
evictions). In memory, event-driven: the clock jumps to the next event (a trace tick, a node
ready, a pod ready or gone, a notice's deadline, a policy's timer), never steps by the second.

Kept deliberately small; what it leaves out is listed in docs/simulate.md. The model:
- spot pool = one trace: at most as many nodes as alive slots (see `trace.py`); a lost slot
  gives its node a Preempt notice and takes the node at the deadline;
- on-demand pool: never evicted, at most `on_demand_limit` nodes;
- cluster autoscaler: a pending pod that fits no node gets a new node in the cheapest pool that
  fits it, is below its maximum and is not backing off (balanced across equal pools), Ready
  after the pool's provisioning time; it does not know spot capacity before it asks: a request
  in a spot pool without a free alive slot fails after `max_node_provision_seconds` and the pool
  backs off (5 minutes doubling up to 30, the autoscaler's defaults); like the real one it reads
  required placement only, never preferred node affinity; keeps each pool at the minimum count
  the user gave (default 0); removes a node without pods after `scale_down_seconds`; a node is
  paid from the start of provisioning until it is gone (a failed request is not);
- admission: an optional mutating webhook (the controller's placement, through the adapter)
  that rewrites a new pod's node affinity, so a pod may carry its own spec, not its template's;
- scheduler: taints and tolerations, nodeSelector and required node affinity by Kubernetes'
  rules (`rebalancer.upstream.placement`), free GPUs; prefers nodes without untolerated
  PreferNoSchedule taints, then by preferred node affinity, then with fewer replicas of the same
  workload (`rebalancer.upstream.scheduling`);
- ReplicaSet: keeps each Deployment's replica count; scales down in upstream's order, the rule
  the emulator follows too (`rebalancer.upstream.replicaset`);
- a pod is Ready `load_seconds` after it lands on a Ready node; deleted, it stops serving at once
  and frees its GPU after min(shutdown time, grace period); deleted again with a shorter grace,
  that one ends it (the API server shortens a graceful deletion, never lengthens it).
Policies act on it through `SimPolicy.react` (see policies.py).

Two models of one cluster: this world and the emulator (`rebalancer_sim`, the tests' cluster,
which the product's image does not ship) take Kubernetes' rules from one place,
`rebalancer.upstream`, checked against the real control plane by the conformance cases in
tests/sim: the ReplicaSet's victim order, taint/toleration and node-affinity matching, the
scheduler's node preference. What stays apart, and why:
- objects: here plain records replayed against a capacity trace over weeks in seconds, there the
  API's JSON behind a real HTTP API; so each model reads its own objects into the rules' values;
- resources: here GPUs only (every replica needs whole GPUs and nothing else binds on a GPU
  node); the emulator fits cpu, memory, pods and extended resources and breaks ties by least
  allocated;
- cordon and readiness: here no DaemonSets, so a cordoned node takes no pod, and a node is Ready
  when provisioned; the emulator models the unschedulable and not-ready taints and pods that
  tolerate them;
- autoscaler: both ask for a node in the cheapest pool that fits the pending pod and may grow,
  after fitting it on nodes on their way. Here a spot request without capacity hangs, fails
  after `max_node_provision_seconds` and backs the pool off, equal pools are balanced and pools
  are kept at their minimum: the questions `rebalancer simulate` answers turn on that. The
  emulator's autoscaler knows spot capacity and asks no pool without it (no back-off), takes
  pools in name order on a tie, and also counts room on running nodes (its scheduler retries on
  its own period, this one's runs in the same pass);
- HPA: none here (the replica count is the scenario's; a trace of load would be needed); the
  emulator's `hpa.py` follows upstream's arithmetic. When a load trace comes, its arithmetic
  belongs in `rebalancer.upstream`.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rebalancer import names
from rebalancer.simulate.adapter import Taint
from rebalancer.simulate.trace import SlotEvent, SlotTimeline
from rebalancer.simulate.workload import Distribution, Scenario
from rebalancer.upstream import placement
from rebalancer.upstream import replicaset as upstream
from rebalancer.upstream.scheduling import node_preference

SPOT_TAINT = Taint(names.AKS_SPOT_LABEL, "spot", "NoSchedule")
SPOT_TOLERATION = {
    "key": names.AKS_SPOT_LABEL,
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}


class NotSettling(RuntimeError):
    """The controllers kept changing the world at one instant: a bug, never a result."""


@dataclass
class PoolModel:
    name: str
    spot: bool
    zone: str
    price: float  # USD per node-hour
    provision: Distribution
    min_nodes: int = 0
    max_nodes: int | None = None
    timeline: SlotTimeline | None = None  # spot pools only
    alive: set[int] = field(default_factory=set)
    occupied: dict[int, str] = field(default_factory=dict)  # slot -> node name
    preempts: list[float] = field(default_factory=list)  # times of notices on our nodes
    # The autoscaler's back-off after a request that found no capacity (see `_request_failed`).
    backoff_until: float = float("-inf")
    failed_requests: int = 0  # in a row; a request that gets a VM resets it

    def labels(self, scenario: Scenario) -> dict[str, str]:
        labels = {
            names.AKS_AGENTPOOL_LABEL: self.name,
            names.INSTANCE_TYPE_LABEL: scenario.vm_size,
            names.ZONE_LABEL: self.zone,
            names.REGION_LABEL: scenario.region,
        }
        if self.spot:
            labels[names.AKS_SPOT_LABEL] = "spot"
        return labels

    @property
    def taints(self) -> tuple[Taint, ...]:
        return (SPOT_TAINT,) if self.spot else ()


@dataclass
class SimNotice:
    """A Preempt notice on a node (the simulator's own; the adapter turns it into the
    planner's)."""

    event_id: str
    seen_at: float
    deadline: float


@dataclass
class Node:
    name: str
    pool: PoolModel
    slot: int | None
    created: float
    ready_at: float
    gpus: int
    labels: dict[str, str]
    taints: list[Taint] = field(default_factory=list)  # besides the pool's
    unschedulable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    notice: SimNotice | None = None
    gone: bool = False
    empty_since: float | None = None
    # A spot request that found no capacity: never Ready, given up (and not billed: Azure bills
    # no VM it could not allocate) at this time.
    fails_at: float | None = None

    def ready(self, now: float) -> bool:
        return not self.gone and now >= self.ready_at

    def all_taints(self) -> list[Taint]:
        return [*self.pool.taints, *self.taints]


@dataclass
class Pod:
    name: str
    uid: str
    deployment: str
    created: float
    node: str | None = None
    ready_at: float | None = None
    deleting: bool = False
    # A deleted pod's deletionTimestamp: when its grace period ends (it may be gone before).
    deletion_at: float | None = None
    ends_at: float | None = None  # when it is gone (its shutdown, or its grace if shorter)
    gone: bool = False
    deletion_cost: str | None = None
    original_cost: str | None = None
    # Set by an admission webhook: the pod's own placement (tolerations, nodeSelector, affinity)
    # when it differs from its template's, and the annotations it added.
    spec: dict[str, Any] | None = None
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class Deployment:
    name: str
    replicas: int
    template_spec: dict[str, Any]
    gpus: int
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class Counters:
    notices: int = 0
    failovers: int = 0  # replicas that became Ready on an on-demand node
    returns: int = 0  # on-demand replicas removed by a scale-down (not by an eviction)
    planner_calls: int = 0
    moves: int = 0  # replicas moved off a spot group riskier than the policy accepts
    # Pods admission sent to a spot pool that started on another pool's node: preferred node
    # affinity yields when the chosen pool has no room (and the autoscaler ignores it).
    placed_elsewhere: int = 0


@dataclass
class Sample:
    at: float
    ready: int
    cost_rate: float  # USD per hour
    on_demand_nodes: int
    spot_nodes: int


class SimPolicy(Protocol):
    name: str

    def react(self, world: World) -> bool:
        """Look at the world, change it; True when something changed."""
        ...

    def next_wakeup(self, world: World) -> float | None:
        """The next time the policy must look again although nothing else changes."""
        ...


# A mutating admission webhook on pod creation: may set the pod's `spec` and `annotations`.
Admission = Callable[["World", Pod], None]


class World:
    def __init__(
        self,
        *,
        scenario: Scenario,
        pools: Sequence[PoolModel],
        deployments: Sequence[Deployment],
        start: float,
        horizon: float,
        needed: int,
        admission: Admission | None = None,
    ) -> None:
        self.scenario = scenario
        self.admission = admission
        self.pools = {pool.name: pool for pool in pools}
        self.deployments = {d.name: d for d in deployments}
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.start = start
        self.now = start
        self.horizon = horizon
        self.needed = needed
        self.version = 0
        self.counters = Counters()
        self.samples: list[Sample] = []
        self.rng = random.Random(scenario.seed)
        self._queue: list[tuple[float, int, str, Any]] = []
        self._sequence = itertools.count()
        self._names = itertools.count(1)
        self._wake_at: float | None = None
        # The eviction history the controller keeps on the cluster (set by the adapter).
        self.history: Any = None
        # The level of each spot group at the last assessment (the risk model's hysteresis).
        self.risk_levels: dict[Any, str] = {}
        for pool in pools:
            if pool.timeline is not None:
                pool.alive = set(pool.timeline.initially_alive)
                for event in pool.timeline.events:
                    self._push(event.at, "slot", (pool.name, event))

    # ---- events --------------------------------------------------------------------------------

    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._queue, (at, next(self._sequence), kind, payload))

    def touch(self) -> None:
        self.version += 1

    def run(self, policy: SimPolicy) -> None:
        """Replay until the horizon."""
        self.settle(policy)
        while self._queue and self._queue[0][0] <= self.horizon:
            at = self._queue[0][0]
            self.now = at
            while self._queue and self._queue[0][0] == at:
                _, _, kind, payload = heapq.heappop(self._queue)
                self._handle(kind, payload)
            self.settle(policy)
        self.now = self.horizon
        self._sample()

    def _handle(self, kind: str, payload: Any) -> None:
        """Apply one event; `touch` only what a controller could see change (a slot nobody of
        ours holds changes the autoscaler's room, which it reads every pass anyway)."""
        if kind == "slot":
            pool_name, event = payload
            self._slot(self.pools[pool_name], event)
        elif kind == "node_gone":
            node = self.nodes.get(payload)
            if node is not None and not node.gone:
                self.remove_node(node)
        elif kind == "pod_gone":
            pod = self.pods.get(payload)
            if pod is not None and not pod.gone:
                self._pod_gone(pod)
        elif kind == "request_failed":
            node = self.nodes.get(payload)
            if node is not None and not node.gone:
                self._request_failed(node)
        elif kind in ("node_ready", "pod_ready"):
            self.touch()  # readiness is a function of the clock: it changed now
        elif kind == "backoff_over":
            self.touch()  # the autoscaler may ask this pool again
        elif kind == "wake" and self._wake_at is not None and self.now >= self._wake_at:
            self._wake_at = None

    def _slot(self, pool: PoolModel, event: SlotEvent) -> None:
        if event.alive:
            pool.alive.add(event.slot)
            return
        pool.alive.discard(event.slot)
        holder = pool.occupied.get(event.slot)
        if holder is None:
            return
        node = self.nodes[holder]
        self.touch()
        deadline = event.at + event.notice_seconds
        node.notice = SimNotice(
            f"SIM-{pool.name}-{event.slot}-{int(event.at)}".upper(), self.now, deadline
        )
        pool.preempts.append(self.now)
        if self.now >= 0:
            self.counters.notices += 1
        self._push(deadline, "node_gone", node.name)

    def settle(self, policy: SimPolicy) -> None:
        """Run the controllers at this instant until none changes anything."""
        for _ in range(100):
            before = self.version
            # A controller that sets its Deployments' counts itself sees a lost node before the
            # ReplicaSet replaces its pods (else the ReplicaSet creates, and the autoscaler asks
            # a node for, a pod the controller deletes at once).
            if getattr(policy, "counts_first", False) and policy.react(self):
                self.touch()
            self._replicasets()
            self._schedule()
            self._autoscale()
            if policy.react(self):
                self.touch()
            if self.version == before:
                break
        else:
            raise NotSettling(f"still changing after 100 passes at t={self.now:.0f}s")
        wake = policy.next_wakeup(self)
        if wake is not None and wake > self.now and (self._wake_at is None or wake < self._wake_at):
            self._wake_at = wake
            self._push(wake, "wake", None)
        self._scale_down_timers()
        self._sample()

    # ---- queries -------------------------------------------------------------------------------

    def pods_of(self, deployment: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.deployment == deployment and not p.gone]

    def pod_ready(self, pod: Pod) -> bool:
        if pod.gone or pod.deleting or pod.node is None or pod.ready_at is None:
            return False
        return self.now >= pod.ready_at and self.nodes[pod.node].ready(self.now)

    def ready_count(self) -> int:
        return sum(1 for pod in self.pods.values() if self.pod_ready(pod))

    def live_nodes(self, pool: PoolModel) -> list[Node]:
        return [n for n in self.nodes.values() if n.pool is pool and not n.gone]

    def free_gpus(self, node: Node) -> int:
        used = sum(
            self.deployments[p.deployment].gpus
            for p in self.pods.values()
            if p.node == node.name and not p.gone
        )
        return node.gpus - used

    def can_grow(self, pool: PoolModel) -> bool:
        """What the autoscaler knows before it asks: the pool is below its maximum size (the
        on-demand limit) and not backing off after a failed request. Whether a spot pool has
        capacity is not known in advance: the request tells (`add_node`)."""
        live = self.live_nodes(pool)
        if pool.max_nodes is not None and len(live) >= pool.max_nodes:
            return False
        if self.scenario.spot_capacity_known and not self.has_capacity(pool):
            return False
        return self.now >= pool.backoff_until

    def in_backoff(self, pool: PoolModel) -> bool:
        return self.now < pool.backoff_until

    def has_capacity(self, pool: PoolModel) -> bool:
        """A free alive slot: the cloud's side, which only a request finds out."""
        if pool.timeline is None:
            return True
        return bool(pool.alive - set(pool.occupied))

    def spec_of(self, pod: Pod) -> dict[str, Any]:
        """The placement the pod was created with: its template's, or what admission made."""
        return pod.spec if pod.spec is not None else self.deployments[pod.deployment].template_spec

    def fits_pool(self, pod: Pod, pool: PoolModel) -> bool:
        spec = self.spec_of(pod)
        tolerations = spec.get("tolerations") or []
        # The autoscaler's template node has no name yet: a term on metadata.name fails.
        return (
            not placement.untolerated(tolerations, _json(pool.taints))
            and placement.fits_node_selector_and_affinity(spec, pool.labels(self.scenario), "")
            and self.deployments[pod.deployment].gpus <= self.scenario.node_gpus()
        )

    # ---- nodes ---------------------------------------------------------------------------------

    def add_node(self, pool: PoolModel) -> Node:
        """The autoscaler's request for one node. In a spot pool without a free alive slot the
        request hangs and fails after `max_node_provision_seconds` (the cluster autoscaler's
        max-node-provision-time), then the pool backs off."""
        slot = None
        fails_at = None
        if pool.timeline is not None:
            free = pool.alive - set(pool.occupied)
            if free:
                slot = min(free)
            else:
                fails_at = self.now + self.scenario.max_node_provision_seconds
        number = next(self._names)
        name = f"aks-{pool.name}-{number:06d}"
        delay = max(0.0, pool.provision.sample(self.rng))
        node = Node(
            name=name,
            pool=pool,
            slot=slot,
            created=self.now,
            ready_at=self.now + delay if fails_at is None else float("inf"),
            gpus=self.scenario.node_gpus(),
            labels=pool.labels(self.scenario),
            fails_at=fails_at,
        )
        if slot is not None:
            pool.occupied[slot] = name
            pool.failed_requests = 0
        self.nodes[name] = node
        if fails_at is None:
            self._push(node.ready_at, "node_ready", name)
        else:
            self._push(fails_at, "request_failed", name)
        self.touch()
        return node

    def _request_failed(self, node: Node) -> None:
        """The cluster autoscaler's exponential back-off of a node group whose scale-up failed
        (initial-node-group-backoff-duration, doubled per failure in a row up to
        max-node-group-backoff-duration); its pending pods wait or go to another group."""
        pool = node.pool
        pool.failed_requests += 1
        scenario = self.scenario
        doublings = min(pool.failed_requests - 1, 60)  # past the maximum long before
        backoff = min(
            scenario.max_backoff_seconds, scenario.initial_backoff_seconds * 2.0**doublings
        )
        pool.backoff_until = self.now + backoff
        self._push(pool.backoff_until, "backoff_over", pool.name)
        self.remove_node(node)

    def remove_node(self, node: Node) -> None:
        node.gone = True
        if node.slot is not None and node.pool.occupied.get(node.slot) == node.name:
            del node.pool.occupied[node.slot]
        for pod in list(self.pods.values()):
            if pod.node == node.name and not pod.gone:
                self._pod_gone(pod)
        del self.nodes[node.name]
        self.touch()

    # ---- pods ----------------------------------------------------------------------------------

    def delete_pod(self, pod: Pod, grace_seconds: float) -> bool:
        """Delete with this grace period; True if that changed anything. A pod already
        terminating only has its grace shortened (as the API server does), never lengthened."""
        if pod.gone:
            return False
        grace_ends = self.now + max(0.0, grace_seconds)
        if pod.deleting:
            if pod.deletion_at is None or grace_ends >= pod.deletion_at:
                return False
            pod.deletion_at = grace_ends
            if pod.ends_at is not None and grace_ends < pod.ends_at:
                pod.ends_at = grace_ends
                self._push(grace_ends, "pod_gone", pod.name)
            self.touch()
            return True
        pod.deleting = True
        self.touch()
        if pod.node is None:
            self._pod_gone(pod)
            return True
        shutdown = max(0.0, self.scenario.shutdown_seconds.sample(self.rng))
        pod.deletion_at = grace_ends
        pod.ends_at = self.now + min(shutdown, max(0.0, grace_seconds))
        self._push(pod.ends_at, "pod_gone", pod.name)
        return True

    def _pod_gone(self, pod: Pod) -> None:
        pod.gone = True
        del self.pods[pod.name]
        self.touch()

    def _replicasets(self) -> None:
        for deployment in self.deployments.values():
            live = [p for p in self.pods_of(deployment.name) if not p.deleting]
            for _ in range(deployment.replicas - len(live)):
                number = next(self._names)
                name = f"{deployment.name}-{number:06d}"
                pod = Pod(name, str(number), deployment.name, self.now)
                self.pods[name] = pod
                if self.admission is not None:
                    self.admission(self, pod)
                self.touch()
            if len(live) > deployment.replicas:
                doomed = upstream.victims(
                    live,
                    len(live) - deployment.replicas,
                    facts=self._scale_down_facts,
                    related_nodes=(pod.node or "" for pod in live),
                    now=self.now,
                )
                for pod in doomed:
                    on_demand = pod.node is not None and not self.nodes[pod.node].pool.spot
                    if on_demand and self.now >= 0:
                        self.counters.returns += 1
                    self.delete_pod(pod, self.scenario.grace_seconds)

    def _scale_down_facts(self, pod: Pod) -> upstream.PodFacts:
        """The pod as upstream's ReplicaSet controller sees it when it picks what to delete. A
        pod runs from the moment it is bound (the model's load time is its readiness probe's)
        and never restarts; one ReplicaSet per Deployment, so its pods are all the related ones.
        """
        ready = self.pod_ready(pod)
        costs = {} if pod.deletion_cost is None else {names.DELETION_COST: pod.deletion_cost}
        return upstream.PodFacts(
            uid=pod.uid,
            node=pod.node or "",
            phase="Pending" if pod.node is None else "Running",
            ready=ready,
            ready_since=pod.ready_at if ready else None,
            deletion_cost=upstream.deletion_cost(costs),
            created=pod.created,
        )

    # ---- scheduler -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        pending = sorted(
            (p for p in self.pods.values() if p.node is None and not p.deleting),
            key=lambda p: (p.created, p.name),
        )
        for pod in pending:
            node = self._best_node(pod)
            if node is None:
                continue
            pod.node = node.name
            pod.ready_at = self.now + max(0.0, self.scenario.load_seconds.sample(self.rng))
            node.empty_since = None
            self._push(pod.ready_at, "pod_ready", pod.name)
            if not node.pool.spot and self.now >= 0:
                self.counters.failovers += 1
            chosen = pod.annotations.get(names.PLACED, "").partition("/")[0]
            if chosen and chosen != node.pool.name and self.pools[chosen].spot and self.now >= 0:
                self.counters.placed_elsewhere += 1
            self.touch()

    def _best_node(self, pod: Pod) -> Node | None:
        deployment = self.deployments[pod.deployment]
        spec = self.spec_of(pod)
        tolerations = spec.get("tolerations") or []
        candidates = []
        for node in self.nodes.values():
            if not node.ready(self.now) or node.unschedulable:
                continue
            taints = _json(node.all_taints())
            if placement.untolerated(tolerations, taints):
                continue
            if not placement.fits_node_selector_and_affinity(spec, node.labels, node.name):
                continue
            if self.free_gpus(node) < deployment.gpus:
                continue
            siblings = sum(
                1
                for p in self.pods.values()
                if p.node == node.name and p.deployment == deployment.name
            )
            preference = node_preference(
                untolerated_prefer_no_schedule=placement.untolerated_prefer_no_schedule(
                    tolerations, taints
                ),
                preferred_affinity_weight=placement.preferred_affinity_weight(
                    spec, node.labels, node.name
                ),
                owner_pods_on_node=siblings,
            )
            candidates.append((preference, node.name, node))
        if not candidates:
            return None
        return min(candidates, key=lambda c: c[:2])[2]

    # ---- cluster autoscaler --------------------------------------------------------------------

    def _autoscale(self) -> None:
        for pool in self.pools.values():
            serving = [n for n in self.live_nodes(pool) if n.notice is None]
            for _ in range(pool.min_nodes - len(serving)):
                if not self.can_grow(pool):
                    break
                self.add_node(pool)
        # Room on nodes still provisioning is the pending pods' already (what the autoscaler
        # counts as "upcoming").
        upcoming: dict[str, int] = {}
        for node in self.nodes.values():
            if not node.ready(self.now) and node.notice is None:
                upcoming[node.name] = self.free_gpus(node)
        pending = sorted(
            (p for p in self.pods.values() if p.node is None and not p.deleting),
            key=lambda p: (p.created, p.name),
        )
        for pod in pending:
            deployment = self.deployments[pod.deployment]
            waiting = next(
                (
                    name
                    for name, room in sorted(upcoming.items())
                    if room >= deployment.gpus and self.fits_pool(pod, self.nodes[name].pool)
                ),
                None,
            )
            if waiting is not None:
                upcoming[waiting] -= deployment.gpus
                continue
            options = [
                pool
                for pool in self.pools.values()
                if self.fits_pool(pod, pool) and self.can_grow(pool)
            ]
            if not options:
                continue
            pool = min(options, key=lambda p: (p.price, len(self.live_nodes(p)), p.name))
            node = self.add_node(pool)
            upcoming[node.name] = node.gpus - deployment.gpus

    def _scale_down_timers(self) -> None:
        for node in list(self.nodes.values()):
            if not node.ready(self.now) or node.notice is not None:
                continue
            if any(p.node == node.name for p in self.pods.values()):
                node.empty_since = None
                continue
            if node.empty_since is None:
                node.empty_since = self.now
                self._push(self.now + self.scenario.scale_down_seconds, "scale_down", node.name)
            if len(self.live_nodes(node.pool)) <= node.pool.min_nodes:
                continue
            if self.now >= node.empty_since + self.scenario.scale_down_seconds:
                self.remove_node(node)

    # ---- accounting ----------------------------------------------------------------------------

    def cost_rate(self) -> float:
        return sum(
            node.pool.price
            for node in self.nodes.values()
            if not node.gone and node.fails_at is None
        )

    def _sample(self) -> None:
        billed = [n for n in self.nodes.values() if n.fails_at is None]
        spot = sum(1 for n in billed if n.pool.spot)
        sample = Sample(
            at=max(0.0, self.now),
            ready=self.ready_count(),
            cost_rate=self.cost_rate(),
            on_demand_nodes=len(billed) - spot,
            spot_nodes=spot,
        )
        last = self.samples[-1] if self.samples else None
        if last is not None and last.at == sample.at:
            self.samples[-1] = sample
        elif last is None or _state(last) != _state(sample):
            self.samples.append(sample)


def _json(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """Taints as the API writes them, for Kubernetes' matching rules."""
    return [taint.as_json() for taint in taints]


def _state(sample: Sample) -> tuple[int, float, int, int]:
    return sample.ready, sample.cost_rate, sample.on_demand_nodes, sample.spot_nodes

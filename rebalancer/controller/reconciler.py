"""The controller's loop: informers feed a snapshot, the planner decides, the executor acts.

Plans whenever an informer sees a change (and at least every `resync_seconds`), only once every
cache has listed, and acts only while this replica holds the Lease; a follower keeps its caches
warm so it can take over at once. Actions run in phases (cordons first, then pod costs and
deadline deletions, then scaling, then evictions and marks), each phase concurrently within the
client's write budget. Errors are logged and counted and never stop the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, get_args

from rebalancer.azure.price_book import PriceBook
from rebalancer.azure.retail_prices import RetailPricesClient
from rebalancer.clock import Clock
from rebalancer.config import ControllerSettings, parse_selector, parse_window
from rebalancer.controller.accounting import Accountant
from rebalancer.controller.cost import region_of
from rebalancer.controller.executor import DryRunExecutor, Executor, Outcome
from rebalancer.controller.model import NodeInfo, PodInfo, WorkloadInfo
from rebalancer.controller.planner import (
    Action,
    Cordon,
    Delete,
    EndCooldown,
    Evict,
    MarkDrained,
    Policy,
    Reason,
    ReportBlocked,
    Restore,
    ScaleBack,
    ScaleUp,
    SetDeletionCost,
    Settings,
    Snapshot,
    StartCooldown,
    plan,
)
from rebalancer.controller.pools import declared_pools
from rebalancer.controller.returns import FinishReturn, ReturnSettings, StartReturn
from rebalancer.http import Health
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import KubeError
from rebalancer.kube.events import EventRecorder
from rebalancer.kube.informer import Informer
from rebalancer.kube.leader import LeaderElector
from rebalancer.kube.writes import Writer
from rebalancer.metrics import EVENT_TYPE_LABELS, ControllerMetrics, event_type_label, initialise
from rebalancer.notices import MANUAL, Source
from rebalancer.process import sleep_or_stop

# Cordons and surges first (each is the start of a clock: the node stops taking pods, the
# replacements start loading); pod costs and deadline deletions before any scale-back, which
# must find the doomed pods already marked or gone; evictions, marks and the rest last.
STEERING_PER_PASS = 10
PHASES: tuple[tuple[type, ...], ...] = (
    (Cordon, Restore, ScaleUp),
    (SetDeletionCost, Delete),
    (ScaleBack, FinishReturn),
)


def replicaset_owner(obj: Mapping[str, Any]) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Deployment":
            return str(ref.get("name"))
    return ""


# Label values of the fail-over counter, by stage (what ScaleUp, ScaleBack, ReportBlocked carry).
FAILOVER_REASONS = {
    "started": (Reason.NOTICE,),
    "completed": (
        Reason.REPLACEMENTS_READY,
        Reason.DOOMED_GONE,
        Reason.DEADLINE,
        Reason.CANCELLED,
        Reason.REPLICAS_CHANGED,
    ),
    "blocked": (Reason.NO_ON_DEMAND_POOL, Reason.UNREADABLE_RECORD),
}


def error_kinds(error: type[KubeError] = KubeError) -> set[str]:
    """The `kind` of KubeError and of every subclass: the API error labels."""
    kinds = {error.kind}
    for subclass in error.__subclasses__():
        kinds |= error_kinds(subclass)
    return kinds


def initialise_metrics(metrics: ControllerMetrics, *, dry_run: bool) -> None:
    """Zero series for the label values known before anything happens (see rebalancer.metrics)."""
    for stage, reasons in FAILOVER_REASONS.items():
        initialise(metrics.failovers, [stage], [str(reason) for reason in reasons])
    outcomes = ["dry_run"] if dry_run else ["ok", "noop", "error"]
    initialise(metrics.actions, [action.__name__ for action in get_args(Action)], outcomes)
    initialise(metrics.reconcile_errors, ["plan", "observe", "accounting", *sorted(error_kinds())])


@dataclass
class Seen:
    """What the controller remembers of a notice it saw, for latency metrics."""

    first_seen: float
    pool: str = ""  # kept for the missed-deadline metric: the Node may be gone when it counts
    cordoned: bool = False
    drained: bool = False


class Controller:
    def __init__(
        self,
        *,
        settings: ControllerSettings,
        client: KubeClient,
        metrics: ControllerMetrics,
        clock: Clock,
        log: Any,
        identity: str,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.log = log
        self._wake = asyncio.Event()
        timeout = settings.watch_timeout_seconds

        def informer(path: str, project: Any, name: str) -> Informer[Any]:
            return Informer(
                client,
                path,
                project,
                name=name,
                on_change=self._wake.set,
                watch_timeout_seconds=timeout,
                log=log,
            )

        self.nodes: Informer[NodeInfo] = informer("/api/v1/nodes", NodeInfo.from_json, "nodes")
        self.pods: Informer[PodInfo] = informer("/api/v1/pods", PodInfo.from_json, "pods")
        self.replicasets: Informer[str] = informer(
            "/apis/apps/v1/replicasets", replicaset_owner, "replicasets"
        )
        self.deployments: Informer[WorkloadInfo] = informer(
            "/apis/apps/v1/deployments",
            lambda o: WorkloadInfo.from_json("Deployment", o),
            "deployments",
        )
        self.statefulsets: Informer[WorkloadInfo] = informer(
            "/apis/apps/v1/statefulsets",
            lambda o: WorkloadInfo.from_json("StatefulSet", o),
            "statefulsets",
        )
        self.informers: list[Informer[Any]] = [
            self.nodes, self.pods, self.replicasets, self.deployments, self.statefulsets,
        ]  # fmt: skip
        self.elector = LeaderElector(
            client,
            namespace=settings.namespace,
            name=settings.lease_name,
            identity=identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            clock=clock,
            log=log,
        )
        writer = Writer(client)
        self.events = EventRecorder(writer)
        self.executor: Executor | DryRunExecutor = (
            DryRunExecutor() if settings.dry_run else Executor(writer, self.events)
        )
        self.planner_settings = Settings(
            event_policy={k: Policy(v) for k, v in settings.event_policy.items()},
            deadline_margin_seconds=settings.deadline_margin_seconds,
            act_now_grace_seconds=settings.act_now_grace_seconds,
            cooldown_seconds=settings.cooldown_seconds,
            gpu_workloads_only=settings.gpu_workloads_only,
            workload_selector=parse_selector(settings.workload_selector),
            declared_pools=declared_pools(settings.pools),
            returns=ReturnSettings(
                enabled=settings.return_enabled,
                quiet_seconds=settings.return_quiet_seconds,
                pending_timeout_seconds=settings.return_pending_timeout_seconds,
                max_concurrent=settings.return_max_concurrent,
                window=parse_window(settings.return_window),
            ),
        )
        retail = (
            RetailPricesClient(base_url=settings.prices_api_url)
            if settings.prices_api_enabled
            else None
        )
        self.prices = PriceBook(
            file=settings.prices_file,
            api=retail,
            ttl_seconds=settings.prices_refresh_seconds,
            clock=clock,
            log=log,
            on_failure=metrics.price_refresh_errors.inc,
        )
        self.accountant = Accountant(
            metrics=metrics,
            book=self.prices,
            interval_seconds=settings.cost_interval_seconds,
            planner_settings=self.planner_settings,
            started=clock.monotonic(),
        )
        self._seen: dict[tuple[str, str], Seen] = {}
        self._surge_started: dict[tuple[str, str, str], float] = {}
        self._logged: set[str] = set()
        self._last_pass = clock.monotonic()
        self.passes = 0
        # Node groups and surged workloads whose metric children exist (created at zero).
        self._metric_groups: set[tuple[str, str, str, bool]] = set()
        self._deficit_workloads: set[str] = set()
        initialise_metrics(metrics, dry_run=settings.dry_run)

    # ---- health ------------------------------------------------------------------------------

    def liveness(self) -> Health:
        silent = self.clock.monotonic() - self._last_pass
        limit = 60.0 + 5 * self.settings.resync_seconds
        synced = all(i.synced.is_set() for i in self.informers)
        if synced and silent > limit:
            return Health(False, f"no planning pass for {silent:.0f}s")
        return Health(True)

    def readiness(self) -> Health:
        waiting = [i.name for i in self.informers if not i.synced.is_set()]
        if waiting:
            return Health(False, f"caches not synced: {', '.join(waiting)}")
        return Health(True)

    # ---- loop --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(i.run(stop)) for i in self.informers]
        electing = asyncio.create_task(self.elector.run(stop))
        recording = asyncio.create_task(self.events.run(stop))
        try:
            for informer in self.informers:
                while not informer.synced.is_set() and not stop.is_set():
                    await sleep_or_stop(stop, 0.05)
            self.metrics.cache_synced.set(1)
            tasks.append(asyncio.create_task(self.prices.run(stop, self._prices_in_use)))
            self.log.info("caches synced", nodes=len(self.nodes.items), pods=len(self.pods.items))
            stopping = asyncio.ensure_future(stop.wait())
            while not stop.is_set():
                self._wake.clear()
                # A pass may wait long for its request budget; a stop must not wait for it.
                planning = asyncio.ensure_future(self.reconcile())
                await asyncio.wait({planning, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not planning.done():
                    planning.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await planning
                    break
                await self._wait_for_change(stop)
            stopping.cancel()
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # Not cancelled: on `stop` the elector releases the Lease by itself (a cancel landing
            # in that PUT would leave the other replica waiting a full lease duration), and the
            # recorder writes the Events still queued, within its own short budget.
            stop.set()
            _, late = await asyncio.wait({electing, recording}, timeout=4.0)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _wait_for_change(self, stop: asyncio.Event) -> None:
        wake = asyncio.ensure_future(self._wake.wait())
        stopping = asyncio.ensure_future(stop.wait())
        leading = asyncio.ensure_future(self.elector.leading.wait())
        waiters = {wake, stopping}
        if not self.elector.is_leader:
            waiters.add(leading)
        try:
            await asyncio.wait(
                waiters, timeout=self.settings.resync_seconds, return_when=asyncio.FIRST_COMPLETED
            )
            # Let a burst of watch events land before planning again.
            await asyncio.sleep(0.01)
        finally:
            for waiter in (wake, stopping, leading):
                waiter.cancel()

    def snapshot(self) -> Snapshot:
        workloads = {w.key: w for w in self.deployments.items.values()}
        workloads.update({w.key: w for w in self.statefulsets.items.values()})
        return Snapshot(
            now=self.clock.now(),
            nodes={node.name: node for node in self.nodes.items.values()},
            pods=dict(self.pods.items),
            workloads=workloads,
            replicaset_owners={
                key: owner for key, owner in self.replicasets.items.items() if owner
            },
        )

    async def reconcile(self) -> None:
        started = time.perf_counter()
        self.passes += 1
        now_mono = self.clock.monotonic()
        elapsed = now_mono - self._last_pass
        self._last_pass = now_mono
        leader = self.elector.is_leader
        self.metrics.leader.set(1 if leader else 0)
        try:
            state = self.snapshot()
        except Exception as error:  # a bug must not stop the loop
            self.metrics.reconcile_errors.labels("snapshot").inc()
            self.log.exception("snapshot failed", error=str(error))
            return
        try:
            self._observe(state, elapsed)
            self.accountant.account(state, now_mono)
        except Exception:  # observing feeds metrics only; never let it stop the plan
            self.metrics.reconcile_errors.labels("observe").inc()
            self.log.exception("observing failed")
        try:
            state = replace(
                state,
                recent_evictions=self.accountant.recent(now_mono),
                pool_quiet_seconds=self.accountant.quiet(state.nodes.values(), now_mono),
            )
            result = plan(state, self.planner_settings)
        except Exception as error:  # a bug in planning must not stop the loop
            self.metrics.reconcile_errors.labels("plan").inc()
            self.log.exception("planning failed", error=str(error))
            return
        self.metrics.active_notices.set(len(result.active))
        if leader and result.actions:
            if isinstance(self.executor, Executor):
                self.executor.workloads = state.workloads
                self.executor.nodes = state.nodes
            await self._execute(result.actions, state)
        elif result.actions and self.settings.dry_run:
            await self._execute(result.actions, state)
        self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _execute(self, actions: tuple[Action, ...], state: Snapshot) -> None:
        batches: list[list[Action]] = [[] for _ in range(len(PHASES) + 1)]
        # Steering taints can wait: a few per pass, so that a wave's cordons and surges (planned
        # in the next pass) never queue behind them for the request budget.
        steering = [a for a in actions if isinstance(a, StartCooldown | EndCooldown)]
        deferred = set(map(id, steering[STEERING_PER_PASS:]))
        for action in actions:
            if id(action) in deferred:
                continue
            phase = next(
                (i for i, kinds in enumerate(PHASES) if isinstance(action, kinds)), len(PHASES)
            )
            batches[phase].append(action)
        for batch in batches:
            if batch:
                await asyncio.gather(*(self._apply(action, state) for action in batch))

    async def _apply(self, action: Action, state: Snapshot) -> None:
        name = type(action).__name__
        try:
            outcome = await self.executor.apply(action, state.now)
        except Exception as error:  # one failed action must never stop the others or the loop
            kind = error.kind if isinstance(error, KubeError) else type(error).__name__
            self.metrics.actions.labels(name, "error").inc()
            self.metrics.reconcile_errors.labels(kind).inc()
            log = self.log.warning if isinstance(error, KubeError) else self.log.exception
            log("action failed", action=name, subject=repr(action), kind=kind, reason=str(error))
            return
        if self.settings.dry_run:
            self.metrics.actions.labels(name, "dry_run").inc()
            self._log_once("would act (dry run)", action)
            return
        self.metrics.actions.labels(name, "ok" if outcome.done else "noop").inc()
        try:
            self._account(action, outcome, state)
        except Exception:  # accounting is for metrics and logs; it must not stop acting
            self.metrics.reconcile_errors.labels("accounting").inc()
            self.log.exception("accounting failed", action=name)

    def _account(self, action: Action, outcome: Outcome, state: Snapshot) -> None:
        now = self.clock.monotonic()
        match action:
            case Cordon() if outcome.done:
                seen = self._seen.get((action.node, action.event_id))
                if seen is not None and not seen.cordoned:
                    seen.cordoned = True
                    self.metrics.notice_to_cordon.observe(now - seen.first_seen)
                self.log.info(
                    "cordoned",
                    node=action.node,
                    event_id=action.event_id,
                    event_type=action.event_type,
                )
            case ScaleUp() if outcome.done:
                self._surge_started.setdefault(action.workload, now)
                self.metrics.failovers.labels("started", "Notice").inc()
                self.log.info(
                    "surged",
                    workload="/".join(action.workload),
                    replicas=action.replicas,
                    doomed=list(action.record.doomed_pods),
                )
            case ScaleBack() if outcome.done:
                started = self._surge_started.pop(action.workload, None)
                if started is not None and action.reason == "ReplacementsReady":
                    self.metrics.replacement_ready.observe(now - started)
                self.metrics.failovers.labels("completed", str(action.reason)).inc()
                self.log.info(
                    "scaled back",
                    workload="/".join(action.workload),
                    replicas=action.replicas,
                    reason=str(action.reason),
                )
            case Evict():
                if outcome.blocked:
                    self.metrics.pods.labels("eviction_blocked").inc()
                    self._log_once(
                        "eviction blocked by a PodDisruptionBudget", action, reason=outcome.detail
                    )
                elif outcome.done:
                    self.metrics.pods.labels("evicted").inc()
                    self.log.info("evicted", pod="/".join(action.pod), node=action.node)
            case Delete() if outcome.done:
                self.metrics.pods.labels("deleted").inc()
                self.log.info(
                    "deleted at the deadline",
                    pod="/".join(action.pod),
                    node=action.node,
                    grace_seconds=action.grace_seconds,
                )
            case MarkDrained() if outcome.done:
                seen = self._seen.get((action.node, action.event_id))
                if seen is not None and not seen.drained:
                    seen.drained = True
                    self.metrics.drain_duration.observe(now - seen.first_seen)
                self.log.info("drained", node=action.node, event_id=action.event_id)
            case ReportBlocked() if outcome.done:
                self.metrics.failovers.labels("blocked", str(action.reason)).inc()
                self.log.warning(
                    "failover blocked", workload="/".join(action.workload), detail=action.detail
                )
            case StartReturn() if outcome.done:
                self.metrics.returns.labels("started").inc()
                self.log.info(
                    "returning a replica to spot",
                    workload="/".join(action.workload),
                    pool=action.record.pool,
                    retire=action.record.retire,
                )
            case FinishReturn() if outcome.done:
                self.metrics.returns.labels(action.reason).inc()
                self.log.info(
                    "return finished", workload="/".join(action.workload), reason=action.reason
                )
            case Restore() if outcome.done:
                self.log.info("restored", node=action.node, event_id=action.event_id)
            case _:
                if outcome.done:
                    self._log_once("applied", action)
        del state

    def _prices_in_use(self) -> tuple[list[str], list[str]]:
        nodes = list(self.nodes.items.values())
        return [region_of(n.labels) for n in nodes], [n.sku for n in nodes]

    def _observe(self, state: Snapshot, elapsed: float) -> None:
        """Metrics that come from looking at the cluster, not from acting on it."""
        now = self.clock.monotonic()
        live: set[tuple[str, str]] = set()
        for node in state.nodes.values():
            self._initialise_group(node)
            for reason in node.skipped:
                self._log_once("notice skipped", reason, node=node.name)
            for notice in node.notices:
                key = (node.name, notice.event_id)
                live.add(key)
                if key in self._seen:
                    continue
                self._seen[key] = Seen(first_seen=now, pool=node.pool)
                if notice.event_type == "Preempt":
                    self.accountant.record_eviction(node.pool, node.sku, node.zone, now)
                self.metrics.notices.labels(
                    event_type_label(notice.event_type)
                    if notice.event_type != "Manual"
                    else "Manual",
                    str(notice.source),
                    node.pool,
                    node.zone,
                    node.sku,
                    "spot" if node.spot else "regular",
                ).inc()
                if notice.deadline is not None:
                    lead = (notice.deadline - state.now).total_seconds()
                    self.metrics.notice_lead_time.labels(
                        event_type_label(notice.event_type)
                    ).observe(max(0.0, lead))
                self.log.info(
                    "notice",
                    node=node.name,
                    event_id=notice.event_id,
                    event_type=notice.event_type,
                    source=str(notice.source),
                    deadline=str(notice.deadline) if notice.deadline else "now",
                )
        for key in [k for k in self._seen if k not in live]:
            seen = self._seen.pop(key)
            # Missed: the node went (its VM taken) while cordoned and not yet drained. A notice
            # that vanished from a node that is still there was cancelled, not missed.
            if seen.cordoned and not seen.drained and key[0] not in state.nodes:
                self.metrics.drain_missed_deadline.labels(seen.pool).inc()
        for workload in state.workloads.values():
            if workload.surge is None:
                continue
            name = f"{workload.namespace}/{workload.name}"
            child = self.metrics.replica_deficit.labels(name)
            if name not in self._deficit_workloads:
                # Born at zero: what this first pass would add is left out, so that rate()
                # sees every later increase.
                self._deficit_workloads.add(name)
                continue
            deficit = max(0, workload.surge.base_replicas - workload.ready_replicas)
            if deficit:
                child.inc(deficit * elapsed)

    def _initialise_group(self, node: NodeInfo) -> None:
        """Zero series for a node group's notices and missed drains before its first notice."""
        group = (node.pool, node.zone, node.sku, node.spot)
        if group in self._metric_groups:
            return
        self._metric_groups.add(group)
        initialise(
            self.metrics.notices,
            [*EVENT_TYPE_LABELS, MANUAL],
            [str(source) for source in Source],
            [node.pool],
            [node.zone],
            [node.sku],
            ["spot" if node.spot else "regular"],
        )
        self.metrics.drain_missed_deadline.labels(node.pool)

    def _log_once(self, message: str, subject: Any, **fields: Any) -> None:
        key = f"{message}:{subject!r}"
        if key in self._logged:
            return
        if len(self._logged) > 10_000:
            self._logged.clear()
        self._logged.add(key)
        self.log.info(message, subject=repr(subject), **fields)

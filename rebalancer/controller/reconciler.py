"""The controller's loop, in one direction: observe, decide, apply, measure.

- observe: informer caches (Nodes, Pods, ReplicaSets, Deployments, StatefulSets, the eviction
  history) → one immutable `Snapshot`; Karpenter's NodePools, listed every half minute, → the
  pools they allow, which enter the pass's settings as declared pools do;
- decide: `plan(snapshot, settings)`, once per pass, pure;
- apply: the leader's `Executor` (or the dry-run one) applies each step's actions at once, the
  steps in order; a follower applies nothing and keeps its caches warm to take over;
- measure: the `Recorder` turns the snapshot and each (action, outcome) into metrics, logs and
  Kubernetes Events, and hands notifications to the `Notifier` (its own task sends them).
A pass runs whenever an informer sees a change, and at least every `resync_seconds`, once every
cache has listed. Nothing here decides anything, and no error stops the loop. What feeds the
snapshot besides the caches (prices, Azure's risk data) and what runs beside the loop (the
doctor, the placement webhook, notifications) is built in wiring.py and passed in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from rebalancer import names
from rebalancer.clock import Clock
from rebalancer.controller import wiring
from rebalancer.controller.accounting import Accountant
from rebalancer.controller.actions import Action
from rebalancer.controller.admission import View
from rebalancer.controller.assessor import RiskAssessor
from rebalancer.controller.cost import region_of
from rebalancer.controller.executor import DryRunExecutor, Executor, HistoryObject
from rebalancer.controller.history import History, history_from_configmap
from rebalancer.controller.keda import SCALEDOBJECTS, held_through
from rebalancer.controller.model import (
    HoldInfo,
    NodeInfo,
    PodInfo,
    ScaledObjectInfo,
    ScalerInfo,
    WorkloadInfo,
    replicaset_owner,
)
from rebalancer.controller.nodepool_source import NodePoolSource
from rebalancer.controller.options import retry_policy, with_nodepools
from rebalancer.controller.planner import plan
from rebalancer.controller.record_key import UNLOADED, RecordKey
from rebalancer.controller.recorder import Recorder
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.wiring import Loop, Parts
from rebalancer.http import Health
from rebalancer.kube.client import Requester
from rebalancer.kube.events import EventRecorder
from rebalancer.kube.gate import RequestGate
from rebalancer.kube.informer import Informer
from rebalancer.kube.leader import LeaderElector
from rebalancer.kube.limiter import TokenBucket
from rebalancer.kube.writes import Writer
from rebalancer.metrics import ControllerMetrics
from rebalancer.process import sleep_or_stop
from rebalancer.retry import Backoff

# How long a stop waits for a pass that is still running: a write takes about a second to land
# (the fence's margin); a pass still waiting for its request budget is cancelled after it.
STOP_GRACE_SECONDS = 1.0


class Controller:
    def __init__(
        self,
        *,
        settings: ControllerSettings,
        client: Requester,
        metrics: ControllerMetrics,
        clock: Clock,
        log: Any,
        identity: str,
        wire: Callable[[Loop], Parts] = wiring.wire,
    ) -> None:
        """The loop's own parts: the Lease, the request gate, the informers, the executor and
        the recorder. The rest is `wire`'s (wiring.py): what feeds the snapshot and what runs
        beside the loop."""
        self.settings, self.metrics, self.clock, self.log = settings, metrics, clock, log
        self._wake = asyncio.Event()
        self.view: View | None = None  # placement reads the last pass's view
        history = HistoryObject(settings.namespace, f"{settings.lease_name}-history")
        # The Lease's requests go straight to the client; everything else passes the gate: the
        # request budget, then, for a write, the fence, as it leaves.
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
        self.gate = RequestGate(
            client,
            limiter=TokenBucket(
                settings.client_qps, settings.client_burst, monotonic=clock.monotonic
            ),
            fence=self.elector.fence,
            timeout_seconds=settings.kube_timeout_seconds,
        )

        def informer(path: str, project: Any, name: str, **query: str) -> Informer[Any]:
            return Informer(
                self.gate, path, project, name=name, query=query, log=log,
                on_change=self._wake.set, on_skip=self._skipped,
                watch_timeout_seconds=settings.watch_timeout_seconds,
            )  # fmt: skip

        self.nodes: Informer[NodeInfo] = informer("/api/v1/nodes", NodeInfo.from_json, "nodes")
        self.pods: Informer[PodInfo] = informer("/api/v1/pods", PodInfo.from_json, "pods")
        self.replicasets: Informer[str] = informer(
            "/apis/apps/v1/replicasets", replicaset_owner, "replicasets"
        )
        self.deployments: Informer[WorkloadInfo] = informer(
            "/apis/apps/v1/deployments", lambda o: WorkloadInfo.from_json("Deployment", o),
            "deployments",
        )  # fmt: skip
        self.statefulsets: Informer[WorkloadInfo] = informer(
            "/apis/apps/v1/statefulsets", lambda o: WorkloadInfo.from_json("StatefulSet", o),
            "statefulsets",
        )  # fmt: skip
        self.history: Informer[History] = informer(
            history.collection, history_from_configmap, "history",
            fieldSelector=f"metadata.name={history.name}",
        )  # fmt: skip
        self.holds: Informer[HoldInfo] = informer(
            "/apis/policy/v1/poddisruptionbudgets", HoldInfo.from_json, "holds",
            labelSelector=f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY}",
        )  # fmt: skip
        self.scalers: Informer[ScalerInfo] = informer(
            "/apis/autoscaling/v2/horizontalpodautoscalers", ScalerInfo.from_json, "scalers"
        )
        # KEDA's, where an HPA KEDA owns has its bounds held (keda.py); 404 without KEDA.
        self.scaled_objects: Informer[ScaledObjectInfo] = Informer(
            self.gate, SCALEDOBJECTS, ScaledObjectInfo.from_json, name="scaledobjects", log=log,
            on_change=self._wake.set, on_skip=self._skipped, optional=True,
            watch_timeout_seconds=settings.watch_timeout_seconds,
        )  # fmt: skip
        self.informers: list[Informer[Any]] = [
            self.nodes, self.pods, self.replicasets, self.deployments, self.statefulsets,
            self.history, self.holds, self.scalers, self.scaled_objects,
        ]  # fmt: skip
        self.nodepools = NodePoolSource(
            self.gate, log=log, on_change=self._wake.set,
            on_error=lambda kind: metrics.reconcile_errors.labels(kind).inc(),
        )  # fmt: skip
        self.writer = writer = Writer(self.gate)
        self.events = EventRecorder(writer, fence=self.elector.lease_fresh)
        self.record_key = RecordKey(
            writer, namespace=settings.namespace, secret=f"{settings.lease_name}-records",
            may_write=self.elector.may_write, dry_run=settings.dry_run, sleep=clock.sleep,
            log=log,
        )  # fmt: skip
        self.executor: Executor | DryRunExecutor = DryRunExecutor()
        if not settings.dry_run:
            self.executor = Executor(
                writer,
                history=history,
                policy=retry_policy(settings),
                fence=self.elector.may_write,
                sleep=clock.sleep,
                sealer=lambda: self.record_key.sealer,
                log=log,
            )
        self.planner_settings = settings.planner
        self.parts = parts = wire(self)
        self.prices, self.risk, self.doctor = parts.prices, parts.risk, parts.doctor
        self.notifier = parts.notifier
        self.webhook = parts.placement.webhook
        accountant = Accountant(
            metrics=metrics, book=self.prices, interval_seconds=settings.cost_interval_seconds
        )
        self.recorder = Recorder(
            metrics=metrics, events=None if settings.dry_run else self.events,
            accountant=accountant, clock=clock, log=log, dry_run=settings.dry_run,
            risk_data=self.risk.data,
            deadline_margin_seconds=settings.planner.deadline_margin_seconds,
            notify=self.notifier.offer if self.notifier else None,
        )  # fmt: skip
        self.assessor = RiskAssessor(
            settings.risk, self.risk.data,
            interval_seconds=settings.cost_interval_seconds,
        )  # fmt: skip
        self._last_pass = clock.monotonic()
        self.passes = 0
        self._dead_informers: set[str] = set()

    def _risk_in_use(self) -> tuple[list[str], list[str]]:
        spot = [n for n in self.nodes.items.values() if n.spot]
        return [region_of(n.labels) for n in spot], [n.sku for n in spot]

    # ---- health ------------------------------------------------------------------------------

    def liveness(self) -> Health:
        if self._dead_informers:
            return Health(False, f"caches failing: {', '.join(sorted(self._dead_informers))}")
        silent = self.clock.monotonic() - self._last_pass
        synced = all(i.synced.is_set() for i in self.informers)
        if synced and silent > 60.0 + 5 * self.settings.resync_seconds:
            return Health(False, f"no planning pass for {silent:.0f}s")
        return Health(True)

    def readiness(self) -> Health:
        waiting = [i.name for i in self.informers if not i.synced.is_set()]
        if waiting:
            return Health(False, f"caches not synced: {', '.join(waiting)}")
        return Health(True)

    def _skipped(self, informer: str) -> None:
        self.metrics.skipped.labels(f"unreadable_{informer}").inc()

    # ---- loop --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self._supervise(i, stop)) for i in self.informers]
        # These three finish only once the last pass is over: what it sent is recorded, told
        # and its Events written by a replica that still held the Lease when it sent it.
        passes_over = asyncio.Event()
        electing = asyncio.create_task(self.elector.run(passes_over))
        recording = asyncio.create_task(self.events.run(passes_over))
        finishing = {electing, recording}
        if self.notifier is not None:
            finishing.add(asyncio.create_task(self.notifier.run(passes_over)))
        try:
            for informer in self.informers:
                while not informer.synced.is_set() and not stop.is_set():
                    await sleep_or_stop(stop, 0.05)
            # No record can be checked, so none obeyed, before the key is there.
            await self.record_key.load(stop, self.settings.retry_period_seconds)
            # The first pass plans with the NodePools' parts (a notice may be waiting for one).
            try:
                await self.nodepools.refresh()
            except Exception:  # a bug here must not keep the controller from planning
                self.log.exception("NodePools not read")
            tasks.append(asyncio.create_task(self.nodepools.run(stop)))
            self.metrics.cache_synced.set(1)
            tasks.append(asyncio.create_task(self.prices.run(stop, self._prices_in_use)))
            tasks.append(asyncio.create_task(self.doctor.run(stop, self.snapshot)))
            for feed in self.risk.feeds:
                tasks.append(asyncio.create_task(feed.run(stop, self._risk_in_use)))
            tasks.append(asyncio.create_task(self.parts.placement.run(stop)))
            self.log.info("caches synced", nodes=len(self.nodes.items), pods=len(self.pods.items))
            stopping = asyncio.ensure_future(stop.wait())
            while not stop.is_set():
                self._wake.clear()
                # A pass may wait long for its request budget; a stop waits for it only a short
                # grace, so that writes already on their way are seen through and recorded.
                planning = asyncio.ensure_future(self.reconcile())
                await asyncio.wait({planning, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not planning.done():
                    await asyncio.wait({planning}, timeout=STOP_GRACE_SECONDS)
                    planning.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await planning
                    break
                await self._wait_for_change(stop)
            stopping.cancel()
        finally:
            passes_over.set()  # the Lease goes while the rest stops
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.risk.close()
            # Not cancelled: once the passes are over the elector releases the Lease by itself (a
            # cancel landing in that PUT would leave the other replica waiting a full lease
            # duration), and the recorder writes the Events still queued, within its own short
            # budget (and the notifier sends what it still holds, within its own).
            stop.set()
            _, late = await asyncio.wait(finishing, timeout=4.0)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _supervise(self, informer: Informer[Any], stop: asyncio.Event) -> None:
        """Run an informer; a crash (a bug, never an API error: it handles those) restarts it
        from a fresh list, and liveness fails while it keeps crashing."""
        backoff = Backoff(initial_seconds=0.5, max_seconds=30.0)
        failures = 0
        while not stop.is_set():
            lists = informer.lists
            try:
                await informer.run(stop)
                return
            except Exception:
                # A crash after a good list is a new one; crashes with no list between them are
                # a loop that restarting does not fix.
                failures = 1 if informer.lists > lists else failures + 1
                self.metrics.reconcile_errors.labels("informer").inc()
                self.log.exception("cache crashed; restarting it", informer=informer.name)
                if failures >= 3:
                    self._dead_informers.add(informer.name)
                else:
                    self._dead_informers.discard(informer.name)
                await sleep_or_stop(stop, backoff.delay(failures))

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
        """The caches as one view, with the seal of every record of ours checked (seal.py)."""
        sealer = self.record_key.sealer if self.record_key.loaded else UNLOADED
        workloads = {w.key: sealer.verify_workload(w) for w in self.deployments.items.values()}
        workloads.update(
            {w.key: sealer.verify_workload(w) for w in self.statefulsets.items.values()}
        )
        now = self.clock.now()
        nodes = {node.name: node for node in self.nodes.items.values()}
        history = next(iter(self.history.items.values()), History())
        return Snapshot(
            now=now,
            nodes=nodes,
            pods=dict(self.pods.items),
            workloads=workloads,
            replicaset_owners={k: owner for k, owner in self.replicasets.items.items() if owner},
            history=history,
            holds=dict(self.holds.items),
            scalers={
                k: sealer.verify_scaler(s)
                for k, s in held_through(self.scalers.items, self.scaled_objects.items).items()
            },
            risks=self.assessor.risks(
                nodes.values(), history, now=now, monotonic=self.clock.monotonic()
            ),
            prices=self.prices.table,
        )

    async def reconcile(self) -> None:
        started = time.perf_counter()
        self.passes += 1
        now = self.clock.monotonic()
        elapsed, self._last_pass = now - self._last_pass, now
        leader = self.elector.is_leader
        self.metrics.leader.set(1 if leader else 0)
        try:
            state = self.snapshot()
            settings = with_nodepools(self.planner_settings, self.nodepools.nodepools, state)
            decided = plan(state, settings)
        except Exception:  # a bug must not stop the loop
            self.metrics.reconcile_errors.labels("plan").inc()
            self.log.exception("planning failed")
            return
        self.view = View.of_pass(
            state,
            decided.actions,
            risks=state.risks,
            declared=settings.declared_pools,
        )
        self.webhook.forget_shown(self.view)
        try:
            self.recorder.observe(state, decided, elapsed)
        except Exception:  # measuring must never stop acting
            self.metrics.reconcile_errors.labels("observe").inc()
            self.log.exception("observing failed")
        if leader or self.settings.dry_run:
            for step in decided.steps:
                if not self.elector.may_write() and not self.settings.dry_run:
                    break  # lost the Lease (or may have) during the pass: stop before writing
                await asyncio.gather(*(self._apply(action) for action in step))
        self.metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _apply(self, action: Action) -> None:
        try:
            outcome = await self.executor.apply(action)
            self.recorder.applied(action, outcome)
        except Exception:  # one failed action must never stop the others or the loop
            self.metrics.reconcile_errors.labels("apply").inc()
            self.log.exception("action failed", action=type(action).__name__)

    def _prices_in_use(self) -> tuple[list[str], list[str]]:
        nodes = list(self.nodes.items.values())
        return [region_of(n.labels) for n in nodes], [n.sku for n in nodes]

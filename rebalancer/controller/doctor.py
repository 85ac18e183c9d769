"""The doctor in the controller: the checks of `checkup.py` every few minutes, as a gauge and as
Warning Events.

Every replica runs them and sets `rebalancer_doctor_findings{check}` (both see the same cluster;
aggregate with `max`). The leader says each finding once, when it appears, as a Warning Event
`SpotRebalancerMisconfigured` on the object to change: not every run, and again only after it has
gone away and come back (or after a change of leader). The YAML that fixes it does not fit in an
Event; `kubectl spot-rebalancer doctor` prints it.

DaemonSets (the device plugin's, our agent's) are read with one list per run rather than kept in
an informer: they change rarely and nothing here is urgent. A run whose list fails is skipped: a
check never guesses. Karpenter's NodePools (AKS node auto-provisioning) are listed the same way; a
cluster without Karpenter answers 404 (no NodePools), and a list that fails otherwise skips the
NodePool checks alone. KAITO's Workspaces likewise (404 without KAITO: no Workspaces; any other
failure skips their check alone). The cluster autoscaler's status is not read here (it lives in
kube-system, outside the controller's permissions), so pools at zero are the plugin's check only.

On-demand GPU nodes kept empty after their pods left (`on-demand-fallback-kept-idle`) are the
controller's check only: it needs a history, which one look by the plugin does not have. The
snapshot is watched every `IDLE_SAMPLE_SECONDS` for them (`idle_nodes.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from rebalancer.clock import Clock
from rebalancer.controller.catalogue import misconfigured
from rebalancer.controller.checkup import Finding, diagnose, helm_upgrade_command, setup_of
from rebalancer.controller.idle_nodes import IdleWatch
from rebalancer.controller.kaito import WORKSPACES, WorkspaceInfo
from rebalancer.controller.karpenter import NodePoolInfo
from rebalancer.controller.model import DaemonSetInfo
from rebalancer.controller.recorder import tell
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.kube.client import Requester
from rebalancer.kube.errors import KubeError, NotFound
from rebalancer.kube.events import EventRecorder
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import Check

DAEMONSETS = "/apis/apps/v1/daemonsets"
# How often the snapshot is looked at for empty on-demand GPU nodes: the precision of the spells
# measured (a scale-down delay is minutes).
IDLE_SAMPLE_SECONDS = 30.0
# An on-demand GPU node empty longer than this after its GPU pods left is worth a warning: the
# cluster autoscaler removes nodes after 2 to 5 minutes with a tuned profile, 10 with AKS's default.
IDLE_LIMIT_SECONDS = 300.0
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"


class Doctor:
    def __init__(
        self,
        *,
        client: Requester,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        events: EventRecorder | None,
        leading: Callable[[], bool],
        clock: Clock,
        log: Any,
        leadership: asyncio.Event | None = None,
    ) -> None:
        """`leading()`: whether this replica may write now; `leadership`: set while it leads."""
        self._client = client
        self._leadership = leadership
        self._planner = settings.planner
        self._interval = settings.doctor_interval_seconds
        self._helm_upgrade = helm_upgrade_command(settings.helm_chart, settings.helm_chart_version)
        self._metrics = metrics
        self._events = events
        self._leading = leading
        self._clock = clock
        self._log = log
        self._reported: set[tuple[str, str, str, str]] = set()
        self.idle = IdleWatch()
        self.runs = 0  # checks completed: what "after several runs" counts
        for check in Check:
            metrics.doctor_findings.labels(str(check)).set(0)

    async def run(self, stop: asyncio.Event, snapshot: Callable[[], Snapshot]) -> None:
        """Check now (the caches have synced), then every `doctor_interval_seconds`, and at once
        when this replica becomes the leader (`leadership` is set), so that it tells."""
        if self._interval <= 0:
            return
        watching = asyncio.ensure_future(self._watch_idle(stop, snapshot))
        try:
            await self._run(stop, snapshot)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)

    async def _watch_idle(self, stop: asyncio.Event, snapshot: Callable[[], Snapshot]) -> None:
        while not stop.is_set():
            try:
                self.idle.observe(snapshot())
            except Exception:  # a bug here must not stop the controller
                self._log.exception("doctor's idle-node watch failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=IDLE_SAMPLE_SECONDS)

    async def _run(self, stop: asyncio.Event, snapshot: Callable[[], Snapshot]) -> None:
        while not stop.is_set():
            try:
                await self.check(snapshot())
            except Exception:  # a bug here must not stop the controller
                self._log.exception("doctor failed")
            waiters = {asyncio.ensure_future(stop.wait())}
            if self._leadership is not None and not self._leading():
                waiters.add(asyncio.ensure_future(self._leadership.wait()))
            try:
                await asyncio.wait(
                    waiters, timeout=self._interval, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def check(self, state: Snapshot) -> list[Finding] | None:
        """One run: the findings, or None when the DaemonSets could not be read."""
        try:
            listed = await self._client.request("GET", DAEMONSETS)
        except KubeError as error:
            self._metrics.reconcile_errors.labels(error.kind).inc()
            self._log.warning("doctor skipped: DaemonSets not readable", reason=str(error))
            return None
        daemonsets = [DaemonSetInfo.from_json(item) for item in listed.get("items") or []]
        nodepools = await self._nodepools()
        workspaces = await self._workspaces()
        self.idle.observe(state)
        setup = setup_of(
            state,
            settings=self._planner,
            daemonsets=daemonsets,
            idle_spells=self.idle.spells(),
            idle_limit_seconds=IDLE_LIMIT_SECONDS,
            helm_upgrade=self._helm_upgrade,
            nodepools=nodepools,
            workspaces=workspaces,
        )
        findings = diagnose(setup)
        for check in Check:
            count = sum(1 for finding in findings if finding.check == check)
            self._metrics.doctor_findings.labels(str(check)).set(count)
        self._tell(findings)
        self.runs += 1
        return findings

    async def _nodepools(self) -> list[NodePoolInfo] | None:
        """Karpenter's NodePools; [] without Karpenter; None when they could not be read."""
        try:
            listed = await self._client.request("GET", NODEPOOLS)
        except NotFound:
            return []
        except KubeError as error:
            self._metrics.reconcile_errors.labels(error.kind).inc()
            self._log.warning("doctor: NodePool checks skipped", reason=str(error))
            return None
        return [NodePoolInfo.from_json(item) for item in listed.get("items") or []]

    async def _workspaces(self) -> list[WorkspaceInfo] | None:
        """KAITO's Workspaces; [] without KAITO; None when they could not be read."""
        try:
            listed = await self._client.request("GET", WORKSPACES)
        except NotFound:
            return []
        except KubeError as error:
            self._metrics.reconcile_errors.labels(error.kind).inc()
            self._log.warning("doctor: KAITO Workspace check skipped", reason=str(error))
            return None
        return [WorkspaceInfo.from_json(item) for item in listed.get("items") or []]

    def _tell(self, findings: list[Finding]) -> None:
        """A log line and an Event per finding that appeared since the last run (leader only)."""
        current = {finding.key for finding in findings}
        self._reported &= current  # gone: said again if it comes back
        if not self._leading():
            self._reported.clear()  # a new leader says what is wrong once more
            return
        for finding in findings:
            if finding.key in self._reported:
                continue
            self._reported.add(finding.key)
            self._log.warning(
                "misconfigured",
                check=str(finding.check),
                subject=str(finding.object),
                reason=finding.what,
                fix=finding.fix,
            )
            tell(self._events, misconfigured(finding), self._clock.now())

"""Measure: what the controller observes and what its actions came to, as metrics, logs and
Kubernetes Events. The last step of a pass; it decides nothing and writes only Events.

- `observe(snapshot, plan, elapsed)`: notices first seen (counts, lead time), deadlines missed,
  the ready-replica deficit of surged workloads, the eviction windows of the history, cost.
- `applied(action, outcome)`: one log line and one count per action outcome, the latencies that
  an outcome ends (notice to cordon, to drained, surge to replacements Ready), and the Event that
  `catalogue.event_for` gives for it.
- notifications (`messages.py`), handed to `notify` (the notifier's `offer`, which never blocks):
  a notice acted on (its node cordoned), a blocked fail-over, a missed deadline, a risk move.
What it keeps in memory serves measurement only (when this process first saw a notice, which
series exist); nothing here feeds a decision. None of it grows with what others write: maps keyed
by live objects are pruned to the snapshot every pass, and "said once" memories of text (refused
policies, log lines, blocked causes) keep digests, bounded (`bounded.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rebalancer.azure.risk_data import RiskData, no_risk_data
from rebalancer.clock import Clock
from rebalancer.controller.accounting import Accountant
from rebalancer.controller.actions import (
    ACTION_TYPES,
    APPLIED,
    Action,
    Cordon,
    Delete,
    Evict,
    FinishReturn,
    MarkDrained,
    Outcome,
    RecordHistory,
    ReportBlocked,
    ScaleBack,
    ScaleUp,
    StartReturn,
    WorkloadKey,
)
from rebalancer.controller.bounded import SaidOnce, digest
from rebalancer.controller.catalogue import (
    KubeEvent,
    event_for,
    input_refused,
    planning_failed,
    pod_placed,
    policy_refused,
    replacement_placed,
)
from rebalancer.controller.contain import Failure, Scope
from rebalancer.controller.history import WINDOWS
from rebalancer.controller.messages import (
    Notification,
    deadline_missed,
    failover_blocked,
    notice_acted_on,
    risk_move,
)
from rebalancer.controller.model import NodeInfo
from rebalancer.controller.planner import Plan
from rebalancer.controller.policy import in_force
from rebalancer.controller.pools import placement_options
from rebalancer.controller.records import Surge
from rebalancer.controller.risk import (
    HISTORY,
    LEVELS,
    PLACEMENT_VALUES,
    PRIOR,
    RESOURCE_GRAPH,
    GroupKey,
)
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.target_plan import account_of
from rebalancer.kube.errors import KubeError
from rebalancer.kube.events import EventRecorder
from rebalancer.metrics import ControllerMetrics, initialise
from rebalancer.vocabulary import (
    ACTION_OUTCOMES,
    EVENT_TYPE_LABELS,
    FAILOVER_REASONS,
    KARPENTER_DISRUPTION,
    MANUAL,
    MOVE_OUTCOMES,
    RETURN_OUTCOMES,
    ActionResult,
    Reason,
    Rejection,
    Source,
    event_type_label,
)


def error_kinds(error: type[KubeError] = KubeError) -> set[str]:
    """The `kind` of KubeError and of every subclass: the API error labels."""
    kinds = {error.kind}
    for subclass in error.__subclasses__():
        kinds |= error_kinds(subclass)
    return kinds


@dataclass
class Seen:
    """When this process first saw a notice, for latency metrics."""

    first_seen: float
    pool: str = ""  # kept for the missed-deadline metric: the Node may be gone when it counts
    cordoned: bool = False
    drained: bool = False
    # Why a deadline was missed, if it is: what the passes saw while the node was there.
    late: bool = False  # first seen with less time left than the drain margin
    blocked: bool = False  # a PodDisruptionBudget refused an eviction from the node
    terminating: bool = False  # at the last look, pods were still shutting down
    left: bool = False  # at the last look, pods were there and not being deleted
    # Karpenter's disruption: no deadline to miss (its drain takes the node when it is done).
    open_ended: bool = False

    def missed_reason(self) -> str:
        for reason, flag in (
            ("late_notice", self.late),
            ("eviction_blocked", self.blocked),
            ("pods_terminating", self.terminating),
            ("pods_left", self.left),
        ):
            if flag:
                return reason
        return "other"


MISSED_REASONS = ("late_notice", "eviction_blocked", "pods_terminating", "pods_left", "other")
# "Said once" memories: a digest (16 bytes) each, the least recently seen forgotten first.
LOGGED_ONCE_LIMIT = 10_000
SAID_ONCE_LIMIT = 4096


class Recorder:
    def __init__(
        self,
        *,
        metrics: ControllerMetrics,
        events: EventRecorder | None,
        accountant: Accountant,
        clock: Clock,
        log: Any,
        dry_run: bool = False,
        risk_data: RiskData = no_risk_data,
        deadline_margin_seconds: float = 5.0,
        notify: Callable[[Notification], None] | None = None,
    ) -> None:
        self._deadline_margin = deadline_margin_seconds
        self._notify = notify or (lambda _: None)
        self.metrics = metrics
        self._risk_data = risk_data  # for the ages of Azure's data only
        self._risk_series: set[tuple[str, ...]] = set()
        self._risk_levels: dict[GroupKey, str] = {}
        self._events = events
        self._accountant = accountant
        self._clock = clock
        self._log = log
        self._seen: dict[tuple[str, str], Seen] = {}
        # When this process saw a workload surge, and the pool of the node under notice.
        self._surge_started: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._blocked_workloads: set[tuple[str, str, str]] = set()
        self._logged = SaidOnce(LOGGED_ONCE_LIMIT)
        self._blocked_said = SaidOnce(SAID_ONCE_LIMIT)  # (workload, cause) of blocked failovers
        self._policy_said: dict[tuple[str, str, str], bytes] = {}  # digest of the refused text
        self._reported_pods = SaidOnce(SAID_ONCE_LIMIT)
        self._placed: set[tuple[str, str]] = set()  # (pod uid, which Event): live pods only
        self._refused_series: set[tuple[str, str]] = set()
        self._target_series: set[tuple[str, str]] = set()  # (namespace, name) with a target
        # What the last pass refused or failed on: reported when it appears, not every pass.
        # Bounded by the objects the cluster has now, never by what was ever written.
        self._refused_inputs: set[tuple[tuple[str, str, str], tuple[str, ...]]] = set()
        self._failures: set[Failure] = set()
        self._metric_groups: set[tuple[str, str, str, bool]] = set()
        self._deficit_workloads: set[str] = set()
        self._eviction_series: set[tuple[str, str, str]] = set()
        for stage, reasons in FAILOVER_REASONS.items():
            initialise(metrics.failovers, [stage], [str(reason) for reason in reasons])
        outcomes = (
            [ActionResult.DRY_RUN.value]
            if dry_run
            else [o for o in ACTION_OUTCOMES if o != ActionResult.DRY_RUN]
        )
        initialise(metrics.actions, [t.__name__ for t in ACTION_TYPES], outcomes)
        initialise(metrics.returns, ["started", *map(str, RETURN_OUTCOMES)])
        initialise(metrics.risk_moves, ["started", *map(str, MOVE_OUTCOMES)])
        initialise(
            metrics.reconcile_errors,
            ["plan", "observe", "apply", "informer", *sorted(error_kinds())],
        )

    # ---- observations ------------------------------------------------------------------------

    def observe(self, snapshot: Snapshot, plan: Plan, elapsed: float) -> None:
        self.metrics.active_notices.set(len(plan.active))
        self._initialise_workloads(plan.managed)
        for node, why in plan.ignored:
            self.log_once("notice ignored", why, node=node)
        self._notices(snapshot)
        self._deficit(snapshot, elapsed)
        self._placements(snapshot, plan)
        self._contained(snapshot, plan)
        self._policies(snapshot)
        self._targets(snapshot)
        self._evictions(snapshot)
        self._risk(snapshot)
        self._accountant.account(snapshot, plan.managed, self._clock.monotonic())
        self._forget_the_gone(snapshot)

    def _forget_the_gone(self, snapshot: Snapshot) -> None:
        """Keep only what concerns objects that still exist: pods and workloads come and go for
        the life of the process, and each would otherwise stay here for good."""
        pods = {pod.uid for pod in snapshot.pods.values()}
        self._placed = {key for key in self._placed if key[0] in pods}
        workloads = {f"{w.namespace}/{w.name}" for w in snapshot.workloads.values()}
        self._deficit_workloads &= workloads
        for key in [k for k in self._surge_started if k not in snapshot.workloads]:
            del self._surge_started[key]
        self._blocked_workloads &= set(snapshot.workloads)  # series made again if it comes back

    def _notices(self, snapshot: Snapshot) -> None:
        now = self._clock.monotonic()
        live: set[tuple[str, str]] = set()
        if snapshot.history.unreadable:
            self.log_once(
                "eviction history unreadable; it is rewritten", snapshot.history.unreadable
            )
        for node in snapshot.nodes.values():
            self._initialise_group(node)
            for reason in node.skipped:
                self.log_once("notice skipped", reason, node=node.name)
            for notice in node.notices:
                key = (node.name, notice.event_id)
                live.add(key)
                if key in self._seen:
                    continue
                lead = (
                    (notice.deadline - snapshot.now).total_seconds()
                    if notice.deadline is not None
                    else 0.0
                )
                self._seen[key] = Seen(
                    first_seen=now,
                    pool=node.pool,
                    late=lead < self._deadline_margin,
                    open_ended=notice.open_ended,
                )
                self.metrics.notices.labels(
                    event_type_label(notice.event_type),
                    str(notice.source),
                    node.pool,
                    node.zone,
                    node.sku,
                    "spot" if node.spot else "regular",
                ).inc()
                if notice.deadline is not None and not notice.open_ended:
                    lead = (notice.deadline - snapshot.now).total_seconds()
                    self.metrics.notice_lead_time.labels(
                        event_type_label(notice.event_type)
                    ).observe(max(0.0, lead))
                self._log.info(
                    "notice",
                    node=node.name,
                    event_id=notice.event_id,
                    event_type=notice.event_type,
                    source=str(notice.source),
                    deadline=(
                        "none (Karpenter drains)"
                        if notice.open_ended
                        else str(notice.deadline)
                        if notice.deadline
                        else "now"
                    ),
                )
        for (name, _), seen in self._seen.items():
            if name in snapshot.nodes and not seen.drained:
                pods = [
                    p
                    for p in snapshot.pods_by_node.get(name, [])
                    if not p.daemonset and not p.mirror and not p.finished
                ]
                seen.terminating = any(p.deleting for p in pods)
                seen.left = any(not p.deleting for p in pods)
        for key in [k for k in self._seen if k not in live]:
            seen = self._seen.pop(key)
            # Missed: the node went (its VM taken) while cordoned and not yet drained. A notice
            # that vanished from a node that is still there was cancelled, not missed.
            gone = seen.cordoned and not seen.drained and key[0] not in snapshot.nodes
            if gone and not seen.open_ended:
                reason = seen.missed_reason()
                self.metrics.drain_missed_deadline.labels(seen.pool, reason).inc()
                self._log.warning("deadline missed", node=key[0], event_id=key[1], why=reason)
                self._notify(
                    deadline_missed(node=key[0], pool=seen.pool, event_id=key[1], why=reason)
                )

    def _deficit(self, snapshot: Snapshot, elapsed: float) -> None:
        for workload in snapshot.workloads.values():
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

    def _placements(self, snapshot: Snapshot, plan: Plan) -> None:
        """An Event, once per replacement, saying where it was scheduled and what else there was.
        A replacement: a pod of a surged workload created after the surge's first notice was
        first seen, not one of the doomed."""
        if self._events is None:
            return
        first_seen = {e.event_id: e.first_seen for e in snapshot.history.entries}
        noticed = set(plan.active)
        free: dict[str, int] | None = None
        for workload in snapshot.workloads.values():
            surge = workload.surge
            if surge is None or surge.completed:
                continue
            seen = [first_seen[e] for e in surge.event_ids if e in first_seen]
            if not seen:
                continue
            for pod in snapshot.pods_by_workload.get(workload.key, []):
                name = f"{pod.namespace}/{pod.name}"
                if (
                    name in surge.doomed_pods
                    or not pod.node_name
                    or pod.node_name not in snapshot.nodes
                    or pod.created is None
                    or pod.created < min(seen)
                    or (pod.uid, "placed") in self._placed
                ):
                    continue
                self._placed.add((pod.uid, "placed"))
                if free is None:
                    free = free_gpus(snapshot)
                options = placement_options(
                    workload.template_spec, workload.gpus_per_replica,
                    snapshot.nodes.values(), free, noticed,
                )  # fmt: skip
                event = replacement_placed(
                    workload.key, workload.uid, pod.name, snapshot.nodes[pod.node_name], options
                )
                self._log.info(
                    "replacement placed", workload="/".join(workload.key), message=event.message
                )
                self._events.emit(
                    regarding=event.regarding, reason=event.reason, message=event.message,
                    now=self._clock.now(),
                )  # fmt: skip

    def _contained(self, snapshot: Snapshot, plan: Plan) -> None:
        """Workloads left alone for unreadable records of ours, and objects a planning method
        failed on: a log line, a count and a Warning Event on the object when each appears."""
        refused = {(key, problems) for key, _, problems in plan.refused}
        for key, uid, problems in plan.refused:
            if (key, problems) in self._refused_inputs:
                continue
            self.metrics.inputs_refused.labels(key[0]).inc()
            self._log.warning("input refused", workload="/".join(key), problems=list(problems))
            self._emit(input_refused(key, uid, problems))
        self._refused_inputs = refused
        failures = set(plan.failures)
        for failure in plan.failures:
            if failure in self._failures:
                continue
            self.metrics.planning_failures.labels(failure.method).inc()
            self._log.error(
                "planning failed for one object; it is left alone this pass",
                method=failure.method, subject=failure.where.subject, error=failure.error,
            )  # fmt: skip
            event = planning_failed(failure, _uid_of(snapshot, failure.where))
            if event is not None:
                self._emit(event)
        self._failures = failures

    def _policies(self, snapshot: Snapshot) -> None:
        """A Warning Event, once per refused policy text, on a workload whose placement policy
        is invalid, and the gauge; an Event per pod the policy placed, once it is scheduled."""
        refused: set[tuple[str, str]] = set()
        said: dict[tuple[str, str, str], bytes] = {}  # only the workloads refused now
        for workload in snapshot.workloads.values():
            result = in_force(workload.annotations)
            if not result.refused:
                continue
            refused.add((workload.namespace, workload.name))
            said[workload.key] = text = digest(result.refused)
            if self._policy_said.get(workload.key) == text:
                continue
            kept = result.policy.to_json() if result.policy else "none (placed as without one)"
            self._emit(policy_refused(workload.key, workload.uid, result.refused, kept))
        self._policy_said = said
        for labels in self._refused_series - refused:
            self.metrics.policy_refused.labels(*labels).set(0)
        for labels in refused:
            self.metrics.policy_refused.labels(*labels).set(1)
        self._refused_series = refused
        for pod in snapshot.pods.values():
            if not pod.placed or not pod.node_name or (pod.uid, "policy") in self._placed:
                continue
            node = snapshot.nodes.get(pod.node_name)
            owner = snapshot.workload_of(pod)
            if node is None or owner is None:
                continue
            self._placed.add((pod.uid, "policy"))
            self._emit(pod_placed(owner.key, owner.uid, pod.name, pod.placed, pod.placed_why, node))

    def _targets(self, snapshot: Snapshot) -> None:
        """The availability targets' gauges, from each target's record as the planner wrote
        it: the target, its account brought up to now, and the plan in force."""
        m = self.metrics
        series: set[tuple[str, str]] = set()
        for workload in snapshot.workloads.values():
            policy = in_force(workload.annotations).policy
            record = workload.spare
            target = policy.target_percent if policy is not None else None
            if target is None or record is None or record.spot is None:
                continue
            key = (workload.namespace, workload.name)
            series.add(key)
            m.target.labels(*key).set(target)
            account = account_of(record, target, snapshot.now)
            if account.watched_seconds > 0:
                below = account.below_seconds
                m.target_all_ready.labels(*key).set(1.0 - below / account.watched_seconds)
                allowed = account.allowed_seconds
                m.target_budget_spent.labels(*key).set(below / allowed if allowed > 0 else 0.0)
            replicas = record.base + record.added
            kinds = {
                "owner": record.base,
                "spot": record.spot,
                "on_demand": max(0, replicas - record.spot),
                "waiting": len(record.waiting),
            }
            for kind, count in kinds.items():
                m.target_replicas.labels(*key, kind).set(count)
        for gone in self._target_series - series:
            for gauge in (m.target, m.target_all_ready, m.target_budget_spent):
                with contextlib.suppress(KeyError):  # the account's: only once it opened
                    gauge.remove(*gone)
            for kind in ("owner", "spot", "on_demand", "waiting"):
                m.target_replicas.remove(*gone, kind)
        self._target_series = series

    def _emit(self, event: KubeEvent) -> None:
        self._log.info("event", reason=str(event.reason), message=event.message)
        if self._events is not None:
            self._events.emit(
                regarding=event.regarding, reason=event.reason, message=event.message,
                event_type="Warning" if event.warning else "Normal", now=self._clock.now(),
            )  # fmt: skip

    def _evictions(self, snapshot: Snapshot) -> None:
        """Preempt notices per pool, SKU and zone in each window, from the history on the
        cluster: every replica shows the same figures, and a new leader keeps them."""
        counts: dict[tuple[str, str, str, str], int] = {}
        for name, window in WINDOWS.items():
            for entry in snapshot.history.preempts(now=snapshot.now, window=window):
                key = (entry.pool, entry.sku, entry.zone, name)
                counts[key] = counts.get(key, 0) + 1
        groups = {key[:3] for key in counts} | self._eviction_series
        for group in groups:
            for name in WINDOWS:
                self.metrics.evictions.labels(*group, name).set(counts.get((*group, name), 0))
        self._eviction_series = groups

    def _risk(self, snapshot: Snapshot) -> None:
        """The risk of every spot group as the snapshot carries it (assessed where the snapshot
        is built, `assessor.py`): gauges per group and input, the ages of Azure's data, and one
        log line with the reasons when a group's level changes (or is first assessed)."""
        m = self.metrics
        series: set[tuple[str, ...]] = set()
        for key, risk in snapshot.risks.items():
            figures = {"estimate": risk.rate_per_hour}
            used = set(risk.sources)
            if HISTORY in used and risk.observed_rate is not None:
                figures[HISTORY] = risk.observed_rate
            if RESOURCE_GRAPH in used or PRIOR in used:
                # Before the placement factor: the bucket's rate or the setting's.
                figures[RESOURCE_GRAPH if RESOURCE_GRAPH in used else PRIOR] = risk.base_rate
            for source, value in figures.items():
                m.eviction_risk.labels(*key, source).set(value)
                series.add((*key, source))
            m.eviction_risk_level.labels(*key).set(LEVELS.index(risk.level))
            m.placement_score.labels(*key).set(PLACEMENT_VALUES.get(risk.placement_score, 0))
            series.add(key)
            if self._risk_levels.get(key) != risk.level:
                self._log.info(
                    "eviction risk",
                    pool=risk.pool,
                    zone=risk.zone,
                    sku=risk.sku,
                    risk_level=risk.level,
                    was=self._risk_levels.get(key, ""),
                    rate_per_hour=round(risk.rate_per_hour, 4),
                    sources=list(risk.sources),
                    reasons=risk.explain(),
                )
                self._risk_levels[key] = risk.level
        for gone in self._risk_series - series:
            if len(gone) == 4:
                m.eviction_risk.remove(*gone)
            else:
                m.eviction_risk_level.remove(*gone)
                m.placement_score.remove(*gone)
                self._risk_levels.pop((gone[0], gone[1], gone[2]), None)
        self._risk_series = series
        rates, scores = self._risk_data()
        for source, data in (("resource_graph", rates), ("placement_score", scores)):
            if data is not None:
                m.risk_source_age.labels(source).set(
                    (snapshot.now - data.fetched_at).total_seconds()
                )

    def _initialise_group(self, node: NodeInfo) -> None:
        """Zero series for a node group's notices and missed drains before its first notice."""
        group = (node.pool, node.zone, node.sku, node.spot)
        if group in self._metric_groups:
            return
        self._metric_groups.add(group)
        initialise(
            self.metrics.notices,
            [*EVENT_TYPE_LABELS, MANUAL, KARPENTER_DISRUPTION],
            [str(source) for source in Source],
            [node.pool],
            [node.zone],
            [node.sku],
            ["spot" if node.spot else "regular"],
        )
        for reason in MISSED_REASONS:
            self.metrics.drain_missed_deadline.labels(node.pool, reason)
        self.metrics.replacement_ready.labels(node.pool)

    def _initialise_workloads(self, managed: Iterable[WorkloadKey]) -> None:
        """Zero series for a managed workload's blocked fail-overs before the first one."""
        for key in managed:
            if key in self._blocked_workloads:
                continue
            self._blocked_workloads.add(key)
            for reason in FAILOVER_REASONS["blocked"]:
                self.metrics.failovers_blocked.labels(_workload_label(key), str(reason))

    # ---- outcomes ----------------------------------------------------------------------------

    def applied(self, action: Action, outcome: Outcome) -> None:
        name = type(action).__name__
        self.metrics.actions.labels(name, outcome.label).inc()
        if outcome.error_kind:
            self.metrics.reconcile_errors.labels(outcome.error_kind).inc()
            self._log.warning(
                "action failed",
                action=name,
                subject=action,
                kind=outcome.error_kind,
                reason=outcome.detail,
            )
        elif outcome.rejection is not None:
            self.log_once(f"action rejected ({outcome.rejection})", action, reason=outcome.detail)
        if outcome.result is ActionResult.DRY_RUN:
            self.log_once("would act (dry run)", action)
            return
        if isinstance(action, ReportBlocked):
            self._blocked(action)
            return
        if isinstance(action, Evict) and outcome.rejection is Rejection.BLOCKED:
            self.metrics.pods.labels("eviction_blocked").inc()
            seen = self._seen.get((action.node, action.event_id))
            if seen is not None:
                seen.blocked = True
            if not self._reported_pods.first_time((action.pod, action.event_id)):
                return  # asked again every pass; said once
        tell(self._events, event_for(action, outcome), self._clock.now())
        if outcome.applied:
            self._measure(action)

    def _blocked(self, action: ReportBlocked) -> None:
        """Said once per workload and cause, not every pass."""
        if not self._blocked_said.first_time((action.workload, action.detail)):
            return
        self._log.warning(
            "failover blocked", workload="/".join(action.workload), detail=action.detail
        )
        self._count_blocked(action.workload, action.reason)
        tell(self._events, event_for(action, APPLIED), self._clock.now())
        self._notify(
            failover_blocked(
                workload="/".join(action.workload), detail=action.detail, reason=str(action.reason)
            )
        )

    def _count_blocked(self, workload: WorkloadKey, reason: Reason) -> None:
        self.metrics.failovers.labels("blocked", str(reason)).inc()
        self.metrics.failovers_blocked.labels(_workload_label(workload), str(reason)).inc()

    def _pool_under_notice(self, record: Surge | None) -> str:
        """The pool of the first node whose notice surged the workload ("" if not seen here)."""
        events = set(record.event_ids) if record else set()
        seen = [s for (_, event_id), s in self._seen.items() if event_id in events]
        return min(seen, key=lambda s: s.first_seen).pool if seen else ""

    def _measure(self, action: Action) -> None:
        now = self._clock.monotonic()
        log = self._log
        match action:
            case Cordon():
                seen = self._seen.get((action.node, action.event_id))
                if seen is not None and not seen.cordoned:
                    seen.cordoned = True
                    self.metrics.notice_to_cordon.observe(now - seen.first_seen)
                log.info(
                    "cordoned",
                    node=action.node,
                    event_id=action.event_id,
                    event_type=action.event_type,
                )
                self._notify(
                    notice_acted_on(
                        node=action.node,
                        pool=seen.pool if seen is not None else "",
                        event_type=action.event_type,
                        event_id=action.event_id,
                    )
                )
            case ScaleUp():
                self._surge_started.setdefault(
                    action.workload, (now, self._pool_under_notice(action.record))
                )
                self.metrics.failovers.labels("started", str(Reason.NOTICE)).inc()
                log.info(
                    "surged",
                    workload="/".join(action.workload),
                    replicas=action.replicas,
                    doomed=list(action.record.doomed_pods) if action.record else [],
                )
            case ScaleBack() if action.reason == Reason.SURGE_NOT_HELD:
                self._surge_started.pop(action.workload, None)
                self._count_blocked(action.workload, action.reason)
                log.warning(
                    "surge not held: replicas set back by others",
                    workload="/".join(action.workload),
                )
            case ScaleBack():
                started = self._surge_started.pop(action.workload, None)
                if started is not None and action.reason == Reason.REPLACEMENTS_READY:
                    at, pool = started
                    self.metrics.replacement_ready.labels(pool).observe(now - at)
                self.metrics.failovers.labels("completed", str(action.reason)).inc()
                log.info(
                    "scaled back",
                    workload="/".join(action.workload),
                    replicas=action.replicas,
                    reason=str(action.reason),
                )
            case Evict():
                self.metrics.pods.labels("evicted").inc()
                log.info("evicted", pod="/".join(action.pod), node=action.node)
            case Delete():
                self.metrics.pods.labels("deleted").inc()
                log.info(
                    "deleted at the deadline",
                    pod="/".join(action.pod),
                    node=action.node,
                    grace_seconds=action.grace_seconds,
                )
            case MarkDrained():
                seen = self._seen.get((action.node, action.event_id))
                if seen is not None and not seen.drained:
                    seen.drained = True
                    self.metrics.drain_duration.observe(now - seen.first_seen)
                log.info("drained", node=action.node, event_id=action.event_id)
            case StartReturn() if action.record is not None and action.record.purpose == "risk":
                self.metrics.risk_moves.labels("started").inc()
                log.info(
                    "moving a replica off a risky spot group",
                    workload="/".join(action.workload),
                    retire=action.record.retire,
                    why=action.record.why,
                )
                self._notify(
                    risk_move(
                        workload="/".join(action.workload),
                        retire=action.record.retire,
                        why=action.record.why,
                    )
                )
            case FinishReturn() if action.purpose == "risk":
                self.metrics.risk_moves.labels(str(action.reason)).inc()
                log.info(
                    "move finished", workload="/".join(action.workload), reason=str(action.reason)
                )
            case StartReturn():
                self.metrics.returns.labels("started").inc()
                log.info(
                    "returning a replica to spot",
                    workload="/".join(action.workload),
                    pool=action.record.pool if action.record else "",
                    retire=action.record.retire if action.record else "",
                )
            case FinishReturn():
                self.metrics.returns.labels(str(action.reason)).inc()
                log.info(
                    "return finished", workload="/".join(action.workload), reason=str(action.reason)
                )
            case RecordHistory():
                log.info(
                    "eviction history recorded",
                    new=[e.event_id for e in action.new],
                    entries=len(action.history.entries),
                )
            case _:
                self.log_once("applied", action)

    def log_once(self, message: str, subject: Any, **fields: Any) -> None:
        if not self._logged.first_time((message, subject)):
            return
        self._log.info(message, subject=subject, **fields)  # rendered by logging.plain_values


def tell(events: EventRecorder | None, event: KubeEvent | None, now: datetime) -> None:
    """Queue a catalogue Event (nothing when there is none to say, or no recorder: dry run)."""
    if event is not None and events is not None:
        events.emit(
            regarding=event.regarding,
            reason=event.reason,
            message=event.message,
            event_type="Warning" if event.warning else "Normal",
            now=now,
        )


def free_gpus(snapshot: Snapshot) -> dict[str, int]:
    """GPUs not asked for by a running pod, per node."""
    return {
        name: node.allocatable_gpus
        - sum(p.gpus for p in snapshot.pods_by_node.get(name, []) if not p.finished)
        for name, node in snapshot.nodes.items()
    }


def _uid_of(snapshot: Snapshot, where: Scope) -> str:
    if where.workload is not None:
        workload = snapshot.workloads.get(where.workload)
        return workload.uid if workload is not None else ""
    node = snapshot.nodes.get(where.node)
    return node.uid if node is not None else ""


def _workload_label(key: WorkloadKey) -> str:
    """`namespace/name`, as `rebalancer_controller_replica_deficit_replica_seconds_total` has it."""
    _, namespace, name = key
    return f"{namespace}/{name}"

"""The agent's loop: poll IMDS, track this VM's events, publish them on the Node, acknowledge.

One tick per poll interval:
1. GET Scheduled Events (the client paces, retries and caps);
2. the tracker diffs the document against what is pending (new, changed, ended);
3. if what the Node should show differs from what was last written (or a resync is due), write
   the annotation (kept under its size limit, most urgent events first), then the condition, so a
   reader that sees the condition finds the details; the condition is written even when the
   annotation cannot be (the API server refuses the annotation of a Node whose annotations
   total 256 KiB: said in a warning and counted, `node_writes_total{outcome="annotation_refused"}`).
   Both carry the same `Published` stamp, so a condition written after a refused annotation is
   the newer one and readers take it (see `node_signal.newer_of`);
4. for pending events the settings allow, acknowledge to Azure once the controller has marked the
   Node drained for that EventId, and only for events that name this VM alone and were read
   without oddities, because an acknowledgement lets the event proceed for every VM it lists;
   then write the acknowledgement on the Node at once (`acknowledgedAt`): Azure starts the event
   then, and a Reboot or Redeploy takes this VM and the agent down before a next tick.
Errors are counted, logged when they start and stop, and shown on /readyz; the loop never exits
on them. Input the agent skips or reads with oddities is logged and counted once, not per poll.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from rebalancer.agent.tracker import EventTracker, Observation
from rebalancer.agent.vm_name import vm_name_from_provider_id
from rebalancer.azure.imds import ImdsClient, ImdsError
from rebalancer.clock import Clock
from rebalancer.config import AgentSettings
from rebalancer.http import Health
from rebalancer.kube.errors import Invalid, KubeError
from rebalancer.kube.nodes import NodeApi, NodeView
from rebalancer.metrics import AgentMetrics, event_type_label
from rebalancer.node_signal import (
    CONDITION_TYPE,
    EVENTS_ANNOTATION,
    PUBLISHED,
    ConditionValue,
    NodeEvents,
    condition_for,
    drained_event_ids,
    fit_annotation,
    parse_condition,
    stamped,
)
from rebalancer.process import sleep_or_stop

INIT_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class Published:
    """What was last written, without its `Published` stamp (so equal content compares equal)."""

    annotation: str
    condition: ConditionValue
    transition_time: str


class Agent:
    def __init__(
        self,
        *,
        settings: AgentSettings,
        imds: ImdsClient,
        nodes: NodeApi,
        metrics: AgentMetrics,
        clock: Clock,
        log: Any,
    ) -> None:
        self._settings = settings
        self._imds = imds
        self._nodes = nodes
        self._metrics = metrics
        self._clock = clock
        self._log = log.bind(node=settings.node_name)
        self.vm_name: str | None = None
        self.tracker: EventTracker | None = None
        self._published: Published | None = None
        self._published_at: float | None = None
        self._unpublished_seen: dict[str, datetime] = {}  # event ids awaiting their first write
        self._last_poll_ok: float | None = None
        self._heartbeat = clock.monotonic()
        self._imds_error: str | None = None
        self._kube_error: str | None = None
        self._consecutive_imds_errors = 0
        self._warned_multi_vm: set[str] = set()
        self._reported_skips: frozenset[str] = frozenset()  # skipped entries of the last document
        self._reported_oddities: dict[str, tuple[str, ...]] = {}  # by upper-case EventId
        self._reported_omitted = 0
        self._refused_for: ConditionValue | None = None  # the condition last said with a refusal
        self._last_stamp: datetime | None = None

    # ---- health --------------------------------------------------------------------------------

    def liveness(self) -> Health:
        allowed = 30.0 + 5 * self._settings.poll_interval_seconds
        if not self._imds.first_call_done:
            allowed += self._settings.imds_first_call_timeout_seconds
        silent = self._clock.monotonic() - self._heartbeat
        if silent > allowed:
            return Health(False, f"loop silent for {silent:.0f}s")
        return Health(True)

    def readiness(self) -> Health:
        if self.vm_name is None:
            return Health(False, self._kube_error or "starting: VM name not known yet")
        if self._last_poll_ok is None:
            if self._imds_error:
                return Health(False, f"IMDS: {self._imds_error}")
            return Health(False, "waiting for the first IMDS answer (may take up to 2 minutes)")
        stale = self._clock.monotonic() - self._last_poll_ok
        if stale > max(10.0, 5 * self._settings.poll_interval_seconds):
            return Health(False, f"no IMDS answer for {stale:.0f}s: {self._imds_error}")
        if self._kube_error:
            return Health(False, f"cannot write the Node: {self._kube_error}")
        return Health(True)

    # ---- loop ----------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and not await self._initialize():
            await sleep_or_stop(stop, INIT_RETRY_SECONDS)
        interval = self._settings.poll_interval_seconds
        while not stop.is_set():
            started = self._clock.monotonic()
            await self.tick()
            await sleep_or_stop(stop, interval - (self._clock.monotonic() - started))

    async def _initialize(self) -> bool:
        """Read our Node once: the VM name, and what an earlier run already published."""
        self._heartbeat = self._clock.monotonic()
        try:
            node = await self._nodes.get(self._settings.node_name)
        except KubeError as error:
            self._note_kube_error("read_node", error)
            return False
        vm_name = self._settings.vm_name or vm_name_from_provider_id(node.provider_id)
        if not vm_name:
            try:
                vm_name = await self._imds.vm_name()
            except ImdsError as error:
                self._metrics.errors.labels("vm_name").inc()
                self._log.warning("vm name unknown", reason=str(error), kind=error.kind)
                return False
        self.vm_name = vm_name
        self.tracker = EventTracker(vm_name=vm_name)
        self._restore(node)
        self._log = self._log.bind(vm=vm_name)
        self._log.info("agent started", pending=len(self.tracker.pending))
        return True

    def _restore(self, node: NodeView) -> None:
        assert self.tracker is not None
        raw = node.annotations.get(EVENTS_ANNOTATION)
        condition = node.conditions.get(CONDITION_TYPE)
        if raw is None:
            return
        try:
            stored = NodeEvents.from_json(raw)
        except ValueError as error:
            self._metrics.skipped.labels("malformed_annotation").inc()
            self._log.warning("ignoring malformed annotation of an earlier run", reason=str(error))
            return
        if stored.vm_name and stored.vm_name.lower() != self.tracker.vm_name.lower():
            self._log.warning("annotation names another VM; not restored", other=stored.vm_name)
            return
        previous = replace(stored, published_at=None)
        self.tracker.restore(previous)
        # Never stamp older than an earlier run did (a clock stepped back would make the newer
        # write look the older).
        self._last_stamp = max(
            (at for at in (stored.published_at, _stamp_of(condition)) if at is not None),
            default=None,
        )
        if condition is not None:
            message = " ".join(
                word
                for word in str(condition.get("message", "")).split()
                if not word.startswith(f"{PUBLISHED}=")
            )
            self._published = Published(
                annotation=previous.to_json(),
                condition=ConditionValue(
                    str(condition.get("status", "")), condition.get("reason", ""), message
                ),
                transition_time=str(condition.get("lastTransitionTime", "")),
            )

    async def tick(self) -> None:
        assert self.tracker is not None
        self._heartbeat = self._clock.monotonic()
        now = self._clock.now()
        observation = await self._poll(now)
        if observation is not None:
            self._record(observation, now)
        await self._publish(now)
        if await self._acknowledge():
            # On the Node at once, not at the next tick: Azure starts an acknowledged event at
            # once, and a Reboot or Redeploy takes this VM down with us. The agent that starts
            # with the VM again must read that the event ran, not that it was called off.
            await self._publish(self._clock.now())

    async def _poll(self, now: datetime) -> Observation | None:
        assert self.tracker is not None
        started = self._clock.monotonic()
        try:
            fetch = await self._imds.get_scheduled_events()
        except ImdsError as error:
            self._metrics.polls.labels(error.kind).inc()
            self._metrics.errors.labels("imds").inc()
            self._consecutive_imds_errors += 1
            if self._imds_error is None or self._consecutive_imds_errors % 60 == 0:
                self._log.warning(
                    "imds poll failed",
                    kind=error.kind,
                    reason=str(error),
                    consecutive=self._consecutive_imds_errors,
                )
            self._imds_error = f"{error.kind}: {error}"
            return None
        finally:
            self._metrics.poll_duration.observe(self._clock.monotonic() - started)
        if self._imds_error is not None:
            self._log.info("imds answers again", after_errors=self._consecutive_imds_errors)
        self._imds_error = None
        self._consecutive_imds_errors = 0
        self._last_poll_ok = self._clock.monotonic()
        self._metrics.polls.labels("ok").inc()
        self._metrics.last_success.set(now.timestamp())
        skipped = frozenset(fetch.document.skipped)
        for reason in sorted(skipped - self._reported_skips):
            self._metrics.skipped.labels("malformed_event").inc()
            self._log.warning("skipped a malformed event", reason=reason)
        self._reported_skips = skipped
        # Read every document, even at an incarnation already seen: the same incarnation with
        # other content must not hide a change.
        return self.tracker.observe(fetch.document, now)

    def _record(self, observation: Observation, now: datetime) -> None:
        assert self.tracker is not None
        for unknown in set(observation.unknown_types):
            self._metrics.skipped.labels("unknown_event_type").inc()
            self._log.warning("event type not known; published as is", event_type=unknown)
        for event in observation.new:
            label = event_type_label(event.event_type)
            self._metrics.events_seen.labels(label).inc()
            if event.not_before is not None:
                lead = (event.not_before - now).total_seconds()
                self._metrics.lead_time.labels(label).observe(max(0.0, lead))
            self._unpublished_seen[event.event_id] = now
            self._log.info(
                "event seen",
                event_id=event.event_id,
                event_type=event.event_type,
                status=event.status,
                not_before=event.not_before_raw or None,
                deadline_unreadable=bool(event.not_before_raw) and event.not_before is None,
            )
        for event in observation.changed:
            self._log.info(
                "event changed",
                event_id=event.event_id,
                event_type=event.event_type,
                status=event.status,
            )
        for event in (*observation.new, *observation.changed):
            key = event.event_id.upper()
            if event.oddities and self._reported_oddities.get(key) != event.oddities:
                self._metrics.skipped.labels("odd_field").inc()
                self._log.warning(
                    "event read with odd fields; acting on it, never acknowledging it",
                    event_id=event.event_id,
                    event_type=event.event_type,
                    oddities=list(event.oddities),
                    act_now=event.act_now,
                )
            self._reported_oddities[key] = event.oddities
        for ended in observation.ended:
            self._reported_oddities.pop(ended.event_id.upper(), None)
            self._metrics.events_ended.labels(
                event_type_label(ended.event_type), str(ended.outcome)
            ).inc()
            self._unpublished_seen.pop(ended.event_id, None)
            self._log.info(
                "event gone",
                event_id=ended.event_id,
                event_type=ended.event_type,
                outcome=str(ended.outcome),
            )
        self._metrics.events_pending.set(len(self.tracker.pending))

    async def _publish(self, now: datetime) -> None:
        assert self.tracker is not None
        state = self.tracker.snapshot()
        fitted = fit_annotation(state)
        annotation = fitted.to_json()
        condition = condition_for(state)  # from every pending event, not only those that fit
        if fitted.omitted != self._reported_omitted:
            if fitted.omitted:
                self._log.warning(
                    "annotation full; least urgent events left out",
                    pending=len(state.events),
                    omitted=fitted.omitted,
                )
            self._reported_omitted = fitted.omitted
        resync_due = (
            self._published_at is None
            or self._clock.monotonic() - self._published_at >= self._settings.node_resync_seconds
        )
        previous = self._published
        if (
            previous is not None
            and previous.annotation == annotation
            and previous.condition == condition
            and not resync_due
        ):
            return
        stamp = _kube_time(now)
        transition = (
            previous.transition_time
            if previous is not None
            and previous.condition.status == condition.status
            and previous.transition_time
            else stamp
        )
        now = self._next_stamp(now)
        annotation_written = True
        # Whenever the condition is written, so is the annotation: equal stamps say the two agree
        # (a condition stamped alone would hide the annotation's other events from readers).
        if (
            previous is None
            or previous.annotation != annotation
            or previous.condition != condition
            or resync_due
        ):
            try:
                await self._nodes.set_annotations(
                    self._settings.node_name,
                    {EVENTS_ANNOTATION: replace(fitted, published_at=now).to_json()},
                )
            except KubeError as error:
                # Go on: the condition alone still tells the controller what is coming, and its
                # newer stamp makes the controller read it rather than the stale annotation.
                annotation_written = False
                self._note_annotation_failed(error, condition)
                if previous is not None and previous.condition == condition and not resync_due:
                    return  # the condition already says it; try the annotation next tick
        try:
            await self._nodes.set_condition(
                self._settings.node_name,
                {
                    "type": CONDITION_TYPE,
                    "status": condition.status,
                    "reason": str(condition.reason),
                    "message": stamped(condition, now).message,
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": transition,
                },
            )
        except KubeError as error:
            self._metrics.node_writes.labels("error").inc()
            self._note_kube_error("write_node", error)
            return
        if not annotation_written:
            # Remember the condition only, so the annotation is tried again next tick.
            self._published = Published(
                previous.annotation if previous else "", condition, transition
            )
            self._published_at = self._clock.monotonic()
            self._note_published_condition(previous, condition)
            return
        self._metrics.node_writes.labels("ok").inc()
        self._refused_for = None
        if self._kube_error is not None:
            self._log.info("node writes work again")
        self._kube_error = None
        self._published = Published(annotation, condition, transition)
        self._published_at = self._clock.monotonic()
        written = self._clock.now()
        for event_id, seen in list(self._unpublished_seen.items()):
            self._metrics.publish_latency.observe((written - seen).total_seconds())
            del self._unpublished_seen[event_id]
        self._note_published_condition(previous, condition)

    def _next_stamp(self, now: datetime) -> datetime:
        """`now`, or a millisecond after the last stamp: two publishes never share one, so the
        later write is always the newer (a virtual clock may not move between them)."""
        if self._last_stamp is not None and now <= self._last_stamp:
            now = self._last_stamp + timedelta(milliseconds=1)
        self._last_stamp = now
        return now

    def _note_annotation_failed(self, error: KubeError, condition: ConditionValue) -> None:
        if isinstance(error, Invalid):
            # Refused for good while the Node stays as full: say so once per condition, count
            # every refusal.
            self._metrics.node_writes.labels("annotation_refused").inc()
            if self._refused_for != condition:
                self._log.warning(
                    "annotation refused; the condition carries the notice",
                    reason=str(error)[:200],
                    condition_message=condition.message,
                )
            self._refused_for = condition
        else:
            self._metrics.node_writes.labels("error").inc()
        self._note_kube_error("write_annotation", error)

    def _note_published_condition(
        self, previous: Published | None, condition: ConditionValue
    ) -> None:
        if previous is None or previous.condition != condition:
            self._log.info(
                "node condition written",
                status=condition.status,
                reason=str(condition.reason),
                message=condition.message,
            )

    async def _acknowledge(self) -> bool:
        """Acknowledge the drained events the settings allow; True if any was."""
        assert self.tracker is not None and self.vm_name is not None
        if not self._settings.ack_enabled:
            return False
        candidates = [
            event
            for event in self.tracker.pending.values()
            if event.acknowledged_at is None
            and event.status == "Scheduled"
            and event.event_type in self._settings.ack_event_types
        ]
        single = []
        for event in candidates:
            if event.oddities:
                continue  # read with oddities: whom it releases is not certain (logged once)
            if [r.lower() for r in event.resources] == [self.vm_name.lower()]:
                single.append(event)
            elif event.event_id not in self._warned_multi_vm:
                self._warned_multi_vm.add(event.event_id)
                self._log.info(
                    "not acknowledging: the event names other VMs too",
                    event_id=event.event_id,
                    resources=list(event.resources),
                )
        if not single:
            return False
        try:
            node = await self._nodes.get(self._settings.node_name)
        except KubeError as error:
            self._note_kube_error("read_node", error)
            return False
        drained = drained_event_ids(node.annotations)
        ready = [event for event in single if event.event_id.upper() in drained]
        if not ready:
            return False
        try:
            await self._imds.acknowledge([event.event_id for event in ready])
        except ImdsError as error:
            for event in ready:
                self._metrics.acknowledgements.labels(
                    event_type_label(event.event_type), "error"
                ).inc()
            self._metrics.errors.labels("ack").inc()
            self._log.warning("acknowledgement failed", reason=str(error), kind=error.kind)
            return False
        now = self._clock.now()
        for event in ready:
            self.tracker.mark_acknowledged(event.event_id, now)
            self._metrics.acknowledgements.labels(event_type_label(event.event_type), "ok").inc()
            self._log.info(
                "event acknowledged to azure", event_id=event.event_id, event_type=event.event_type
            )
        return True

    def _note_kube_error(self, action: str, error: KubeError) -> None:
        self._metrics.errors.labels("kube_api").inc()
        message = f"{action}: {error}"
        if message != self._kube_error:
            self._log.warning(
                "kubernetes api error", action=action, kind=error.kind, reason=str(error)
            )
        self._kube_error = message


def _stamp_of(condition: dict[str, Any] | None) -> datetime | None:
    if condition is None:
        return None
    try:
        return parse_condition(condition).published_at
    except ValueError:
        return None


def _kube_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

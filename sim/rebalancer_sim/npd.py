"""AKS's node-problem-detector, as far as Scheduled Events go: Node conditions per VM event.

On AKS the managed node-problem-detector (a CustomPluginMonitor polling IMDS) turns a VM's
Scheduled Events into Node conditions (shared reference E): `VMEventScheduled` for any event and
one per event type (`FreezeScheduled`, `RebootScheduled`, `RedeployScheduled`,
`TerminateScheduled`, `PreemptScheduled` in the AKS docs' table). karpenter-provider-azure
reads `PreemptionScheduled` (reason `SpotEvictionIncoming`) with the message
`Preempt Scheduled: <NotBefore, RFC 1123 GMT>. For more information, see <link>. EventId: <id>`.
Public sources disagree on that one name, so both are set by default (`CONDITION_TYPES`);
a scenario may choose. Conditions go back to `False` when the event is gone, as NPD does.

It polls every `poll_seconds` (NPD's plugin interval) and only for events that name the VM
itself (not broadcasts to its placement group). Off unless a scenario sets
`nodeProblemDetectorSeconds`, so a test chooses which signal source the controller sees.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rebalancer.azure.scheduled_events import format_not_before
from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.imds import EmulatedEvent
from rebalancer_sim.objects import Obj, get_condition, with_condition
from rebalancer_sim.store import format_time

DOCS_LINK = "https://aka.ms/aks/scheduledevents"
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Terminate", "Preempt")
# The conditions set by default; see the module docstring about `PreemptionScheduled`.
CONDITION_TYPES = (
    "VMEventScheduled",
    *(f"{event_type}Scheduled" for event_type in EVENT_TYPES),
    "PreemptionScheduled",
)


def _message(event: EmulatedEvent, now: datetime) -> str:
    """`<EventType> <EventStatus>[: <NotBefore>]. ...`: the time only while Scheduled."""
    if event.state(now) == "started":
        head = f"{event.event_type} Started"
    else:
        head = f"{event.event_type} Scheduled: {format_not_before(event.not_before)}"
    return f"{head}. For more information, see {DOCS_LINK}. EventId: {event.event_id}"


def _wanted(
    condition_type: str, events: list[EmulatedEvent], now: datetime
) -> tuple[str, str, str]:
    """(status, reason, message) of one condition given the VM's active events."""
    if condition_type == "VMEventScheduled":
        relevant = events
    elif condition_type == "PreemptionScheduled":
        relevant = [e for e in events if e.event_type == "Preempt"]
    else:
        relevant = [e for e in events if f"{e.event_type}Scheduled" == condition_type]
    if not relevant:
        return (
            "False",
            f"No{condition_type}",
            f"VM has no {condition_type.removesuffix('Scheduled')} scheduled event",
        )
    first = relevant[0]
    reason = "SpotEvictionIncoming" if condition_type == "PreemptionScheduled" else condition_type
    return "True", reason, _message(first, now)


class NodeProblemDetector:
    def __init__(
        self,
        cloud: Cloud,
        *,
        poll_seconds: float = 10.0,
        condition_types: Iterable[str] = CONDITION_TYPES,
    ) -> None:
        self.cloud = cloud
        self.store = cloud.store
        self.poll_seconds = poll_seconds
        self.condition_types = tuple(condition_types)
        self._next_poll = 0.0
        self._flagged: set[str] = set()  # nodes with a condition currently True

    def reconcile(self) -> int:
        now = self.store.clock.now()
        if now.timestamp() < self._next_poll:
            return 0
        self._next_poll = now.timestamp() + self.poll_seconds
        by_vm: dict[str, list[EmulatedEvent]] = {}
        for event in self.cloud.imds.events.values():
            if event.state(now) in ("scheduled", "started"):
                for vm_name in event.resources:
                    by_vm.setdefault(vm_name, []).append(event)
        touched = set(self._flagged)
        for node_name, candidate in self.cloud.vms.items():
            if candidate.state == "running" and candidate.name in by_vm:
                touched.add(node_name)
        written = 0
        for node_name in touched:
            vm = self.cloud.vms.get(node_name)
            node = self.store.get(R.NODES, "", node_name)
            if node is None or vm is None or vm.state != "running":
                self._flagged.discard(node_name)
                continue  # a VM that is gone runs no detector
            events = sorted(by_vm.get(vm.name, []), key=lambda e: e.not_before)
            written += self._sync(node, events, now)
            if events:
                self._flagged.add(node_name)
            else:
                self._flagged.discard(node_name)
        return written

    def _sync(self, node: Obj, events: list[EmulatedEvent], moment: datetime) -> int:
        now = format_time(moment)
        status = dict(node.get("status") or {})
        conditions = status.get("conditions")
        for condition_type in self.condition_types:
            wanted, reason, message = _wanted(condition_type, events, moment)
            current = get_condition(node, condition_type)
            if current is None and wanted == "False" and not events:
                continue
            conditions = with_condition(
                conditions,
                condition_type,
                wanted,
                now=now,
                reason=reason,
                message=message,
                heartbeat=True,
            )
        if conditions == (node.get("status") or {}).get("conditions"):
            return 0
        status["conditions"] = conditions
        updated = dict(node)
        updated["status"] = status
        self.store.update(R.NODES, updated)
        return 1

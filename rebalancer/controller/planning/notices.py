"""Which notices the planner acts on, and the clock of each: its deadline, the grace that fits."""

from __future__ import annotations

from datetime import UTC, datetime

from rebalancer.controller.contain import Containment, on_node
from rebalancer.controller.model import NodeInfo, PodInfo
from rebalancer.controller.planning.selection import labels_match
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.notices import Notice
from rebalancer.timefmt import parse_iso
from rebalancer.vocabulary import NoticePolicy, Source


def active_notices(
    snapshot: Snapshot, settings: Settings, contain: Containment | None = None
) -> dict[str, Notice]:
    """The most urgent notice that calls for action on each node."""
    contain = contain or Containment()
    active = {}
    for node in snapshot.nodes.values():
        acting = contain.run("notice", on_node(node.name), [], _acting, node, settings)
        if acting:
            active[node.name] = acting[0]  # notices come sorted most urgent first
    return active


def _acting(node: NodeInfo, settings: Settings) -> list[Notice]:
    return [
        n
        for n in node.notices
        if settings.policy_for(n.event_type) != NoticePolicy.NONE and _trusted(n, node, settings)
    ]


def _trusted(notice: Notice, node: NodeInfo, settings: Settings) -> bool:
    """An agent notice counts only on a node that runs our agent: on any other node it was
    written by someone else (a compromised agent elsewhere is stopped by the chart's admission
    policy; this stops the rest)."""
    return notice.source != Source.AGENT or labels_match(node.labels, settings.agent_nodes)


def ignored_notices(snapshot: Snapshot, settings: Settings) -> tuple[tuple[str, str], ...]:
    return tuple(
        (node.name, f"agent notice {n.event_id} on a node that runs no agent of ours")
        for node in snapshot.nodes.values()
        for n in node.notices
        if not _trusted(n, node, settings)
    )


def deadline_near(notice: Notice, now: datetime, settings: Settings) -> bool:
    return notice.act_now or notice.seconds_left(now) <= settings.deadline_margin_seconds


def grace_for(pod: PodInfo, notice: Notice, now: datetime, settings: Settings) -> int:
    """The grace period that still fits before the deadline (never more than the pod's own)."""
    if notice.act_now or notice.seconds_left(now) <= 0:
        return min(pod.grace_seconds, settings.act_now_grace_seconds)
    return max(0, min(pod.grace_seconds, int(notice.seconds_left(now)) - 1))


def deadline_key(notice: Notice) -> datetime:
    if notice.act_now or notice.deadline is None:
        return datetime.min.replace(tzinfo=UTC)
    return notice.deadline


def min_deadline(first: str | None, second: str | None) -> str | None:
    """The earlier of two recorded deadlines; None (act now) is the earliest of all."""
    if first is None or second is None:
        return None
    return min(first, second, key=lambda text: parse_iso(text) or datetime.min.replace(tzinfo=UTC))

"""Every notification the controller sends to a chat or webhook, and its payload per target.

The texts of the four things a platform team wants to hear about (a notice acted on, a blocked
fail-over, a missed deadline, a move off a risky spot group), in one place as the Events are in
`catalogue.py`; and how each becomes the JSON that Slack, Microsoft Teams or a generic receiver
takes. Pure: `notifier.py` queues, limits and sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from rebalancer.timefmt import iso


class Kind(StrEnum):
    """What a notification is about; the `kind` of the generic payload and of the
    REBALANCER_NOTIFY_ON setting."""

    NOTICE = "notice"
    FAILOVER_BLOCKED = "failover_blocked"
    DEADLINE_MISSED = "deadline_missed"
    RISK_MOVE = "risk_move"


class Target(StrEnum):
    SLACK = "slack"
    TEAMS = "teams"
    GENERIC = "generic"


@dataclass(frozen=True)
class Notification:
    kind: Kind
    # What makes two notifications the same one (the notifier sends each key once): the kind,
    # the node or workload, and the event or cause.
    key: tuple[str, ...]
    title: str
    text: str
    warning: bool = False
    facts: Mapping[str, str] = field(default_factory=dict)


def notice_acted_on(*, node: str, pool: str, event_type: str, event_id: str) -> Notification:
    return Notification(
        Kind.NOTICE,
        (Kind.NOTICE, node, event_id),
        f"{event_type} notice on {node}: acting",
        f"Azure scheduled {event_type} for node {node}"
        + (f" (pool {pool})" if pool else "")
        + ". It is cordoned; its GPU workloads are replaced on other nodes before it is drained.",
        facts={"node": node, "pool": pool, "event type": event_type, "event id": event_id},
    )


def failover_blocked(*, workload: str, detail: str, reason: str) -> Notification:
    return Notification(
        Kind.FAILOVER_BLOCKED,
        (Kind.FAILOVER_BLOCKED, workload, detail),
        f"Fail-over blocked for {workload}",
        f"Replicas of {workload} on a node that is going away have nowhere to go: {detail}",
        warning=True,
        facts={"workload": workload, "reason": reason},
    )


def deadline_missed(*, node: str, pool: str, event_id: str, why: str) -> Notification:
    return Notification(
        Kind.DEADLINE_MISSED,
        (Kind.DEADLINE_MISSED, node, event_id),
        f"Deadline missed on {node}",
        f"Node {node} went away before it was drained ({why.replace('_', ' ')}): its pods "
        "were stopped by the eviction, not moved.",
        warning=True,
        facts={"node": node, "pool": pool, "event id": event_id, "why": why},
    )


def risk_move(*, workload: str, retire: str, why: str) -> Notification:
    return Notification(
        Kind.RISK_MOVE,
        (Kind.RISK_MOVE, workload, retire),
        f"Moving a replica of {workload} off a risky spot group",
        f"{retire} is replaced before any notice: {why}. The new pod is placed by the "
        "workload's policy; the old one goes once it is Ready.",
        facts={"workload": workload, "replica": retire},
    )


def payload(
    target: Target,
    notification: Notification,
    *,
    cluster: str,
    at: datetime,
    dropped: int = 0,
) -> dict[str, Any]:
    """The JSON body for `target`. `dropped`: notifications the rate limit dropped since the
    last one sent, said in this one."""
    text = notification.text
    if dropped:
        text += f" ({dropped} earlier notification(s) dropped by the rate limit.)"
    facts = {k: v for k, v in notification.facts.items() if v}
    where = f"cluster {cluster}" if cluster else "spot-rebalancer"
    match target:
        case Target.SLACK:
            icon = ":warning:" if notification.warning else ":information_source:"
            lines = [f"{icon} *{notification.title}*", text]
            lines += [f"*{name}:* {value}" for name, value in facts.items()]
            return {
                "text": f"{notification.title}: {text}",  # the fallback of notifications
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
                    {
                        "type": "context",
                        "elements": [
                            {"type": "mrkdwn", "text": f"spot-rebalancer, {where}, {iso(at)}"}
                        ],
                    },
                ],
            }
        case Target.TEAMS:
            card: dict[str, Any] = {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {
                        "type": "TextBlock",
                        "text": notification.title,
                        "weight": "Bolder",
                        "size": "Medium",
                        "color": "Warning" if notification.warning else "Default",
                        "wrap": True,
                    },
                    {"type": "TextBlock", "text": text, "wrap": True},
                    {
                        "type": "FactSet",
                        "facts": [{"title": k, "value": v} for k, v in facts.items()],
                    },
                    {
                        "type": "TextBlock",
                        "text": f"spot-rebalancer, {where}, {iso(at)}",
                        "isSubtle": True,
                        "size": "Small",
                        "wrap": True,
                    },
                ],
            }
            return {
                "type": "message",
                "attachments": [
                    {
                        "contentType": "application/vnd.microsoft.card.adaptive",
                        "contentUrl": None,
                        "content": card,
                    }
                ],
            }
        case Target.GENERIC:
            return {
                "source": "spot-rebalancer",
                "kind": str(notification.kind),
                "severity": "warning" if notification.warning else "info",
                "cluster": cluster,
                "time": iso(at),
                "title": notification.title,
                "text": text,
                "facts": facts,
                "dropped": dropped,
            }

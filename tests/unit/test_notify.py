"""Notifications: the payload of each target, and the notifier's promises to the controller
(never blocks; each one once; a rate limit that drops and counts; retries 429 and 5xx only; the
URL never in a log line). Sending is real HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from rebalancer.clock import ManualClock, SystemClock
from rebalancer.controller.messages import (
    Kind,
    Target,
    deadline_missed,
    failover_blocked,
    notice_acted_on,
    payload,
    risk_move,
)
from rebalancer.controller.notifier import Notifier
from rebalancer.controller.settings import NOTIFY_KINDS, ControllerSettings
from rebalancer.metrics import ControllerMetrics
from rebalancer.retry import Backoff, RetryPolicy
from tests.helpers import free_port, serve, wait_for
from tests.receiver import SECRET_PATH, Receiver

AT = datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
NOTICE = notice_acted_on(node="aks-gpuspot-1", pool="gpuspot", event_type="Preempt", event_id="E1")
QUICK = RetryPolicy(attempts=3, max_wait_seconds=0.01, backoff=Backoff(0.001, max_seconds=0.01))


def count(metrics: ControllerMetrics, target: str, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "rebalancer_notifications_total", {"target": target, "outcome": outcome}
    )
    assert value is not None, (target, outcome)
    return value


# ---- payloads --------------------------------------------------------------------------------------


def test_the_kinds_are_the_settings_words() -> None:
    assert tuple(str(kind) for kind in Kind) == NOTIFY_KINDS


def test_slack_payload() -> None:
    body = payload(Target.SLACK, NOTICE, cluster="prod-eu", at=AT)
    assert body["text"].startswith("Preempt notice on aks-gpuspot-1: acting: Azure scheduled")
    section, context = body["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    text = section["text"]["text"]
    assert text.startswith(":information_source: *Preempt notice on aks-gpuspot-1: acting*\n")
    assert "*pool:* gpuspot" in text and "*event id:* E1" in text
    assert (
        context["elements"][0]["text"] == "spot-rebalancer, cluster prod-eu, 2026-12-01T16:00:00Z"
    )
    json.dumps(body)  # plain JSON


def test_teams_payload_is_an_adaptive_card() -> None:
    blocked = failover_blocked(
        workload="Deployment/inference/llm", detail="no on-demand pool fits", reason="NoPool"
    )
    body = payload(Target.TEAMS, blocked, cluster="", at=AT)
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    title, text, facts, footer = card["body"]
    assert title["text"] == "Fail-over blocked for Deployment/inference/llm"
    assert title["color"] == "Warning"
    assert "no on-demand pool fits" in text["text"]
    assert {"title": "workload", "value": "Deployment/inference/llm"} in facts["facts"]
    assert footer["text"] == "spot-rebalancer, spot-rebalancer, 2026-12-01T16:00:00Z"


def test_generic_payload_and_the_rate_limit_summary() -> None:
    missed = deadline_missed(node="aks-gpuspot-2", pool="", event_id="E2", why="eviction_blocked")
    body = payload(Target.GENERIC, missed, cluster="c1", at=AT, dropped=3)
    assert body == {
        "source": "spot-rebalancer",
        "kind": "deadline_missed",
        "severity": "warning",
        "cluster": "c1",
        "time": "2026-12-01T16:00:00Z",
        "title": "Deadline missed on aks-gpuspot-2",
        "text": "Node aks-gpuspot-2 went away before it was drained (eviction blocked): its pods "
        "were stopped by the eviction, not moved. (3 earlier notification(s) dropped by the rate "
        "limit.)",
        "facts": {"node": "aks-gpuspot-2", "event id": "E2", "why": "eviction_blocked"},  # no pool
        "dropped": 3,
    }
    moved = payload(
        Target.GENERIC,
        risk_move(workload="Deployment/ml/llm", retire="ml/llm-1", why="pool a is high"),
        cluster="", at=AT,
    )  # fmt: skip
    assert moved["kind"] == "risk_move" and moved["severity"] == "info"
    assert "ml/llm-1 is replaced before any notice: pool a is high" in moved["text"]


# ---- the controller's side: offer -------------------------------------------------------------------


def notifier(clock: Any = None, **options: Any) -> tuple[Notifier, ControllerMetrics]:
    metrics = ControllerMetrics()
    built = Notifier(
        url=options.pop("url", "http://127.0.0.1:9/hook"), target=Target.GENERIC,
        metrics=metrics, clock=clock or ManualClock(), log=options.pop("log", None) or _Quiet(),
        policy=options.pop("policy", QUICK), **options,
    )  # fmt: skip
    return built, metrics


class _Quiet:
    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: None


def queued(built: Notifier) -> list[tuple[Any, ...]]:
    items = []
    while not built._queue.empty():
        items.append(built._queue.get_nowait())
    return items


def test_each_notification_is_offered_once() -> None:
    built, _ = notifier()
    built.offer(NOTICE)
    built.offer(NOTICE)
    built.offer(
        notice_acted_on(node="aks-gpuspot-1", pool="x", event_type="Preempt", event_id="E1")
    )
    built.offer(notice_acted_on(node="aks-gpuspot-1", pool="", event_type="Preempt", event_id="E9"))
    assert [item[0].key[2] for item in queued(built)] == ["E1", "E9"]


def test_the_rate_limit_drops_counts_and_tells_the_next_one() -> None:
    clock = ManualClock()
    built, metrics = notifier(clock, per_minute=2)
    for n in range(5):
        built.offer(notice_acted_on(node=f"n{n}", pool="", event_type="Preempt", event_id="E"))
        clock.advance(1)
    assert [item[0].key[1] for item in queued(built)] == ["n0", "n1"]
    assert count(metrics, "generic", "rate_limited") == 3
    clock.advance(55)  # at 60 s: n0's minute is over, n1's (61 s) not yet
    built.offer(notice_acted_on(node="n5", pool="", event_type="Preempt", event_id="E"))
    built.offer(notice_acted_on(node="n6", pool="", event_type="Preempt", event_id="E"))
    (late,) = queued(built)
    assert late[0].key[1] == "n5" and late[2] == 3  # said in the payload (`dropped`)
    assert count(metrics, "generic", "rate_limited") == 4


def test_a_full_queue_drops_and_counts_and_never_blocks() -> None:
    built, metrics = notifier(queue_size=1)
    built.offer(NOTICE)
    built.offer(failover_blocked(workload="w", detail="d", reason="r"))
    assert len(queued(built)) == 1
    assert count(metrics, "generic", "queue_full") == 1


def test_kinds_left_out_and_a_replica_that_does_not_lead_send_nothing() -> None:
    built, _ = notifier(kinds=[Kind.FAILOVER_BLOCKED])
    built.offer(NOTICE)
    assert queued(built) == []
    leading = False
    follower, _ = notifier(may_send=lambda: leading)
    follower.offer(NOTICE)
    assert queued(follower) == []
    leading = True
    follower.offer(NOTICE)  # not remembered while it did not lead
    assert len(queued(follower)) == 1


# ---- sending: real HTTP on 127.0.0.1 ------------------------------------------------------------------


@asynccontextmanager
async def sending(receiver: Receiver, **options: Any) -> AsyncIterator[tuple[Notifier, Any]]:
    async with serve(receiver.app()) as base:
        built, metrics = notifier(SystemClock(), url=base + SECRET_PATH, **options)
        stop = asyncio.Event()
        task = asyncio.create_task(built.run(stop))
        try:
            yield built, metrics
        finally:
            stop.set()
            await task


async def test_sent_as_json_to_the_url() -> None:
    receiver = Receiver()
    async with sending(receiver) as (built, metrics):
        built.offer(NOTICE)
        (body,) = await receiver.wait_for(list, timeout=5, what="a notification")
    assert body["kind"] == "notice" and body["facts"]["node"] == "aks-gpuspot-1"
    assert count(metrics, "generic", "sent") == 1


@pytest.mark.parametrize(
    ("answers", "retry_after", "requests", "outcome"),
    [
        ([503], None, 2, "sent"),
        ([429], "0", 2, "sent"),
        ([500, 502, 503], None, 3, "failed"),  # three tries in all
        ([400], None, 1, "failed"),  # not retried
        ([404], None, 1, "failed"),
    ],
)
async def test_retries_429_and_5xx_only(
    answers: list[int], retry_after: str | None, requests: int, outcome: str
) -> None:
    receiver = Receiver(answers=list(answers), retry_after=retry_after)
    with capture_logs() as logs:
        async with sending(receiver, log=_Captured()) as (built, metrics):
            built.offer(NOTICE)
            built.offer(failover_blocked(workload="w", detail="d", reason="r"))  # the next one
            await receiver.wait_for(
                lambda bodies: any(b["kind"] == "failover_blocked" for b in bodies),
                timeout=5,
                what="the second notification",
            )
    assert receiver.requests == requests + 1
    assert count(metrics, "generic", outcome) == (2 if outcome == "sent" else 1)
    assert not any(SECRET_PATH in json.dumps(entry, default=str) for entry in logs)


async def test_an_unreachable_receiver_fails_once_and_says_no_url() -> None:
    url = f"http://127.0.0.1:{free_port()}{SECRET_PATH}"
    built, metrics = notifier(SystemClock(), url=url, log=_Captured())
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(built.run(stop))
        built.offer(NOTICE)
        await wait_for(lambda: count(metrics, "generic", "failed") >= 1, what="the failure")
        stop.set()
        await task
    failed = [entry for entry in logs if entry["event"] == "notification failed"]
    assert failed and failed[0]["error"] == "ClientConnectorError"
    assert not [entry for entry in logs if entry["event"] == "retrying a write"]
    assert not any("s3cr3t" in json.dumps(entry, default=str) for entry in logs)


async def test_what_is_queued_at_stop_is_still_sent() -> None:
    receiver = Receiver()
    async with serve(receiver.app()) as base:
        built, metrics = notifier(SystemClock(), url=base + SECRET_PATH)
        built.offer(NOTICE)
        stop = asyncio.Event()
        stop.set()
        await built.run(stop)
    assert len(receiver.bodies) == 1 and count(metrics, "generic", "sent") == 1


def test_the_url_is_a_secret_in_the_settings() -> None:
    settings = ControllerSettings(notify_webhook_url="https://hooks.example/services/x/y/s3cr3t")
    assert "s3cr3t" not in repr(settings) and "s3cr3t" not in str(settings.model_dump())
    with pytest.raises(ValueError) as error:
        ControllerSettings(notify_webhook_url="hooks.example/services/x/y/s3cr3t")
    assert "s3cr3t" not in str(error.value).split("input_value")[0]


class _Captured:
    """structlog's logger, so capture_logs sees the notifier's lines."""

    def __getattr__(self, name: str) -> Any:
        import structlog

        return getattr(structlog.get_logger(), name)

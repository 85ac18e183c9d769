"""The fence's rule: a write is sent only if it can be over before the renew deadline, and it is
judged when it leaves the request budget, not when it queued for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from rebalancer.clock import ManualClock
from rebalancer.kube.errors import Fenced, NotFound
from rebalancer.kube.fence import WriteFence
from rebalancer.kube.gate import RequestGate
from rebalancer.kube.leader import LeaderElector


def fence(clock: ManualClock, deadline: float | None, margin: float = 1.0) -> WriteFence:
    return WriteFence(lambda: deadline, monotonic=clock.monotonic, margin_seconds=margin)


@pytest.mark.parametrize(
    ("deadline", "timeout", "sent_with"),
    [
        (20.0, 10.0, 10.0),  # plenty of time: its own timeout
        (15.0, 10.0, 5.0),  # sent, but given up on by the deadline
        (11.0, 10.0, 1.0),  # exactly the margin left: still sent
        (10.5, 10.0, None),  # less than the margin: cannot land in time, not sent
        (9.0, 10.0, None),  # past the deadline
        (None, 10.0, None),  # holds no Lease
    ],
)
def test_a_write_is_sent_only_if_it_can_be_over_before_the_renew_deadline(
    deadline: float | None, timeout: float, sent_with: float | None
) -> None:
    clock = ManualClock()
    clock.advance(10.0)
    gate = fence(clock, deadline)
    if sent_with is None:
        with pytest.raises(Fenced):
            gate.admit(timeout)
        assert gate.refused == 1
    else:
        assert gate.admit(timeout) == pytest.approx(sent_with)
        assert gate.refused == 0


class Recorder:
    """A client that records what reached it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float | None]] = []

    async def request(
        self, method: str, path: str, *, timeout_seconds: float | None = None, **_: Any
    ) -> Any:
        self.sent.append((method, path, timeout_seconds))
        return {}

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError


class SlowBudget:
    """A request budget whose wait lasts `seconds` of the manual clock."""

    def __init__(self, clock: ManualClock, seconds: float) -> None:
        self.clock, self.seconds, self.taken = clock, seconds, 0

    async def take(self) -> None:
        self.taken += 1
        self.clock.advance(self.seconds)


def gate(clock: ManualClock, client: Recorder, wait: float, deadline: float) -> RequestGate:
    return RequestGate(
        client,
        limiter=SlowBudget(clock, wait),  # type: ignore[arg-type]
        fence=fence(clock, deadline),
        timeout_seconds=10.0,
    )


async def test_the_fence_is_asked_after_the_budgets_wait() -> None:
    """Fresh when it queued (5 s left), past the deadline when its token came: not sent."""
    clock, client = ManualClock(), Recorder()
    outbound = gate(clock, client, wait=6.0, deadline=5.0)
    with pytest.raises(Fenced):
        await outbound.request("POST", "/api/v1/namespaces/a/pods/b/eviction", body={})
    assert client.sent == []
    assert outbound.fence is not None and outbound.fence.refused == 1


async def test_a_write_leaves_with_the_time_left_as_its_timeout() -> None:
    clock, client = ManualClock(), Recorder()
    outbound = gate(clock, client, wait=2.0, deadline=6.0)
    await outbound.request("PATCH", "/api/v1/nodes/n", body={})
    assert client.sent == [("PATCH", "/api/v1/nodes/n", 4.0)]


async def test_reads_are_not_fenced_and_events_skip_the_budget_not_the_fence() -> None:
    clock, client = ManualClock(), Recorder()
    budget = SlowBudget(clock, 0.0)
    outbound = RequestGate(
        client,
        limiter=budget,  # type: ignore[arg-type]
        fence=fence(clock, None),
        timeout_seconds=10.0,
    )
    await outbound.request("GET", "/api/v1/nodes")
    with pytest.raises(Fenced):
        await outbound.request("POST", "/api/v1/namespaces/a/events", body={}, limited=False)
    assert client.sent == [("GET", "/api/v1/nodes", 10.0)]
    assert budget.taken == 1


@pytest.mark.parametrize(
    ("renew_deadline", "retry_period", "margin"),
    [(10.0, 2.0, 1.0), (3.0, 1.0, 1.0), (3.0, 2.4, 0.3)],
)
def test_the_margin_leaves_a_leader_that_renews_on_time_able_to_write(
    renew_deadline: float, retry_period: float, margin: float
) -> None:
    elector = LeaderElector(
        Recorder(),
        namespace="ns", name="lease", identity="me", clock=ManualClock(),
        lease_duration=renew_deadline + 5, renew_deadline=renew_deadline,
        retry_period=retry_period,
    )  # fmt: skip
    assert elector.fence.margin_seconds == pytest.approx(margin)
    assert elector.fence.seconds_left() == 0.0  # no Lease yet


class PausedLeaseReader:
    """A Lease API whose GET lasts `pause` seconds of the manual clock: a process stopped
    between the read and the write it prepares. `holder` None: no Lease yet (404)."""

    def __init__(self, clock: ManualClock, pause: float, holder: str | None) -> None:
        self.clock, self.pause, self.holder = clock, pause, holder
        self.writes: list[str] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method != "GET":
            self.writes.append(method)
            return body
        self.clock.advance(self.pause)
        if self.holder is None:
            raise NotFound("no lease", status=404)
        spec = {"holderIdentity": self.holder, "leaseDurationSeconds": 1}
        return {"metadata": {"name": "lease", "resourceVersion": "7"}, "spec": spec}

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError


@pytest.mark.parametrize("holder", ["me", "", None])  # renew; take a released lease; create
@pytest.mark.parametrize(("pause", "sent"), [(9.9, True), (10.0, False)])
async def test_a_lease_write_prepared_before_a_pause_of_a_renew_deadline_is_not_sent(
    holder: str | None, pause: float, sent: bool
) -> None:
    clock = ManualClock()
    api = PausedLeaseReader(clock, pause, holder)
    elector = LeaderElector(
        api, namespace="ns", name="lease", identity="me", clock=clock,
        lease_duration=15.0, renew_deadline=10.0, retry_period=2.0,
    )  # fmt: skip
    assert await elector.try_acquire_or_renew() is sent
    assert api.writes == ([("PUT" if holder is not None else "POST")] if sent else [])
    # Sent after 9.9 s, the renewal counts from its start: 0.1 s left, below the margin.
    assert elector.fence.seconds_left() == pytest.approx(0.1 if sent else 0.0)

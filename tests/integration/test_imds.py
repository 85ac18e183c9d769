"""IMDS client <-> emulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from rebalancer.azure.imds import ImdsClient, ImdsError
from rebalancer.clock import ManualClock
from rebalancer.retry import Backoff
from rebalancer_sim.imds import ImdsEmulator
from tests.helpers import serve

VM = "aks-gpu-12345678-vmss_0"
PATH = "/metadata/scheduledevents"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emulator(clock: ManualClock) -> ImdsEmulator:
    return ImdsEmulator(clock=clock)


@pytest.fixture
async def base(emulator: ImdsEmulator) -> AsyncIterator[str]:
    async with serve(emulator.app()) as url:
        yield url


def client_for(base: str, vm: str = VM, **kwargs: object) -> ImdsClient:
    options: dict[str, object] = {
        "timeout_seconds": 2.0,
        "first_call_timeout_seconds": 5.0,
        "backoff": Backoff(initial_seconds=0.05, max_seconds=0.2),
    }
    options.update(kwargs)
    return ImdsClient(base_url=f"{base}/vms/{vm}", **options)  # type: ignore[arg-type]


# ---- the emulator keeps the service's rules ------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "query", "method", "status"),
    [
        ({}, "?api-version=2020-07-01", "GET", 400),  # no Metadata header
        ({"Metadata": "false"}, "?api-version=2020-07-01", "GET", 400),
        ({"Metadata": "true"}, "", "GET", 400),  # no api-version
        ({"Metadata": "true"}, "?api-version=latest", "GET", 400),
        ({"Metadata": "true"}, "?api-version=2020-07-01&api-version=2020-07-01", "GET", 400),
        ({"Metadata": "true", "X-Forwarded-For": "1.2.3.4"}, "?api-version=2020-07-01", "GET", 400),
        ({"Metadata": "true"}, "?api-version=2020-07-01", "PUT", 405),
        ({"Metadata": "true"}, "?api-version=2020-07-01", "GET", 200),
    ],
)
async def test_header_and_query_rules(
    base: str, headers: dict[str, str], query: str, method: str, status: int
) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, f"{base}/vms/{VM}{PATH}{query}", headers=headers) as r:
            assert r.status == status
            body = await r.json()
            if status == 400 and "Metadata" not in headers:
                assert body == {"error": "Bad request. Required metadata header not specified"}


async def test_rate_limit_answers_429_past_five_per_second(base: str) -> None:
    async with aiohttp.ClientSession(headers={"Metadata": "true"}) as session:
        statuses = []
        for _ in range(8):
            async with session.get(f"{base}/vms/{VM}{PATH}?api-version=2020-07-01") as r:
                statuses.append(r.status)
    assert statuses[:5] == [200] * 5
    assert 429 in statuses[5:]


async def test_older_api_versions_omit_newer_fields(base: str, emulator: ImdsEmulator) -> None:
    emulator.schedule("Preempt", [VM])
    emulator.schedule("Terminate", [VM])
    async with aiohttp.ClientSession(headers={"Metadata": "true"}) as session:
        async with session.get(f"{base}/vms/{VM}{PATH}?api-version=2017-11-01") as r:
            events = (await r.json())["Events"]
    assert [e["EventType"] for e in events] == ["Preempt"]  # Terminate needs 2019-01-01
    assert "Description" not in events[0] and "DurationInSeconds" not in events[0]


# ---- the client against it -------------------------------------------------------------------


async def test_preempt_lifecycle(base: str, emulator: ImdsEmulator, clock: ManualClock) -> None:
    async with client_for(base) as client:
        empty = (await client.get_scheduled_events()).document
        assert empty.events == ()
        scheduled = emulator.schedule("Preempt", [VM], started_seconds=5)
        first = (await client.get_scheduled_events()).document
        (event,) = first.events
        assert first.incarnation == empty.incarnation + 1
        assert (event.event_id, event.event_type, event.status) == (
            scheduled.event_id,
            "Preempt",
            "Scheduled",
        )
        assert event.not_before is not None
        assert (event.not_before - clock.now()).total_seconds() == pytest.approx(30, abs=1)
        assert event.duration_seconds == -1 and event.event_source == "Platform"

        same = (await client.get_scheduled_events()).document
        assert same.incarnation == first.incarnation  # nothing changed, same incarnation

        clock.advance(30)
        started = (await client.get_scheduled_events()).document
        assert started.incarnation == first.incarnation + 1
        assert started.events[0].status == "Started" and started.events[0].not_before_raw == ""

        clock.advance(5)
        gone = (await client.get_scheduled_events()).document
        assert gone.events == () and gone.incarnation == started.incarnation + 1


async def test_cancellation_removes_the_event(base: str, emulator: ImdsEmulator) -> None:
    async with client_for(base) as client:
        event = emulator.schedule("Redeploy", [VM])
        assert len((await client.get_scheduled_events()).document.events) == 1
        assert emulator.cancel(event.event_id)
        assert (await client.get_scheduled_events()).document.events == ()


async def test_acknowledgement_starts_the_event(base: str, emulator: ImdsEmulator) -> None:
    async with client_for(base) as client:
        event = emulator.schedule("Reboot", [VM])
        await client.acknowledge([event.event_id])
        (seen,) = (await client.get_scheduled_events()).document.events
        assert seen.status == "Started"
        assert emulator.events[event.event_id].acknowledged_by == [VM]
        with pytest.raises(ImdsError) as unknown:
            await client.acknowledge(["NOT-AN-EVENT"])
        assert unknown.value.status == 400


async def test_placement_group_events_are_visible_to_all_its_vms(
    base: str, emulator: ImdsEmulator
) -> None:
    emulator.add_vm("pg_0", placement_group="pg")
    emulator.add_vm("pg_1", placement_group="pg")
    emulator.add_vm("gpu_0", placement_group="pg2", broadcast=False)
    emulator.add_vm("gpu_1", placement_group="pg2", broadcast=False)
    emulator.schedule("Freeze", ["pg_0"])
    emulator.schedule("Preempt", ["gpu_0"])
    async with client_for(base, "pg_1") as other, client_for(base, "gpu_1") as gpu_other:
        (event,) = (await other.get_scheduled_events()).document.events
        assert event.resources == ("pg_0",)  # visible, but names another VM
        assert (await gpu_other.get_scheduled_events()).document.events == ()


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_transient_errors_are_retried(base: str, emulator: ImdsEmulator, status: int) -> None:
    emulator.add_fault(VM, "status", status=status, count=2)
    async with client_for(base) as client:
        fetch = await client.get_scheduled_events()
    assert fetch.attempts == 3


async def test_persistent_500_gives_up_within_the_budget(base: str, emulator: ImdsEmulator) -> None:
    emulator.add_fault(VM, "status", status=500, count=1000)
    async with client_for(base, retry_budget_seconds=0.5) as client:
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
    assert error.value.kind == "http_error" and error.value.status == 500


async def test_410_is_retried(base: str, emulator: ImdsEmulator) -> None:
    emulator.add_fault(VM, "status", status=410, count=3)
    async with client_for(base) as client:
        fetch = await client.get_scheduled_events()
    assert fetch.attempts == 4


async def test_garbage_body_is_a_parse_error(base: str, emulator: ImdsEmulator) -> None:
    emulator.add_fault(VM, "garbage", count=1)
    async with client_for(base) as client:
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
        assert error.value.kind == "parse_error"
        assert (await client.get_scheduled_events()).document is not None


async def test_huge_body_is_refused(base: str, emulator: ImdsEmulator) -> None:
    emulator.add_fault(VM, "garbage", count=1, body="x" * 200_000)
    async with client_for(base, max_body_bytes=64 * 1024) as client:
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
    assert error.value.kind == "too_large"


async def test_slow_first_call_is_waited_for_but_later_calls_time_out(
    base: str, emulator: ImdsEmulator
) -> None:
    emulator.add_vm(VM, first_call_delay_seconds=0.6)
    async with client_for(base, timeout_seconds=0.3, first_call_timeout_seconds=3.0) as client:
        assert not client.first_call_done
        await client.get_scheduled_events()  # slower than the short timeout, still fine
        assert client.first_call_done
        emulator.add_fault(VM, "slow", delay_seconds=0.6, count=1)
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
    assert error.value.kind == "timeout"


async def test_proxy_variables_are_ignored(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy that does not exist: a client that used it would fail to connect.
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with client_for(base) as client:
        assert (await client.get_scheduled_events()).document.incarnation >= 1


async def test_client_never_exceeds_five_requests_per_second(
    base: str, emulator: ImdsEmulator
) -> None:
    async with client_for(base) as client:
        started = time.monotonic()
        await asyncio.gather(*(client.get_scheduled_events() for _ in range(11)))
        elapsed = time.monotonic() - started
    assert emulator.vms[VM].throttled == 0
    assert elapsed >= 10 * 0.25 - 0.05  # eleven request starts, at least 0.25 s apart


async def test_connection_refused_is_reported() -> None:
    async with ImdsClient(base_url="http://127.0.0.1:9/vms/x", timeout_seconds=0.5) as client:
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
    assert error.value.kind == "connection_error"


async def test_vm_name_from_instance_metadata(base: str) -> None:
    async with client_for(base) as client:
        assert await client.vm_name() == VM


class JumpClock(ManualClock):
    """Virtual time in which a sleep is over at once; records every sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("retry_after", "cap", "longest"),
    [("60", 3.0, 3.0), ("1", 3.0, 1.0), ("60", 1.5, 1.5)],
)
async def test_retry_after_is_honoured_up_to_a_cap(
    base: str, emulator: ImdsEmulator, retry_after: str, cap: float, longest: float
) -> None:
    clock = JumpClock()
    emulator.add_fault(VM, "status", status=429, count=1, retry_after=retry_after)
    async with client_for(
        base,
        clock=clock,
        min_interval_seconds=0.0,
        max_retry_after_seconds=cap,
        backoff=Backoff(initial_seconds=0.05, max_seconds=0.2, jitter=0.0),
    ) as client:
        fetch = await client.get_scheduled_events()
    assert fetch.attempts == 2
    assert clock.slept == [longest]


async def test_retries_never_sleep_past_the_budget(base: str, emulator: ImdsEmulator) -> None:
    clock = JumpClock()
    emulator.add_fault(VM, "status", status=503, count=100, retry_after="60")
    async with client_for(
        base, clock=clock, min_interval_seconds=0.0, retry_budget_seconds=5.0
    ) as client:
        with pytest.raises(ImdsError) as error:
            await client.get_scheduled_events()
    assert error.value.status == 503
    assert clock.monotonic() <= 5.0  # 3 s (the capped Retry-After), then the 2 s left
    assert clock.slept == [3.0, 2.0]

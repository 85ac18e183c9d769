"""Informers and leader election against the cluster emulator's API over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rebalancer.clock import ManualClock
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import Forbidden
from rebalancer.kube.informer import Informer
from rebalancer.kube.leader import LeaderElector
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from tests.helpers import wait_for


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterEmulator]:
    emulator = ClusterEmulator(tick_seconds=0.05)
    await emulator.start(kubeconfig_dir=tmp_path)
    try:
        yield emulator
    finally:
        await emulator.stop()


@pytest.fixture
async def client(cluster: ClusterEmulator) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.connect(str(cluster.kubeconfig_path))
    try:
        yield kube
    finally:
        await kube.close()


def configmap(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "data": {"v": value}}


@contextlib.asynccontextmanager
async def running(*coroutines: Any) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c(stop)) for c in coroutines]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)


async def test_informer_lists_in_pages_then_follows_changes(
    cluster: ClusterEmulator, client: KubeClient
) -> None:
    for index in range(7):
        cluster.store.create(R.CONFIGMAPS, configmap(f"c{index}", "a"))
    changes = 0

    def changed() -> None:
        nonlocal changes
        changes += 1

    informer: Informer[str] = Informer(
        client,
        # Not cluster-wide: the emulator's autoscaler keeps a status ConfigMap in kube-system.
        "/api/v1/namespaces/default/configmaps",
        lambda obj: str((obj.get("data") or {}).get("v")),
        page_size=3,
        on_change=changed,
    )
    async with running(informer.run):
        await wait_for(informer.synced.is_set, what="synced")
        assert len(informer.items) == 7
        cluster.store.create(R.CONFIGMAPS, configmap("new", "b"))
        await wait_for(lambda: informer.items.get(("default", "new")) == "b", what="an add")
        cluster.store.delete(R.CONFIGMAPS, "default", "c0")
        await wait_for(lambda: ("default", "c0") not in informer.items, what="a delete")
        assert changes >= 3


async def test_informer_lists_again_after_410(cluster: ClusterEmulator, client: KubeClient) -> None:
    cluster.store.create(R.CONFIGMAPS, configmap("one", "a"))
    informer: Informer[str] = Informer(
        client, "/api/v1/configmaps", lambda obj: str(obj["data"]["v"]), watch_timeout_seconds=1
    )
    async with running(informer.run):
        await wait_for(informer.synced.is_set, what="synced")
        # Drop the open watch, change something it will not see, and forget the history (no
        # await in between): the watch resumed from our resourceVersion gets 410 Gone.
        for api_task in list(cluster.api._watch_tasks):
            api_task.cancel()
        cluster.store.create(R.CONFIGMAPS, configmap("two", "b"))
        cluster.store.compact()
        await wait_for(lambda: ("default", "two") in informer.items, timeout=10, what="relist")
        assert informer.relists >= 1


async def test_an_optional_informer_of_a_resource_not_served_is_empty_and_synced(
    client: KubeClient,
) -> None:
    # A CRD the cluster does not have (KEDA's ScaledObjects without KEDA) answers 404: nothing
    # to decide with, and no error; listed again later, in case it is installed.
    asked = 0

    class Counting:
        async def request(self, *args: Any, **kwargs: Any) -> Any:
            nonlocal asked
            asked += 1
            return await client.request(*args, **kwargs)

    informer: Informer[str] = Informer(
        Counting(), "/apis/example.com/v1/widgets", str, optional=True, absent_seconds=0.05
    )  # type: ignore[arg-type]
    async with running(informer.run):
        await wait_for(informer.synced.is_set, what="synced")
        await wait_for(lambda: asked >= 3, what="listed again")
    assert (informer.items, informer.absent, informer.errors) == ({}, True, 0)
    assert informer.lists == 0  # never a complete list
    required: Informer[str] = Informer(
        client, "/apis/example.com/v1/widgets", str, backoff=None, watch_timeout_seconds=1
    )
    async with running(required.run):
        await wait_for(lambda: required.errors > 0, what="a 404 counted as an error")
    assert not required.synced.is_set()


async def test_an_optional_informer_not_permitted_plans_without_it_until_it_is(
    cluster: ClusterEmulator, client: KubeClient
) -> None:
    # A ClusterRole from before the resource was read answers 403: the caches still sync (the
    # controller decides for everyone else), the refusal is logged once, and once the
    # permission is granted the next list reads it.
    cluster.store.create(R.CONFIGMAPS, configmap("one", "a"))
    permitted = False
    warnings: list[str] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            warnings.append(event)

    class Gatekeeper:
        async def request(self, *args: Any, **kwargs: Any) -> Any:
            if not permitted:
                raise Forbidden("configmaps is forbidden", status=403)
            return await client.request(*args, **kwargs)

    informer: Informer[str] = Informer(
        Gatekeeper(), "/api/v1/namespaces/default/configmaps",  # type: ignore[arg-type]
        lambda obj: str(obj["data"]["v"]), optional=True, absent_seconds=0.05, log=Log(),
    )  # fmt: skip
    async with running(informer.run):
        await wait_for(informer.synced.is_set, what="synced")
        await asyncio.sleep(0.3)  # refused again, not logged again
        before = (dict(informer.items), informer.absent, informer.errors, list(warnings))
        permitted = True
        await wait_for(lambda: ("default", "one") in informer.items, what="read once permitted")
    assert before == ({}, True, 0, ["not permitted to read; planned without it"])
    assert not informer.absent


def elector(
    client: KubeClient,
    identity: str,
    duration: float = 30.0,
    *,
    retry: float = 0.2,
    clock: ManualClock | None = None,
) -> LeaderElector:
    # A long lease and short retries: a loaded machine that delays a renewal by seconds never
    # costs the leader its lease, and a released lease is taken within a retry or two.
    return LeaderElector(
        client,
        namespace="default",
        name="test-lease",
        identity=identity,
        lease_duration=duration,
        renew_deadline=duration * 0.7,
        retry_period=retry,
        clock=clock,
    )


async def test_one_leader_and_release_hands_over_at_once(client: KubeClient) -> None:
    first, second = elector(client, "a"), elector(client, "b")
    async with running(first.run) as stop_first:
        await asyncio.wait_for(first.leading.wait(), 10)
        async with running(second.run):
            await asyncio.sleep(1.0)  # five of the second's attempts, refused: the first renews
            assert first.is_leader and not second.is_leader
            stop_first.set()  # releases the lease
            # Taken at the next attempt, long before the 30 s lease would have run out.
            await asyncio.wait_for(second.leading.wait(), 10)
    lease = await client.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/test-lease"
    )
    assert lease["spec"]["leaseTransitions"] >= 1


async def test_a_silent_holder_loses_the_lease_after_its_duration(client: KubeClient) -> None:
    holder = elector(client, "a", duration=2.0)
    assert await holder.try_acquire_or_renew()  # takes the lease, then goes silent (no release)
    clock = ManualClock()  # the waiting replica's own clock, moved by hand
    waiting = elector(client, "b", duration=2.0, clock=clock)
    assert not await waiting.try_acquire_or_renew()  # held and fresh: no
    clock.advance(1.0)
    assert not await waiting.try_acquire_or_renew()  # still within the 2 s it observed
    clock.advance(1.2)
    assert await waiting.try_acquire_or_renew()  # expired by its own observation: taken
    lease = await client.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/test-lease"
    )
    assert lease["spec"]["holderIdentity"] == "b"


async def test_a_race_for_the_lease_has_one_winner(client: KubeClient) -> None:
    contenders = [elector(client, name) for name in "abcd"]
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in contenders))
    assert sum(results) == 1

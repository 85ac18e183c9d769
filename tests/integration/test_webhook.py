"""The admission webhook over real HTTPS on 127.0.0.1, with the certificate its keeper issued.

The API below the keeper is the cluster emulator's, served on 127.0.0.1 with its control loops
off (nothing but the keeper writes), its requests read from the tap (tests/tap.py); TLS, HTTP
and the AdmissionReview JSON are real, and the client verifies the server the way the API server does:
against the configuration's caBundle, for the name `<service>.<namespace>.svc`.
"""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import structlog

from rebalancer.controller.webhook import PATH, PlacementWebhook, serve
from rebalancer.controller.webhook_tls import (
    TlsKeeper,
    load_into,
    server_context,
    service_names,
)
from rebalancer.kube.client import KubeClient
from rebalancer.kube.writes import Writer
from rebalancer.metrics import ControllerMetrics
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.store import Store
from tests.tap import Tap
from tests.unit.test_placement import cluster, request, view_of

NAMESPACE, SERVICE, SECRET, CONFIG = "spot-rebalancer", "rebalancer-webhook", "webhook-tls", "sr"
HOST = f"{SERVICE}.{NAMESPACE}.svc"
LOG = structlog.get_logger()


@dataclass
class Api:
    store: Store
    tap: Tap
    client: KubeClient


@asynccontextmanager
async def served() -> AsyncIterator[Api]:
    """An API server on 127.0.0.1 (the emulator's, no control loop running) and a client."""
    emulator = ClusterEmulator(controllers=set())
    emulator.store.create(R.NAMESPACES, {"metadata": {"name": NAMESPACE}})
    tap = Tap().install(emulator)
    await emulator.start(run_loops=False)
    client = await KubeClient.connect(str(emulator.kubeconfig_path))
    try:
        yield Api(emulator.store, tap, client)
    finally:
        await client.close()
        await emulator.stop()


def webhook(name: str) -> dict[str, Any]:
    """One webhook of the configuration, with what the API server requires of each."""
    return {
        "name": name,
        "clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }


def configuration(api: Api) -> dict[str, Any]:
    return api.store.create(  # type: ignore[no-any-return]
        R.MUTATING_WEBHOOKS,
        {
            "metadata": {"name": CONFIG},
            "webhooks": [
                webhook("a.spot-rebalancer.io"),
                webhook("b.spot-rebalancer.io"),
            ],
        },
    )


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)  # real: the TLS client checks validity in real time

    def __call__(self) -> dt.datetime:
        return self.now


def keeper(api: Api, clock: Clock, *, manage: bool = True) -> tuple[TlsKeeper, list[str]]:
    errors: list[str] = []
    return (
        TlsKeeper(
            Writer(api.client),
            namespace=NAMESPACE,
            secret=SECRET,
            configuration=CONFIG,
            dns_names=service_names(SERVICE, NAMESPACE),
            manage=manage,
            may_write=lambda: True,
            now=clock,
            log=LOG,
            on_error=errors.append,
        ),
        errors,
    )


def bundle(api: Api) -> list[str]:
    hooks = api.store.must_get(R.MUTATING_WEBHOOKS, "", CONFIG)["webhooks"]
    return [h["clientConfig"].get("caBundle", "") for h in hooks]


def trusting(ca_bundle: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())


@asynccontextmanager
async def webhook_on(context: ssl.SSLContext) -> AsyncIterator[tuple[int, ControllerMetrics]]:
    metrics = ControllerMetrics()
    view = view_of(cluster({"spot-rebalancer.io/spread": "zone"}))
    hook = PlacementWebhook(lambda: view, metrics=metrics, now=lambda: view.snapshot.now, log=LOG)
    runner = await serve(hook, "127.0.0.1", 0, context)
    port = runner.addresses[0][1]
    try:
        yield port, metrics
    finally:
        await runner.cleanup()


async def post(port: int, trust: ssl.SSLContext, body: Any) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"https://127.0.0.1:{port}{PATH}", json=body, ssl=trust, server_hostname=HOST
        ) as response:
            response.raise_for_status()
            answer: dict[str, Any] = await response.json()
            return answer


async def test_the_keeper_issues_injects_and_the_webhook_answers_over_verified_tls() -> None:
    clock = Clock()
    async with served() as api:
        configuration(api)
        tls, errors = keeper(api, clock)
        assert await tls.check() is True
        assert tls.material is not None and errors == []
        assert api.store.must_get(R.SECRETS, NAMESPACE, SECRET)["type"] == "kubernetes.io/tls"
        first, second = bundle(api)
        assert first == second == base64.b64encode(tls.material.ca).decode()
        assert await tls.check() is False  # nothing to do: no write
        assert [w.method for w in api.tap.written()] == ["POST", "PUT"]

        async with webhook_on(server_context(tls.material)) as (port, metrics):
            answer = await post(port, trusting(first), request("abc"))
            assert answer["response"]["uid"] == "abc"
            assert answer["response"]["patchType"] == "JSONPatch"
            assert metrics.webhook_reviews.labels("placed")._value.get() == 1
            # A client that checks another name refuses the server, as the API server would.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with aiohttp.ClientSession() as session:
                    await session.post(
                        f"https://127.0.0.1:{port}{PATH}", json=request(), ssl=trusting(first),
                        server_hostname="other.spot-rebalancer.svc",
                    )  # fmt: skip


async def test_a_certificate_near_its_end_is_renewed_and_loaded_without_a_restart() -> None:
    clock = Clock()
    async with served() as api:
        configuration(api)
        tls, _ = keeper(api, clock)
        clock.now -= dt.timedelta(days=340)  # issued 340 days ago: 25 days left now
        await tls.check()
        assert tls.material is not None
        old_ca = bundle(api)[0]
        context = server_context(tls.material)
        async with webhook_on(context) as (port, _):
            clock.now += dt.timedelta(days=340)  # today: inside the 30-day renewal window
            assert await tls.check() is True
            new_ca = bundle(api)[0]
            assert new_ca != old_ca
            load_into(context, tls.material)
            answer = await post(port, trusting(new_ca), request("after"))
            assert answer["response"]["allowed"] is True
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await post(port, trusting(old_ca), request("old"))


async def test_with_cert_manager_nothing_is_written_and_a_bad_secret_is_said() -> None:
    clock = Clock()
    async with served() as api:
        configuration(api)
        tls, errors = keeper(api, clock, manage=False)
        assert await tls.check() is False  # no Secret yet: wait for cert-manager
        api.store.create(
            R.SECRETS,
            {"metadata": {"name": SECRET, "namespace": NAMESPACE}, "data": {"tls.crt": "IQ=="}},
        )
        assert await tls.check() is False
        assert errors == ["unreadable"]
        assert api.tap.written() == []
        assert not tls.loaded.is_set()


async def test_an_unreadable_secret_of_ours_is_issued_anew_and_api_errors_keep_the_last() -> None:
    clock = Clock()
    async with served() as api:
        configuration(api)
        api.store.create(
            R.SECRETS, {"metadata": {"name": SECRET, "namespace": NAMESPACE}, "data": {"x": "eQ=="}}
        )
        tls, errors = keeper(api, clock)
        assert await tls.check() is True
        kept = tls.material
        assert errors == ["unreadable"]
        api.tap.fail("GET", "/secrets/", 503, times=1, message="down")
        assert await tls.check() is False
        assert tls.material == kept and errors == ["unreadable", "api"]

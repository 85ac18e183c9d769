"""The parts around the controller's loop, built from its settings: the price book, Azure's risk
feeds (an ARM token, Resource Graph, Spot Placement Scores), the doctor, the placement webhook
with the TLS keeper that serves it, and the notifier.

Not the loop (reconciler.py runs observe, decide, apply, measure with these parts passed in) and
no decisions: what is built here only feeds the snapshot (prices, Azure's risk data), checks
the cluster's setup (the doctor) or answers admission reviews from the last pass's view.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rebalancer.azure.arm import ArmClient, identity_token
from rebalancer.azure.placement_scores import PlacementScoreClient
from rebalancer.azure.price_book import PriceBook
from rebalancer.azure.resource_graph import ResourceGraphClient
from rebalancer.azure.retail_prices import RetailPricesClient
from rebalancer.azure.risk_data import EvictionRates, PlacementScores
from rebalancer.azure.risk_feeds import RiskFeed, eviction_rate_feed, placement_score_feed
from rebalancer.clock import Clock
from rebalancer.controller.admission import View
from rebalancer.controller.doctor import Doctor
from rebalancer.controller.messages import Kind, Target
from rebalancer.controller.notifier import Notifier
from rebalancer.controller.options import notify_retry_policy
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.webhook import PlacementWebhook, serve
from rebalancer.controller.webhook_server import Limits
from rebalancer.controller.webhook_tls import TlsKeeper, load_into, server_context, service_names
from rebalancer.kube.events import EventRecorder
from rebalancer.kube.gate import RequestGate
from rebalancer.kube.leader import LeaderElector
from rebalancer.kube.writes import Writer
from rebalancer.metrics import ControllerMetrics
from rebalancer.process import sleep_or_stop


class Loop(Protocol):
    """What the parts take from the loop: its access to the cluster (every request through the
    gate, every write fenced by the Lease) and its last pass's view."""

    settings: ControllerSettings
    metrics: ControllerMetrics
    clock: Clock
    log: Any
    gate: RequestGate
    elector: LeaderElector
    writer: Writer
    events: EventRecorder
    view: View | None


@dataclass
class RiskFeeds:
    """Azure's risk data, each source only when enabled; the token is asked for on the first
    call, so a cluster that enables neither never needs Azure credentials."""

    tokens: Any  # closed when the controller stops
    eviction_rates: RiskFeed[EvictionRates] | None = None
    placement_scores: RiskFeed[PlacementScores] | None = None
    feeds: list[RiskFeed[Any]] = field(default_factory=list)

    def data(self) -> tuple[EvictionRates | None, PlacementScores | None]:
        return (
            self.eviction_rates.data if self.eviction_rates else None,
            self.placement_scores.data if self.placement_scores else None,
        )

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a credential must not hold the stop
            await self.tokens.close()


def risk_feeds(
    settings: ControllerSettings, *, metrics: ControllerMetrics, clock: Clock, log: Any
) -> RiskFeeds:
    tokens = identity_token(settings.azure_credential)
    arm = ArmClient(
        tokens=tokens,
        base_url=settings.azure_management_url,
        timeout_seconds=settings.azure_timeout_seconds,
        clock=clock,
    )

    def failed(source: str) -> Callable[[str], None]:
        return lambda reason: metrics.risk_refresh_errors.labels(source, reason).inc()

    common: dict[str, Any] = {
        "retry_seconds": settings.risk_retry_seconds, "clock": clock, "log": log,
    }  # fmt: skip
    risk = RiskFeeds(tokens)
    if settings.risk_resource_graph_enabled:
        risk.eviction_rates = eviction_rate_feed(
            ResourceGraphClient(arm).eviction_rates,
            ttl_seconds=settings.risk_resource_graph_refresh_seconds,
            on_failure=failed("resource_graph"),
            **common,
        )
    if settings.risk_placement_score_enabled:
        client = PlacementScoreClient(arm, subscription_id=settings.azure_subscription_id)
        risk.placement_scores = placement_score_feed(
            client.scores,
            ttl_seconds=settings.risk_placement_score_refresh_seconds,
            on_failure=failed("placement_score"),
            **common,
        )
    risk.feeds = [f for f in (risk.eviction_rates, risk.placement_scores) if f is not None]
    return risk


def price_book(
    settings: ControllerSettings, *, metrics: ControllerMetrics, clock: Clock, log: Any
) -> PriceBook:
    retail = RetailPricesClient(base_url=settings.prices_api_url)
    return PriceBook(
        file=settings.prices_file,
        api=retail if settings.prices_api_enabled else None,
        ttl_seconds=settings.prices_refresh_seconds,
        clock=clock,
        log=log,
        on_failure=metrics.price_refresh_errors.inc,
    )


class Placement:
    """The admission webhook: answers from the loop's last view, served over TLS once there is
    a certificate (the keeper reads, and on the leader issues, it), when enabled."""

    def __init__(self, loop: Loop) -> None:
        settings, metrics, clock, log = loop.settings, loop.metrics, loop.clock, loop.log
        self.settings, self.log = settings, log
        self.webhook = PlacementWebhook(
            lambda: loop.view, metrics=metrics, now=clock.now, log=log, limits=Limits.of(settings)
        )
        self.tls = TlsKeeper(
            loop.writer, namespace=settings.namespace, secret=settings.webhook_secret,
            configuration=settings.webhook_configuration,
            dns_names=service_names(settings.webhook_service, settings.namespace),
            manage=not settings.webhook_cert_manager and not settings.dry_run,
            may_write=loop.elector.may_write, now=clock.now, log=log,
            on_error=lambda reason: metrics.webhook_tls_errors.labels(reason).inc(),
        )  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Serve once there is a certificate; load each new one into the running server."""
        if not self.settings.webhook_enabled:
            return
        settings = self.settings
        context = None

        def reload() -> None:
            if context is not None and self.tls.material is not None:
                load_into(context, self.tls.material)
                self.log.info("webhook TLS: new certificate loaded")

        keeping = asyncio.create_task(
            self.tls.run(stop, settings.webhook_tls_check_seconds, reload)
        )
        runner = None
        try:
            while not self.tls.loaded.is_set() and not stop.is_set():
                await sleep_or_stop(stop, 0.2)
            if stop.is_set() or self.tls.material is None:
                return
            context = server_context(self.tls.material)
            runner = await serve(self.webhook, settings.http_host, settings.webhook_port, context)
            self.log.info("admission webhook serving", port=settings.webhook_port)
            await stop.wait()
        finally:
            keeping.cancel()
            await asyncio.gather(keeping, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()


@dataclass
class Parts:
    """What the loop is given: where the snapshot's prices and Azure risk data come from, and
    what runs beside it once the caches are synced."""

    prices: PriceBook
    risk: RiskFeeds
    doctor: Doctor
    placement: Placement
    notifier: Notifier | None  # None: no notifications configured


def wire(loop: Loop) -> Parts:
    """The parts of the controller process, built from its settings and the loop's access."""
    settings, metrics, clock, log = loop.settings, loop.metrics, loop.clock, loop.log
    doctor = Doctor(
        client=loop.gate, settings=settings, metrics=metrics, clock=clock, log=log,
        events=None if settings.dry_run else loop.events, leading=loop.elector.may_write,
        leadership=loop.elector.leading,
    )  # fmt: skip
    return Parts(
        prices=price_book(settings, metrics=metrics, clock=clock, log=log),
        risk=risk_feeds(settings, metrics=metrics, clock=clock, log=log),
        doctor=doctor,
        placement=Placement(loop),
        notifier=notifier(loop),
    )


def notifier(loop: Loop) -> Notifier | None:
    settings = loop.settings
    if settings.notify_webhook_url is None:
        return None
    return Notifier(
        url=settings.notify_webhook_url.get_secret_value(),
        target=Target(settings.notify_target), metrics=loop.metrics, clock=loop.clock,
        log=loop.log, cluster=settings.notify_cluster_name,
        kinds=[Kind(kind) for kind in settings.notify_on],
        per_minute=settings.notify_rate_per_minute,
        queue_size=settings.notify_queue_size,
        timeout_seconds=settings.notify_timeout_seconds,
        policy=notify_retry_policy(settings),
        may_send=lambda: loop.elector.is_leader,  # one replica tells, the one that acts
    )  # fmt: skip

"""The controller's settings, translated once into what each part of it takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rebalancer.config import ControllerSettings, parse_selector, parse_window
from rebalancer.controller.karpenter import NodePoolInfo, nodepool_pools
from rebalancer.controller.planner import Settings
from rebalancer.controller.pools import declared_pools, pools_of
from rebalancer.controller.returns import ReturnSettings
from rebalancer.controller.risk import RiskSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.controller.target import TargetSettings
from rebalancer.retry import Backoff, RetryPolicy
from rebalancer.vocabulary import NoticePolicy


def planner_settings(settings: ControllerSettings) -> Settings:
    return Settings(
        event_policy={k: NoticePolicy(v) for k, v in settings.event_policy.items()},
        deadline_margin_seconds=settings.deadline_margin_seconds,
        act_now_grace_seconds=settings.act_now_grace_seconds,
        cooldown_seconds=settings.cooldown_seconds,
        gpu_workloads_only=settings.gpu_workloads_only,
        workload_selector=parse_selector(settings.workload_selector),
        agent_nodes=parse_selector(settings.agent_node_selector),
        hold_doomed_pods=settings.hold_doomed_pods,
        hold_before_notice=settings.hold_before_notice,
        declared_pools=declared_pools(settings.pools),
        target=TargetSettings(
            recovery_seconds=settings.target_recovery_seconds,
            fresh_hours=settings.target_fresh_seconds / 3600.0,
            spot_price_share=settings.target_spot_price_share,
        ),
        returns=ReturnSettings(
            enabled=settings.return_enabled,
            quiet_seconds=settings.return_quiet_seconds,
            pending_timeout_seconds=settings.return_pending_timeout_seconds,
            max_concurrent=settings.return_max_concurrent,
            window=parse_window(settings.return_window),
        ),
    )


def with_nodepools(
    settings: Settings, nodepools: Sequence[NodePoolInfo], snapshot: Snapshot
) -> Settings:
    """The planner's settings for one pass, with the NodePools' parts beside the declared pools,
    entering as they do: a part with nodes is seen on them (`pools.with_declared`), and a
    declaration wins over the NodePool, as it says what the NodePool may not (GPUs per node)."""
    if not nodepools:
        return settings
    parts = nodepool_pools(nodepools, pools_of(snapshot.nodes.values()))
    return replace(settings, declared_pools={**parts, **settings.declared_pools})


def retry_policy(settings: ControllerSettings) -> RetryPolicy:
    return RetryPolicy(
        attempts=settings.write_attempts,
        max_wait_seconds=settings.write_retry_max_seconds,
        backoff=Backoff(initial_seconds=0.2, max_seconds=settings.write_retry_max_seconds),
    )


def notify_retry_policy(settings: ControllerSettings) -> RetryPolicy:
    """Notifications have their own task: they may wait out a chat's Retry-After (up to 30 s),
    which a write in a planning pass may not."""
    return RetryPolicy(
        attempts=settings.notify_attempts,
        max_wait_seconds=30.0,
        backoff=Backoff(initial_seconds=1.0, max_seconds=30.0),
    )


def risk_settings(settings: ControllerSettings) -> RiskSettings:
    return RiskSettings(
        default_prior_rate=settings.risk_prior_rate_per_hour,
        prior_rates={sku.lower(): rate for sku, rate in settings.risk_prior_rates.items()},
        prior_weight_hours=settings.risk_prior_weight_hours,
        half_life_seconds=settings.risk_history_half_life_seconds,
        medium_rate=settings.risk_medium_rate_per_hour,
        high_rate=settings.risk_high_rate_per_hour,
        resource_graph_max_age_seconds=settings.risk_resource_graph_max_age_seconds,
        placement_score_max_age_seconds=settings.risk_placement_score_max_age_seconds,
    )

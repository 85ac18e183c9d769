"""What parts of the controller take that its settings do not hold as they are: the planner's
settings for one pass (with the NodePools'), and retry policies. (The planner's and the risk
model's settings are nested in ControllerSettings as their own types: `settings.planner`,
`settings.risk`.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rebalancer.controller.karpenter import NodePoolInfo, nodepool_pools
from rebalancer.controller.planner import Settings
from rebalancer.controller.pools import pools_of
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.snapshot import Snapshot
from rebalancer.retry import Backoff, RetryPolicy


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

"""The planner's settings (`Settings`), one frozen value per pass."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rebalancer import names
from rebalancer.controller.pools import Pool
from rebalancer.controller.returns import ReturnSettings
from rebalancer.controller.target import TargetSettings
from rebalancer.vocabulary import DEFAULT_EVENT_POLICY, NoticePolicy


@dataclass(frozen=True)
class Settings:
    event_policy: Mapping[str, NoticePolicy] = field(
        default_factory=lambda: dict(DEFAULT_EVENT_POLICY)
    )
    unknown_event_policy: NoticePolicy = NoticePolicy.NONE
    deadline_margin_seconds: float = 5.0  # delete what remains this long before the deadline
    act_now_grace_seconds: int = 5  # grace of deletions when the deadline is unknown or past
    cooldown_seconds: float = 600.0
    gpu_workloads_only: bool = True
    # Only workloads whose labels match (key -> value, or key -> None: the key exists).
    workload_selector: Mapping[str, str | None] = field(default_factory=dict)
    # Nodes that run our agent (the same form): an agent notice elsewhere was not written by it.
    agent_nodes: Mapping[str, str | None] = field(
        default_factory=lambda: {names.AKS_SPOT_LABEL: "spot"}
    )
    returns: ReturnSettings = field(default_factory=ReturnSettings)
    # Pools that may have no Node (REBALANCER_POOLS), for the fail-over check.
    declared_pools: Mapping[str, Pool] = field(default_factory=dict)
    record_history: bool = True
    # Hold a surge's doomed pods against evictions by others (a PodDisruptionBudget of ours).
    hold_doomed_pods: bool = True
    hold_before_notice: bool = False
    target: TargetSettings = field(default_factory=TargetSettings)

    def policy_for(self, event_type: str) -> NoticePolicy:
        return self.event_policy.get(event_type, self.unknown_event_policy)

"""The planner's settings (`Settings`), one frozen value per pass.

Declared here once: the controller's settings nest this type (rebalancer.controller.settings),
and each `setting(...)` field is a setting users set flat, REBALANCER_<NAME> (its `returns` and
`target` are REBALANCER_RETURN_* and REBALANCER_TARGET_*; rebalancer.setting_groups).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from functools import cached_property

from pydantic import SkipValidation, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from rebalancer import names
from rebalancer.controller.pools import Pool, declared_pools
from rebalancer.controller.returns import ReturnSettings
from rebalancer.controller.target import TargetSettings
from rebalancer.setting_groups import SETTINGS_CONFIG, group, setting
from rebalancer.setting_values import PoolShape, parse_selector
from rebalancer.vocabulary import (
    DEFAULT_DEADLINE_MARGIN_SECONDS,
    DEFAULT_EVENT_POLICY,
    NoticePolicy,
)


@pydantic_dataclass(frozen=True, config=SETTINGS_CONFIG)
class Settings:
    event_policy: dict[str, NoticePolicy] = setting(
        default_factory=lambda: {
            str(kind): policy for kind, policy in DEFAULT_EVENT_POLICY.items()
        },
        description="What to do per event type: failover (surge, then drain), drain, or none.",
    )
    unknown_event_policy: NoticePolicy = NoticePolicy.NONE
    deadline_margin_seconds: float = setting(
        DEFAULT_DEADLINE_MARGIN_SECONDS,
        ge=0,
        description="Delete what remains on a node this long before its deadline.",
    )
    act_now_grace_seconds: int = setting(
        5, ge=0, description="Grace period of deletions when the deadline is unknown or past."
    )
    cooldown_seconds: float = setting(
        600.0, ge=0, description="PreferNoSchedule on the rest of an evicted spot pool this long."
    )
    gpu_workloads_only: bool = setting(
        True, description="Fail over only workloads whose pods request nvidia.com/gpu."
    )
    # Parsed: `workload_labels`.
    workload_selector: str = setting(
        "",
        description="Fail over only workloads with these labels: 'k=v,k2' (k2: the key exists).",
    )
    # Parsed: `agent_nodes`; an agent notice elsewhere was not written by our agent.
    agent_node_selector: str = setting(
        f"{names.AKS_SPOT_LABEL}=spot",
        description="Nodes that run our agent, 'k=v,k2': notices in the agent's condition and "
        "annotation count only there (the chart derives it from agent.nodeSelector).",
    )
    hold_before_notice: bool = setting(
        False,
        description="Hold every managed Deployment with a replica on spot with a "
        "PodDisruptionBudget of ours at all times, not only from the notice: AKS node "
        "auto-drain can evict before our agent sees the notice. Yields to upgrades and kubectl "
        "drain; keeps the cluster autoscaler and Karpenter from removing those nodes "
        "(docs/controller.md).",
    )
    hold_doomed_pods: bool = setting(
        True,
        description="While replacements load, a PodDisruptionBudget of ours holds the doomed "
        "pods against evictions by others (AKS node auto-drain, kubectl drain).",
    )
    pools: list[PoolShape] = setting(
        default_factory=list,
        description="Pools that may have no Node (autoscaled at min 0), as a JSON list of "
        '{"name", "spot", "gpus", "labels", "taints": ["key=value:Effect"]}; '
        "a pool seen on Nodes wins over its declaration, and a declaration over the part of a "
        "Karpenter NodePool read from the NodePool.",
    )
    # The pools the fail-over check may use that have no Node: those given here (a pass's
    # Karpenter NodePool parts, the simulator's), under the ones `pools` declares.
    declared_pools: SkipValidation[Mapping[str, Pool]] = field(default_factory=dict)
    record_history: bool = True
    returns: ReturnSettings = group(ReturnSettings, prefix="return_")
    target: TargetSettings = group(TargetSettings, prefix="target_")

    def __post_init__(self) -> None:
        merged = {**self.declared_pools, **declared_pools(self.pools)}
        object.__setattr__(self, "declared_pools", merged)  # frozen: set once, here

    @field_validator("workload_selector", "agent_node_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        parse_selector(value)
        return value

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, value: list[PoolShape]) -> list[PoolShape]:
        seen = [pool.name for pool in value]
        twice = sorted({name for name in seen if seen.count(name) > 1})
        if twice:
            raise ValueError(f"pools declared twice: {twice}")
        return value

    @cached_property
    def workload_labels(self) -> dict[str, str | None]:
        """Only workloads whose labels match (key -> value, or key -> None: the key exists)."""
        return parse_selector(self.workload_selector)

    @cached_property
    def agent_nodes(self) -> dict[str, str | None]:
        """Nodes that run our agent, in the same form."""
        return parse_selector(self.agent_node_selector)

    def policy_for(self, event_type: str) -> NoticePolicy:
        return self.event_policy.get(event_type, self.unknown_event_policy)

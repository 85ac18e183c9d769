"""The workload and cluster a simulation assumes: shape, distributions, prices, pool sizes.

A duration is a distribution written as text, sampled with a seeded RNG:
- `90` a constant;
- `uniform:60:120`;
- `normal:90:15` (mean, standard deviation; never below 0);
- `lognormal:90:0.5` (median, sigma of the log);
- `choice:30@0.9,5@0.1` (values with weights: e.g. mostly 30 s notices, sometimes 5 s).
Defaults (traces alone): 3 replicas of one `Standard_NC24ads_A100_v4` GPU, 90 s model load,
30 s notices, eastus prices, on-demand nodes in 5 minutes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rebalancer.azure import gpu_sizes
from rebalancer.azure.prices import BUNDLED, PriceTable
from rebalancer.simulate import InputError


@dataclass(frozen=True)
class Distribution:
    kind: str  # constant | uniform | normal | lognormal | choice
    params: tuple[float, ...]
    text: str

    def sample(self, rng: random.Random) -> float:
        p = self.params
        if self.kind == "constant":
            return p[0]
        if self.kind == "uniform":
            return rng.uniform(p[0], p[1])
        if self.kind == "normal":
            return max(0.0, rng.gauss(p[0], p[1]))
        if self.kind == "lognormal":
            return p[0] * math.exp(rng.gauss(0.0, p[1]))
        values, weights = p[0::2], p[1::2]
        return rng.choices(values, weights)[0]

    @property
    def mean(self) -> float:
        p = self.params
        if self.kind == "constant":
            return p[0]
        if self.kind == "uniform":
            return (p[0] + p[1]) / 2
        if self.kind == "normal":
            return p[0]
        if self.kind == "lognormal":
            return p[0] * math.exp(p[1] ** 2 / 2)
        values, weights = p[0::2], p[1::2]
        return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)

    @property
    def minimum(self) -> float:
        """The least value a sample can take (normal and lognormal reach down to 0)."""
        p = self.params
        if self.kind in ("constant", "uniform"):
            return p[0]
        if self.kind == "choice":
            return min(v for v, w in zip(p[0::2], p[1::2], strict=True) if w > 0)
        return 0.0

    def __str__(self) -> str:
        return self.text


def parse_distribution(text: object, *, what: str) -> Distribution:
    """`what` names the setting in the error ("--load-seconds", "config.yaml: loadSeconds")."""
    raw = str(text).strip()
    bad = InputError(
        f"{what}: {raw!r} is not a duration distribution "
        "(90 | uniform:A:B | normal:MEAN:SD | lognormal:MEDIAN:SIGMA | choice:V@W,V@W)"
    )
    try:
        if ":" not in raw:
            value = float(raw)
            if value < 0 or not math.isfinite(value):
                raise bad
            return Distribution("constant", (value,), raw)
        kind, _, rest = raw.partition(":")
        if kind == "choice":
            params: list[float] = []
            for part in rest.split(","):
                value_text, _, weight_text = part.partition("@")
                params += [float(value_text), float(weight_text or "1")]
            if any(v < 0 for v in params) or sum(params[1::2]) <= 0:
                raise bad
            return Distribution("choice", tuple(params), raw)
        numbers = tuple(float(x) for x in rest.split(":"))
    except ValueError:
        raise bad from None
    if kind in ("uniform", "normal", "lognormal") and len(numbers) == 2 and min(numbers) >= 0:
        if kind == "uniform" and numbers[0] > numbers[1]:
            raise bad
        return Distribution(kind, numbers, raw)
    raise bad


@dataclass(frozen=True)
class Scenario:
    """Everything but the traces and the policies. Field names are the YAML keys."""

    replicas: int = 3
    gpus_per_replica: int = 1
    load_seconds: Distribution = field(default_factory=lambda: parse_distribution(90, what=""))
    shutdown_seconds: Distribution = field(default_factory=lambda: parse_distribution(5, what=""))
    grace_seconds: int = 30
    notice_seconds: Distribution = field(default_factory=lambda: parse_distribution(30, what=""))
    on_demand_provision_seconds: Distribution = field(
        default_factory=lambda: parse_distribution(300, what="")
    )
    spot_provision_seconds: Distribution = field(
        default_factory=lambda: parse_distribution(300, what="")
    )
    on_demand_limit: int | None = None  # on-demand nodes at most (quota); None: no limit
    scale_down_seconds: float = 600.0  # cluster autoscaler's scale-down-unneeded-time
    # Node pools' minimum counts (the user's `--min-count`): each spot pool, the on-demand pool.
    spot_pool_min_nodes: int = 0
    on_demand_pool_min_nodes: int = 0
    # The cluster autoscaler's defaults (docs/simulate.md cites them): a spot request without
    # capacity fails after max-node-provision-time (15m), then the pool backs off 5m, doubling per
    # failure in a row, at most 30m (initial-/max-node-group-backoff-duration).
    # True: the autoscaler asks only pools with capacity (a pool the trace alone resizes, as the
    # cluster emulator's); the simulator's default is a cloud that tells only when asked.
    spot_capacity_known: bool = False
    max_node_provision_seconds: float = 900.0
    initial_backoff_seconds: float = 300.0
    max_backoff_seconds: float = 1800.0
    vm_size: str = "Standard_NC24ads_A100_v4"
    region: str = "eastus"
    gpus_per_node: int | None = None  # None: from the VM size
    hedge_spare: int = 1  # SpotHedge reference: spare spot replicas (num_overprovision)
    fallback_spare: int = 2  # dynamic-fallback baseline: k in N + k
    # eviction-aware: the workload's placement policy (spot-rebalancer.io/... annotations).
    max_risk: str = "low"
    min_on_demand: int = 0
    spare_replicas: int = 0
    spread: str = "zone"
    failover_to: str = "on-demand"
    # target: the workload's spot-rebalancer.io/availability-target
    availability_target: str = "99.9"
    seed: int = 1
    # Pools of several regions (from the traces' names) as one cluster; off: one region only.
    multi_region: bool = False
    warmup_seconds: float = 1800.0  # before t=0, not counted: the service starts settled
    # The controller's settings of the same names (REBALANCER_...); None: its default.
    deadline_margin_seconds: float | None = None
    cooldown_seconds: float | None = None
    return_quiet_seconds: float | None = None
    return_pending_timeout_seconds: float | None = None
    risk_prior_rate_per_hour: float | None = None
    risk_prior_weight_hours: float | None = None
    risk_history_half_life_seconds: float | None = None
    risk_medium_rate_per_hour: float | None = None
    risk_high_rate_per_hour: float | None = None

    def node_gpus(self) -> int:
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        known = gpu_sizes.gpus_of(self.vm_size)
        if known is None:
            raise InputError(f"--vm-size {self.vm_size}: GPUs per VM unknown; give --gpus-per-node")
        return known


_DISTRIBUTIONS = {
    "load_seconds",
    "shutdown_seconds",
    "notice_seconds",
    "on_demand_provision_seconds",
    "spot_provision_seconds",
}
_INTS = {
    "replicas",
    "gpus_per_replica",
    "grace_seconds",
    "on_demand_limit",
    "gpus_per_node",
    "hedge_spare",
    "fallback_spare",
    "spot_pool_min_nodes",
    "on_demand_pool_min_nodes",
    "min_on_demand",
    "spare_replicas",
    "seed",
}
CONTROLLER_SETTINGS = {
    "deadline_margin_seconds",
    "cooldown_seconds",
    "return_quiet_seconds",
    "return_pending_timeout_seconds",
    "risk_prior_rate_per_hour",
    "risk_prior_weight_hours",
    "risk_history_half_life_seconds",
    "risk_medium_rate_per_hour",
    "risk_high_rate_per_hour",
}
_FLOATS = {
    "scale_down_seconds",
    "warmup_seconds",
    "max_node_provision_seconds",
    "initial_backoff_seconds",
    "max_backoff_seconds",
    *CONTROLLER_SETTINGS,
}
_STRINGS = {"vm_size", "region"}
# The placement policy's words (rebalancer/controller/policy.py and risk.py; a test keeps these
# equal to the controller's).
CHOICES: Mapping[str, tuple[str, ...]] = {
    "max_risk": ("low", "medium", "high"),
    "spread": ("zone", "pool", "none"),
    "failover_to": ("on-demand", "spot"),
}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


KEYS = {camel(f.name): f.name for f in fields(Scenario)}


def scenario_from(
    values: Mapping[str, Any], *, source: str, base: Scenario | None = None
) -> Scenario:
    """Apply `values` (YAML keys in camelCase or flag names in snake_case) over `base`."""
    changes: dict[str, Any] = {}
    for key, value in values.items():
        name = KEYS.get(key, key)
        if name not in {f.name for f in fields(Scenario)}:
            known = ", ".join(sorted(KEYS))
            raise InputError(f"{source}: unknown setting {key!r} (known: {known})")
        where = f"{source}: {key}"
        if value is None and name in ("on_demand_limit", "gpus_per_node", *CONTROLLER_SETTINGS):
            changes[name] = None
        elif name in _DISTRIBUTIONS:
            changes[name] = parse_distribution(value, what=where)
        elif name in _INTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{where}: expected a whole number >= 0, not {value!r}")
            changes[name] = value
        elif name in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InputError(f"{where}: expected a number of seconds >= 0, not {value!r}")
            changes[name] = float(value)
        elif name in ("multi_region", "spot_capacity_known"):
            if not isinstance(value, bool):
                raise InputError(f"{where}: expected true or false, not {value!r}")
            changes[name] = value
        elif name in _STRINGS:
            if not isinstance(value, str) or not value:
                raise InputError(f"{where}: expected a name, not {value!r}")
            changes[name] = value
        elif name == "availability_target":
            from rebalancer.simulate.adapter import availability_target

            changes[name] = availability_target(str(value), where=where)
        elif name in CHOICES:
            if not isinstance(value, str) or value.strip().lower() not in CHOICES[name]:
                allowed = ", ".join(CHOICES[name])
                raise InputError(f"{where}: {value!r} is not one of {allowed}")
            changes[name] = value.strip().lower()
    scenario = replace(base or Scenario(), **changes)
    if scenario.replicas < 1:
        raise InputError(f"{source}: replicas must be at least 1")
    if scenario.gpus_per_replica < 1:
        raise InputError(f"{source}: gpusPerReplica must be at least 1 (a GPU workload)")
    for positive in ("max_node_provision_seconds", "initial_backoff_seconds"):
        # Both 0: a failed request would be retried and fail again at the same instant, forever.
        if getattr(scenario, positive) == 0:
            raise InputError(f"{source}: {camel(positive)} must be above 0")
    if scenario.initial_backoff_seconds > scenario.max_backoff_seconds:
        raise InputError(f"{source}: initialBackoffSeconds is above maxBackoffSeconds")
    if scenario.return_pending_timeout_seconds == 0:
        raise InputError(f"{source}: returnPendingTimeoutSeconds must be above 0")
    for rate in (
        "risk_prior_rate_per_hour",
        "risk_medium_rate_per_hour",
        "risk_high_rate_per_hour",
    ):
        value = getattr(scenario, rate)
        if value is not None and value > 1:
            raise InputError(f"{source}: {camel(rate)} is evictions per node-hour, at most 1")
    for positive in (
        "risk_history_half_life_seconds",
        "risk_medium_rate_per_hour",
        "risk_high_rate_per_hour",
    ):
        if getattr(scenario, positive) == 0:
            raise InputError(f"{source}: {camel(positive)} must be above 0")
    return scenario


@dataclass(frozen=True)
class Prices:
    on_demand: float  # USD per node-hour, in the cluster's region
    spot: float  # in the cluster's region
    # Spot prices of pools in other regions (a cluster across regions): trace region -> USD.
    spot_by_region: Mapping[str, float] = field(default_factory=dict)

    def spot_in(self, region: str) -> float:
        return self.spot_by_region.get(region, self.spot)


def prices_for(
    scenario: Scenario,
    table: PriceTable = BUNDLED,
    *,
    regions: Mapping[str, str] | None = None,
) -> Prices:
    """The cluster's prices (`--region`), and the spot price of every trace region that
    `regions` maps to a region of the table (`--price-region us-west-2=westus2`)."""
    on_demand = table.price(scenario.vm_size, scenario.region, spot=False)
    spot = table.price(scenario.vm_size, scenario.region, spot=True)
    if on_demand is None or spot is None:
        raise InputError(
            f"--vm-size {scenario.vm_size} --region {scenario.region}: no on-demand and spot "
            f"price in the {table.source} price table; give --prices FILE"
        )
    by_region = {}
    for trace_region, region in (regions or {}).items():
        price = table.price(scenario.vm_size, region, spot=True)
        if price is None:
            raise InputError(
                f"--price-region {trace_region}={region}: no {scenario.vm_size} spot price in "
                f"the {table.source} price table; give --prices FILE"
            )
        by_region[trace_region] = price
    return Prices(on_demand=on_demand, spot=spot, spot_by_region=by_region)


def check_fit(scenario: Scenario) -> None:
    """A workload that fits no pool: one replica needs more GPUs than a node has."""
    gpus = scenario.node_gpus()
    if scenario.gpus_per_replica > gpus:
        raise InputError(
            f"workload does not fit any pool: a replica needs {scenario.gpus_per_replica} GPUs, "
            f"a {scenario.vm_size} node has {gpus}"
        )

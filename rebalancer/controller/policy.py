"""A workload's placement policy: annotations on its Deployment or StatefulSet, and their schema.

Annotations, not a CRD: a policy is a handful of numbers and names that belong to one workload,
`kubectl annotate` sets them, operators that own Deployments (KServe, KAITO) pass annotations
through, and nothing has to be installed cluster-wide before the first one works. The schema is
this module (and `docs/placement.md`); a value outside it is refused as a whole, with every
problem named, and the last valid policy (recorded on the workload by the controller, under
`POLICY_IN_FORCE`) stays in force.

A workload with none of these annotations has no policy: it is placed as it always was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final

from rebalancer import pool_kind
from rebalancer.controller.risk import LEVELS
from rebalancer.controller.target import parse_target
from rebalancer.names import (
    AVAILABILITY_TARGET,
    FAILOVER_TO,
    MAX_RISK,
    MIN_ON_DEMAND,
    POLICY_IN_FORCE,
    POOLS,
    SPREAD,
)
from rebalancer.names import SPARE_REPLICAS as SPARE
from rebalancer.strict import shown, whole_number

POLICY_KEYS: Final = (
    MIN_ON_DEMAND, SPARE, POOLS, MAX_RISK, SPREAD, FAILOVER_TO, AVAILABILITY_TARGET,
)  # fmt: skip
SPREADS: Final = ("zone", "pool", "none")
FAILOVER_TARGETS: Final = ("on-demand", "spot")
MAX_REPLICAS: Final = 10_000
MAX_POOLS: Final = 64


@dataclass(frozen=True)
class Policy:
    min_on_demand: int = 0
    spare: int = 0
    pools: tuple[str, ...] = ()  # empty: every pool the pods can run on
    max_risk: str = "high"
    spread: str = "zone"
    failover_to: str = "on-demand"
    # "" or a percentage as written ("99.9"): the controller decides spares and on-demand
    target: str = ""

    @property
    def target_percent(self) -> float | None:
        return parse_target(self.target) if self.target else None

    def allows_pool(self, pool: str) -> bool:
        # A NodePool's name allows both its spot and its on-demand pool; `<nodepool>:spot` one.
        return not self.pools or pool in self.pools or pool_kind.policy_name(pool) in self.pools

    def accepts(self, level: str) -> bool:
        return LEVELS.index(level) <= LEVELS.index(self.max_risk)

    def to_json(self) -> str:
        data = asdict(self)
        data["pools"] = list(self.pools)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        """The controller's own record; ValueError for anything it would not have written."""
        if len(text) > 4096:
            raise ValueError("record larger than 4 KiB")
        try:
            data = json.loads(text)
        except ValueError:
            raise ValueError("not JSON") from None
        if isinstance(data, dict):
            data.pop("seal", None)  # checked where the snapshot is built (seal.py)
        if isinstance(data, dict):
            data.setdefault("target", "")  # written before availability targets
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise ValueError("not a policy record")
        pools = data["pools"]
        if not isinstance(pools, list) or not all(isinstance(p, str) for p in pools):
            raise ValueError("not a policy record")
        given = {
            MIN_ON_DEMAND: data["min_on_demand"],
            SPARE: data["spare"],
            MAX_RISK: data["max_risk"],
            SPREAD: data["spread"],
            FAILOVER_TO: data["failover_to"],
        }
        if pools:
            given[POOLS] = ",".join(pools)
        if data["target"] != "":
            given[AVAILABILITY_TARGET] = data["target"]
            if type(data["spare"]) is int and data["spare"] == 0:  # the target decides spares
                del given[SPARE]
        if not all(isinstance(v, str | int) and not isinstance(v, bool) for v in given.values()):
            raise ValueError("not a policy record")
        try:
            return parse({k: str(v) for k, v in given.items()})
        except PolicyError as error:
            raise ValueError(str(error)) from None


class PolicyError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def declared(annotations: Mapping[str, str]) -> bool:
    return any(key in annotations for key in POLICY_KEYS)


def parse(annotations: Mapping[str, str]) -> Policy:
    """The policy the annotations declare; PolicyError naming every problem."""
    problems: list[str] = []

    def count(key: str) -> int:
        text = annotations.get(key)
        if text is None:
            return 0
        try:
            return whole_number(text, high=MAX_REPLICAS)
        except ValueError as error:
            problems.append(f"{key}: {error}")
            return 0

    def word(key: str, allowed: tuple[str, ...], default: str) -> str:
        text = annotations.get(key)
        if text is None:
            return default
        if text.strip().lower() not in allowed:
            problems.append(f"{key}: {shown(text)} is not one of {', '.join(allowed)}")
            return default
        return text.strip().lower()

    pools: tuple[str, ...] = ()
    if POOLS in annotations:
        names = [p.strip() for p in annotations[POOLS].split(",") if p.strip()]
        bad = [p for p in names if not _pool_name(p)]
        if not names or bad or len(names) > MAX_POOLS:
            problems.append(
                f"{POOLS}: {shown(annotations[POOLS])} is not a comma-separated list of 1 to "
                f"{MAX_POOLS} agent pool or Karpenter NodePool names (a NodePool's may end "
                "in :spot or :on-demand)"
            )
        else:
            pools = tuple(sorted(set(names)))
    target = ""
    if AVAILABILITY_TARGET in annotations:
        try:
            target = f"{parse_target(annotations[AVAILABILITY_TARGET]):g}"
        except ValueError as error:
            problems.append(f"{AVAILABILITY_TARGET}: {error}")
        if SPARE in annotations:
            problems.append(f"{SPARE}: not with {AVAILABILITY_TARGET} (the target decides spares)")
    policy = Policy(
        min_on_demand=count(MIN_ON_DEMAND),
        spare=count(SPARE),
        pools=pools,
        max_risk=word(MAX_RISK, LEVELS, "high"),
        spread=word(SPREAD, SPREADS, "zone"),
        failover_to=word(FAILOVER_TO, FAILOVER_TARGETS, "on-demand"),
        target=target,
    )
    if problems:
        raise PolicyError(problems)
    return policy


def _pool_name(name: str) -> bool:
    # AKS: lower-case alphanumerics, 1-12 characters (Linux pools); a little room for others.
    # A Karpenter NodePool: a DNS name, optionally `:<capacity type>` (rebalancer/pool_kind.py).
    nodepool, capacity = pool_kind.split(name)
    if nodepool:
        return capacity in pool_kind.CAPACITY_TYPES and _pool_name(nodepool)
    bare = name.replace("-", "").replace(".", "")
    return 0 < len(name) <= 63 and name.isascii() and bare.isalnum()


@dataclass(frozen=True)
class InForce:
    """What a workload's annotations mean now: the policy in force and, if the declared one was
    refused, why (the last valid one stays in force)."""

    policy: Policy | None
    refused: str = ""  # the problems of the declared policy; "" when it was valid or absent


def in_force(annotations: Mapping[str, str]) -> InForce:
    if not declared(annotations):
        return InForce(None)
    try:
        return InForce(parse(annotations))
    except PolicyError as error:
        last = annotations.get(POLICY_IN_FORCE)
        kept = None
        if last is not None:
            try:
                kept = Policy.from_json(last)
            except ValueError:
                kept = None
        return InForce(kept, refused=str(error))

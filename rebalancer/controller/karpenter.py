"""Karpenter NodePools (`karpenter.sh/v1`, AKS node auto-provisioning) as the controller and the
doctor read them: what capacity types a NodePool may launch, the taints and labels its nodes get,
whether it makes GPU nodes and how many GPUs a node has, and the pools (`<nodepool>:<capacity
type>`) it allows, shaped as their nodes will look. Pure: parsed from the API's JSON, no client
models.

Not a model of Karpenter's scheduling: only what the fail-over check and the doctor's NodePool
checks need, read so that a finding is true (a NodePool whose GPUs cannot be told from its
requirements is not a GPU NodePool here, unless its nodes show GPUs) and a pool is one Karpenter
would launch nodes for (a NodePool being deleted or not Ready gives none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rebalancer import names, pool_kind
from rebalancer.azure import gpu_sizes
from rebalancer.controller.pools import Pool
from rebalancer.controller.scheduling import Taint

# Requirement keys that only a GPU size satisfies (karpenter-provider-azure's sku labels).
GPU_REQUIREMENT_KEYS = (
    "karpenter.azure.com/sku-gpu-count",
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.azure.com/sku-gpu-manufacturer",
)
# Azure N-series (NC, ND, NV): GPU VM sizes, by name or by karpenter.azure.com/sku-family "N".
GPU_SIZE = re.compile(r"^standard_n[cdv]", re.IGNORECASE)
GPU_SERIES = re.compile(r"^N[CDV]")
GPU_COUNT_KEY = "karpenter.azure.com/sku-gpu-count"
# Requirements that choose sizes by what they are: with one, the sizes a NodePool may launch are
# the table's sizes its requirements admit (`gpu_sizes`), and their GPUs are its nodes' GPUs.
SIZE_NAMING_KEYS = frozenset(
    {
        names.INSTANCE_TYPE_LABEL, gpu_sizes.SKU_NAME, gpu_sizes.SKU_FAMILY,
        gpu_sizes.SKU_SERIES, gpu_sizes.SKU_GPU_NAME,
    }
)  # fmt: skip
# What Karpenter's requirement operators mean for one size's label (absent: None).
NUMERIC_OPERATORS = {
    "Gt": lambda value, bound: value > bound,
    "Lt": lambda value, bound: value < bound,
    "Gte": lambda value, bound: value >= bound,
    "Lte": lambda value, bound: value <= bound,
}
# The capacity types a NodePool's parts are made for: reserved capacity needs a reservation that a
# NodePool's requirements do not show, so it is never a fail-over target here.
PART_CAPACITY_TYPES = (pool_kind.SPOT, pool_kind.ON_DEMAND)


# Karpenter's disruption reasons a budget may name (karpenter.sh/v1 `DisruptionReason`).
EMPTY, UNDERUTILIZED, DRIFTED = "Empty", "Underutilized", "Drifted"
# How long the fix lets an emptied node stay: a warm node for the next fail-over, as long as AKS's
# cluster autoscaler keeps one by default (`scale-down-unneeded-time`, docs/cost.md).
EMPTY_NODE_GRACE = "10m"
ZERO_NODES = re.compile(r"^0+%?$")


@dataclass(frozen=True)
class Disruption:
    """A NodePool's `spec.disruption`, with the CRD's defaults where a field is absent: what
    decides whether Karpenter removes its nodes once they are empty."""

    consolidation_policy: str = "WhenEmptyOrUnderutilized"
    consolidate_after: str = "0s"  # a duration, or "Never": consolidation off
    budgets: tuple[Mapping[str, Any], ...] = ({"nodes": "10%"},)

    @classmethod
    def from_json(cls, spec: Mapping[str, Any]) -> Disruption:
        disruption = spec.get("disruption") or {}
        budgets = disruption.get("budgets")
        return cls(
            consolidation_policy=str(
                disruption.get("consolidationPolicy") or cls.consolidation_policy
            ),
            consolidate_after=str(disruption.get("consolidateAfter") or cls.consolidate_after),
            budgets=cls.budgets
            if budgets is None
            else tuple(b for b in budgets if isinstance(b, dict)),
        )

    def keeps_empty_nodes(self) -> list[str]:
        """Why Karpenter never removes an empty node of the NodePool, [] when it does: its
        Emptiness method is off with `consolidateAfter: Never`, and a budget always active
        (no schedule) that allows 0 nodes for the reason Empty stops it (Karpenter takes the most
        restrictive active budget for each reason; a budget with no reasons covers them all)."""
        why = []
        if self.consolidate_after == "Never":
            why.append("consolidateAfter: Never")
        for budget in self.budgets:
            if _blocks_empty(budget):
                reasons = budget.get("reasons")
                covered = ", ".join(str(r) for r in reasons) if reasons else "every reason"
                why.append(f"budget nodes: {budget.get('nodes')!r} for {covered}, always active")
        return why

    def letting_empty_nodes_go(self) -> dict[str, Any]:
        """The `spec.disruption` merge patch that lets Karpenter remove empty nodes and changes
        nothing else it decides: consolidation back on for empty nodes only (WhenEmpty, so
        underused nodes are still left alone, as `Never` left them), and each blocking budget
        without Empty among its reasons (Underutilized and Drifted stay blocked; one that named
        Empty alone goes). Budgets are a whole list: a merge patch replaces it."""
        patch: dict[str, Any] = {}
        if self.consolidate_after == "Never":
            patch["consolidateAfter"] = EMPTY_NODE_GRACE
            if self.consolidation_policy != "WhenEmpty":
                patch["consolidationPolicy"] = "WhenEmpty"
        if any(_blocks_empty(b) for b in self.budgets):
            budgets = []
            for budget in self.budgets:
                if not _blocks_empty(budget):
                    budgets.append(dict(budget))
                    continue
                kept = [r for r in budget.get("reasons") or [UNDERUTILIZED, DRIFTED] if r != EMPTY]
                if kept:
                    budgets.append({**budget, "reasons": kept})
            patch["budgets"] = budgets
        return patch


def _blocks_empty(budget: Mapping[str, Any]) -> bool:
    """An always-active budget that allows no node for the reason Empty. Reasons absent: every
    reason; an empty list names none (Karpenter's `Reasons == nil` test)."""
    reasons = budget.get("reasons")
    return (
        budget.get("schedule") is None
        and budget.get("duration") is None
        and bool(ZERO_NODES.match(str(budget.get("nodes", ""))))
        and (reasons is None or EMPTY in reasons)
    )


@dataclass(frozen=True)
class NodePoolInfo:
    name: str
    uid: str
    capacity_types: tuple[str, ...]  # what it may launch, in Karpenter's order
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]  # the template's labels, plus its single-valued In requirements
    requirements: tuple[Mapping[str, Any], ...] = field(default=())  # as the API has them
    gpu: bool = False  # its requirements admit GPU sizes only
    # nvidia.com/gpu per node when its requirements say it (the sizes it names, or sku-gpu-count),
    # else 0: unknown.
    gpus: int = 0
    zones: tuple[str, ...] = ()  # the zones its requirements allow; (): any
    launches: bool = True  # not being deleted, and not reported not Ready by Karpenter
    disruption: Disruption = field(default_factory=Disruption)

    @property
    def spot_only(self) -> bool:
        return self.capacity_types == (pool_kind.SPOT,)

    def pool(self, capacity_type: str) -> str:
        return f"{self.name}{pool_kind.SEPARATOR}{capacity_type}"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodePoolInfo:
        meta = obj.get("metadata") or {}
        template = (obj.get("spec") or {}).get("template") or {}
        spec = template.get("spec") or {}
        requirements = tuple(
            r for r in spec.get("requirements") or [] if isinstance(r, dict) and "key" in r
        )
        labels = {
            str(k): str(v)
            for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
        }
        for requirement in requirements:
            values = requirement.get("values") or []
            if requirement.get("operator") == "In" and len(values) == 1:
                labels.setdefault(str(requirement["key"]), str(values[0]))
        name = str(meta.get("name", ""))
        labels[names.KARPENTER_NODEPOOL_LABEL] = name
        return cls(
            name=name,
            uid=str(meta.get("uid", "")),
            capacity_types=_capacity_types(requirements),
            taints=tuple(Taint.from_json(t) for t in spec.get("taints") or []),
            labels=labels,
            requirements=requirements,
            gpu=any(_gpu_only(r) for r in requirements),
            gpus=_gpu_count(requirements),
            zones=_zones(requirements),
            launches=not meta.get("deletionTimestamp") and _ready(obj) is not False,
            disruption=Disruption.from_json(obj.get("spec") or {}),
        )


def _capacity_types(requirements: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Karpenter's default without a capacity-type requirement is on-demand; reserved capacity
    counts only where a requirement names it."""
    own = [r for r in requirements if r.get("key") == names.KARPENTER_CAPACITY_TYPE_LABEL]
    if not own:
        return (pool_kind.ON_DEMAND,)
    allowed = set(pool_kind.CAPACITY_TYPES)
    reserved_named = False
    for r in own:
        values = {str(v) for v in r.get("values") or []}
        if r.get("operator") == "In":
            allowed &= values
            reserved_named |= "reserved" in values
        elif r.get("operator") == "NotIn":
            allowed -= values
    if not reserved_named:
        allowed.discard("reserved")
    return tuple(c for c in pool_kind.CAPACITY_TYPES if c in allowed)


def _gpu_count(requirements: Sequence[Mapping[str, Any]]) -> int:
    """The GPUs a replica may ask for and still fit a node of the NodePool; 0 when its
    requirements do not say. A NodePool that names its sizes (instance types, a SKU name, family,
    series or GPU name) has the GPUs of the sizes it admits (`_gpus_of_sizes`); else a
    sku-gpu-count requirement says it: the largest count an `In` allows (Karpenter picks, among
    the sizes allowed, one that fits the pod), one more than a `Gt`'s bound (the least it is sure
    of: no table bounds an open range)."""
    if any(r.get("key") in SIZE_NAMING_KEYS for r in requirements):
        return _gpus_of_sizes(requirements)
    counts = []
    for requirement in requirements:
        if requirement.get("key") != GPU_COUNT_KEY:
            continue
        values = [str(v) for v in requirement.get("values") or []]
        numbers = [int(v) for v in values if v.isdigit()]
        if requirement.get("operator") == "In" and numbers and len(numbers) == len(values):
            counts.append(max(numbers))
        elif requirement.get("operator") == "Gt" and len(numbers) == 1:
            counts.append(numbers[0] + 1)
    return min(counts) if counts else 0


def _gpus_of_sizes(requirements: Sequence[Mapping[str, Any]]) -> int:
    """GPUs per node of a NodePool that names its sizes: of the GPU sizes Azure has
    (`gpu_sizes.SIZES`), those every requirement on a size label admits, as Karpenter matches
    them. Karpenter launches, for a pending replica, a size among them that fits it, so a
    replica fits when the largest does. But when a requirement on another size property (memory,
    storage, an operator not known here) may rule out some of them, the fewest: a fail-over must
    not count on GPUs the sizes it may get lack. A size not in the table counts for nothing (0
    when no size is known: unknown, as before)."""
    judged = [r for r in requirements if r.get("key") in gpu_sizes.LABEL_KEYS]
    undecided = any(_size_requirement_unjudged(r) for r in requirements)
    counts = [
        size.gpus
        for size in gpu_sizes.SIZES
        if all(_admits(r, size.labels) is not False for r in judged)
    ]
    if not counts:
        return 0
    return min(counts) if undecided else max(counts)


def _admits(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """Whether a node with `labels` meets the requirement (Karpenter's operators); None when the
    operator is not one of them."""
    key, operator = str(requirement.get("key")), requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    value = labels.get(key)
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in NUMERIC_OPERATORS:
        if value is None or not value.isdigit() or len(values) != 1 or not values[0].isdigit():
            return False
        return bool(NUMERIC_OPERATORS[operator](int(value), int(values[0])))
    return None


def _size_requirement_unjudged(requirement: Mapping[str, Any]) -> bool:
    """A requirement on a property of the size that the table cannot judge: another sku label
    (memory, storage, networking), or an operator Karpenter's own list lacks."""
    key = str(requirement.get("key"))
    if key in gpu_sizes.LABEL_KEYS:
        return _admits(requirement, {}) is None
    return key.startswith(("karpenter.azure.com/sku-", "kubernetes.azure.com/sku-"))


def _zones(requirements: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    allowed: set[str] | None = None
    for requirement in requirements:
        if requirement.get("key") == names.ZONE_LABEL and requirement.get("operator") == "In":
            values = {str(v) for v in requirement.get("values") or []}
            allowed = values if allowed is None else allowed & values
    return tuple(sorted(allowed or ()))


def _ready(obj: Mapping[str, Any]) -> bool | None:
    """Karpenter's Ready condition on the NodePool (its node class resolved); None if absent,
    as on a NodePool Karpenter has not reconciled yet."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return {"True": True, "False": False}.get(str(condition.get("status")))
    return None


def _gpu_only(requirement: Mapping[str, Any]) -> bool:
    key, operator = requirement.get("key"), requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if key in GPU_REQUIREMENT_KEYS:
        if key == "karpenter.azure.com/sku-gpu-count":  # Gt n (n >= 0), or In counts above 0
            if operator == "Gt":
                return bool(values) and values[0].isdigit()
            return (
                operator == "In" and bool(values) and all(v.isdigit() and v != "0" for v in values)
            )
        return operator in ("In", "Exists")
    if key == "karpenter.azure.com/sku-family":
        return operator == "In" and bool(values) and all(v.upper() == "N" for v in values)
    if key in (names.INSTANCE_TYPE_LABEL, gpu_sizes.SKU_NAME):
        return operator == "In" and bool(values) and all(GPU_SIZE.match(v) for v in values)
    if key == gpu_sizes.SKU_SERIES:
        return operator == "In" and bool(values) and all(GPU_SERIES.match(v) for v in values)
    return False


def spot_only_patch(nodepool: NodePoolInfo) -> list[dict[str, Any]]:
    """The NodePool's requirements with on-demand allowed beside spot (a merge patch replaces
    the list, so every other requirement is kept as it is)."""
    kept = [
        dict(r)
        for r in nodepool.requirements
        if r.get("key") != names.KARPENTER_CAPACITY_TYPE_LABEL
    ]
    return [
        *kept,
        {
            "key": names.KARPENTER_CAPACITY_TYPE_LABEL,
            "operator": "In",
            "values": [pool_kind.SPOT, pool_kind.ON_DEMAND],
        },
    ]


def nodepool_pools(nodepools: Iterable[NodePoolInfo], live: Mapping[str, Pool]) -> dict[str, Pool]:
    """The spot and on-demand parts each NodePool allows, as their nodes will look: the NodePool's
    taints (`spec.template.spec.taints`: Karpenter adds no spot taint of its own), its template's
    labels and single-valued requirements (one zone, one size), and its GPUs per node: named in
    its requirements, else what the NodePool's nodes of another capacity type show (the same
    template, the same sizes), else 0, unknown (a GPU replica then does not fit: declaring the part
    says how many). They enter as declared pools do (`pools.with_declared`): a part with nodes is
    seen on them, and that wins."""
    parts: dict[str, Pool] = {}
    for nodepool in nodepools:
        if not nodepool.launches:
            continue
        seen = [
            live[nodepool.pool(c)].gpus_per_node
            for c in pool_kind.CAPACITY_TYPES
            if nodepool.pool(c) in live
        ]
        gpus = nodepool.gpus or max(seen, default=0)
        labels = dict(nodepool.labels)
        if len(nodepool.zones) == 1:
            labels[names.ZONE_LABEL] = nodepool.zones[0]
        for capacity in (c for c in PART_CAPACITY_TYPES if c in nodepool.capacity_types):
            name = nodepool.pool(capacity)
            parts[name] = Pool(
                name=name,
                spot=capacity == pool_kind.SPOT,
                taints=tuple(sorted(nodepool.taints, key=str)),
                labels={**labels, **pool_kind.labels_of(name)},
                nodes=(),
                gpus_per_node=gpus,
            )
    return parts

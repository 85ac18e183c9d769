"""Karpenter NodePools (`karpenter.sh/v1`, AKS node auto-provisioning) as the doctor reads them:
what capacity types a NodePool may launch, the taints and labels its nodes get, and whether it
makes GPU nodes. Pure: parsed from the API's JSON, no client models.

Not a model of Karpenter's scheduling: only what the doctor's NodePool checks need, read so that
a finding is true (a NodePool whose GPUs cannot be told from its requirements is not a GPU
NodePool here, unless its nodes show GPUs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rebalancer import names, pool_kind
from rebalancer.controller.scheduling import Taint

# Requirement keys that only a GPU size satisfies (karpenter-provider-azure's sku labels).
GPU_REQUIREMENT_KEYS = (
    "karpenter.azure.com/sku-gpu-count",
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.azure.com/sku-gpu-manufacturer",
)
# Azure N-series (NC, ND, NV): GPU VM sizes, by name or by karpenter.azure.com/sku-family "N".
GPU_SIZE = re.compile(r"^standard_n[cdv]", re.IGNORECASE)


@dataclass(frozen=True)
class NodePoolInfo:
    name: str
    uid: str
    capacity_types: tuple[str, ...]  # what it may launch, in Karpenter's order
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]  # the template's labels, plus its single-valued In requirements
    requirements: tuple[Mapping[str, Any], ...] = field(default=())  # as the API has them
    gpu: bool = False  # its requirements admit GPU sizes only

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
    if key == names.INSTANCE_TYPE_LABEL:
        return operator == "In" and bool(values) and all(GPU_SIZE.match(v) for v in values)
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

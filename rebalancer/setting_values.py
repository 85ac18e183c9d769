"""Values settings are made of, and their parsers: selectors, windows, taints, declared pools.

Shared by the settings classes (rebalancer.config, rebalancer.controller.settings) and the
planner's own settings types, which validate with them; no I/O.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rebalancer import names, pool_kind

# Kubernetes label values and kubectl's taint form `key[=value]:Effect` (the chart's
# values.schema.json has the same patterns, so helm refuses what the controller would).
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# An agent pool's name, or a Karpenter NodePool's with its capacity type (rebalancer/pool_kind.py).
POOL_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(:(spot|on-demand|reserved))?$"
TAINT_PATTERN = (
    r"^([A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?)"
    r"(=([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)?"
    r":(NoSchedule|PreferNoSchedule|NoExecute)$"
)


def parse_window(text: str) -> tuple[int, int] | None:
    """'22:00-06:00' (UTC) -> minutes of the day; '' -> None (any time)."""
    if not text.strip():
        return None
    try:
        start, end = (part.strip() for part in text.split("-"))
        minutes = []
        for part in (start, end):
            hours, mins = part.split(":")
            if not (0 <= int(hours) < 24 and 0 <= int(mins) < 60):
                raise ValueError
            minutes.append(int(hours) * 60 + int(mins))
    except ValueError:
        raise ValueError(f"window {text!r}: use HH:MM-HH:MM (UTC)") from None
    return minutes[0], minutes[1]


def parse_selector(text: str) -> dict[str, str | None]:
    """'app=llm,tier' -> {'app': 'llm', 'tier': None}: equality and existence terms only."""
    selector: dict[str, str | None] = {}
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        key, sep, value = term.partition("=")
        if not key.strip() or any(c in term for c in "!()<> "):
            raise ValueError(f"selector term {term!r}: use key=value or key")
        selector[key.strip()] = value.strip() if sep else None
    return selector


def parse_taint(text: str) -> tuple[str, str, str]:
    """'sku=gpu:NoSchedule' (kubectl's form) -> ('sku', 'gpu', 'NoSchedule')."""
    match = re.fullmatch(TAINT_PATTERN, text)
    if match is None:
        raise ValueError(
            f"taint {text!r}: use key=value:Effect or key:Effect "
            "(Effect: NoSchedule, PreferNoSchedule or NoExecute)"
        )
    return match.group(1), match.group(4) or "", match.group(6)


class PoolShape(BaseModel):
    """A node pool as its Nodes would show it, declared for pools that may have none (the
    cluster autoscaler at min 0, a Karpenter NodePool with no node yet): the controller cannot
    see the taints and labels of a pool without Nodes, so it is told them. A NodePool's pool is
    named `<nodepool>:<capacity type>`, e.g. `gpu:on-demand`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80, pattern=POOL_NAME_PATTERN)
    spot: bool = False  # a spot pool is never a fail-over target
    gpus: int = Field(0, ge=0)  # allocatable nvidia.com/gpu per node
    labels: dict[str, str] = {}  # besides the pool's own (pool_kind.labels_of), always there
    taints: list[str] = []  # kubectl's form, key=value:Effect

    @field_validator("taints")
    @classmethod
    def _taints(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_taint(text)
        return value

    @model_validator(mode="after")
    def _pool_label_is_the_name(self) -> PoolShape:
        for key, value in pool_kind.labels_of(self.name).items():
            label = self.labels.get(key, value)
            if label != value:
                what = "capacity type" if key == names.KARPENTER_CAPACITY_TYPE_LABEL else "name"
                raise ValueError(f"pool {self.name}: {key} is the pool's {what}, not {label}")
        _, capacity = pool_kind.split(self.name)
        if capacity and self.spot != (capacity == pool_kind.SPOT):
            raise ValueError(
                f"pool {self.name}: spot is {str(capacity == pool_kind.SPOT).lower()} for "
                f"capacity type {capacity}"
            )
        return self

"""Node reads and writes that do not fight other writers.

Conditions go through the status subresource with a strategic merge patch (conditions merge on
`type`, so other conditions, such as those of AKS's node-problem-detector, are left alone);
annotations and labels through a JSON merge patch of just our keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from rebalancer.kube.client import MERGE, STRATEGIC, KubeClient


@dataclass(frozen=True)
class NodeView:
    name: str
    provider_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)  # by type
    unschedulable: bool = False

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> NodeView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions = {
            str(c.get("type")): c
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type")
        }
        return cls(
            name=str(meta.get("name", "")),
            provider_id=str(spec.get("providerID") or ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            conditions=conditions,
            unschedulable=bool(spec.get("unschedulable", False)),
        )


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"


class NodeApi:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get(self, name: str) -> NodeView:
        return NodeView.from_json(await self._client.request("GET", _node_path(name)))

    async def set_annotations(self, name: str, annotations: dict[str, str | None]) -> None:
        """Set (or with None, remove) only these annotation keys."""
        await self._client.request(
            "PATCH",
            _node_path(name),
            body={"metadata": {"annotations": annotations}},
            content_type=MERGE,
        )

    async def set_condition(self, name: str, condition: dict[str, Any]) -> None:
        """Write one condition by type on the status subresource, leaving the others alone."""
        await self._client.request(
            "PATCH",
            _node_path(name) + "/status",
            body={"status": {"conditions": [condition]}},
            content_type=STRATEGIC,
        )

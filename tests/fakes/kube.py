"""A minimal Kubernetes API for Nodes, for the agent's unit-level tests.

It speaks real JSON over HTTP on 127.0.0.1 and applies the two patches the agent sends (merge
patch of annotations; strategic merge patch of status.conditions keyed by type), records every
request, and can fail the next requests with a chosen status and a `Status` body. Like the real
API server it refuses (422 Invalid) a Node whose annotations total more than 256 KiB. The cluster
emulator (rebalancer_sim) is the full version; this one exists to inject faults precisely.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

# apimachinery's TotalAnnotationSizeLimitB: keys and values together, in bytes.
TOTAL_ANNOTATION_BYTES = 256 * 1024


@dataclass
class Recorded:
    method: str
    path: str
    content_type: str
    body: Any


@dataclass
class FakeNodeApi:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    failures: list[int] = field(default_factory=list)  # statuses for the next requests
    resource_version: int = 1

    def add_node(self, name: str, provider_id: str = "", **meta: Any) -> None:
        self.resource_version += 1
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "resourceVersion": str(self.resource_version),
                "annotations": dict(meta.get("annotations", {})),
                "labels": dict(meta.get("labels", {})),
            },
            "spec": {"providerID": provider_id},
            "status": {"conditions": list(meta.get("conditions", []))},
        }

    def condition(self, node: str, type_: str) -> dict[str, Any] | None:
        for condition in self.nodes[node]["status"]["conditions"]:
            if condition["type"] == type_:
                return dict(condition)
        return None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/v1/nodes/{name}", self._node)
        app.router.add_route("*", "/api/v1/nodes/{name}/status", self._node)
        return app

    async def _node(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append(
            Recorded(request.method, request.path, request.content_type, copy.deepcopy(body))
        )
        if self.failures:
            status = self.failures.pop(0)
            return _status(status, "Injected failure")
        name = request.match_info["name"]
        node = self.nodes.get(name)
        if node is None:
            return _status(404, f'nodes "{name}" not found', reason="NotFound")
        if request.method == "GET":
            return web.json_response(node)
        if request.method != "PATCH":
            return _status(405, "method not allowed", reason="MethodNotAllowed")
        if request.path.endswith("/status"):
            if request.content_type != "application/strategic-merge-patch+json":
                return _status(415, "unsupported patch type")
            conditions = node["status"]["conditions"]
            for new in body["status"]["conditions"]:
                conditions[:] = [c for c in conditions if c["type"] != new["type"]] + [new]
        else:
            if request.content_type != "application/merge-patch+json":
                return _status(415, "unsupported patch type")
            annotations = dict(node["metadata"]["annotations"])
            for key, value in body["metadata"]["annotations"].items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
            if size > TOTAL_ANNOTATION_BYTES:
                return _status(
                    422,
                    f'Node "{name}" is invalid: metadata.annotations: Too long: '
                    f"must have at most {TOTAL_ANNOTATION_BYTES} bytes",
                    reason="Invalid",
                )
            node["metadata"]["annotations"] = annotations
        self.resource_version += 1
        node["metadata"]["resourceVersion"] = str(self.resource_version)
        return web.json_response(node)


def _status(code: int, message: str, reason: str = "InternalError") -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {"token": "fake-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path

"""Limits the real API server enforces and the product depends on (issue 18, item 10).

The total size of one object's annotations (keys and values, UTF-8 bytes) is at most 256 KiB:
apimachinery's `ValidateAnnotations` refuses more with 422 Invalid, on create and on every
update, PUT or PATCH of any kind. The agent's annotation on a Node near that limit is the case the
product must survive (its write is refused there). Both backends: the emulator must answer as
kube-apiserver v1.34 does.
"""

from __future__ import annotations

from typing import Any

import pytest

from .backend import Backend, eventually

LIMIT = 256 * 1024
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
TOO_LONG = "metadata.annotations: Too long: may not be more than 262144 bytes"


def filler(key: str, total: int) -> dict[str, str]:
    """One annotation whose key and value together are `total` bytes (the value is ASCII)."""
    return {key: "x" * (total - len(key.encode()))}


async def _with_ttl(backend: Backend, path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = await backend.ok("GET", path)
    return (
        node if "node.alpha.kubernetes.io/ttl" in node["metadata"].get("annotations", {}) else None
    )


def refused(status: int, body: Any, kind: str, name: str) -> bool:
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert body["message"] == f'{kind} "{name}" is invalid: {TOO_LONG}'
    # Upstream repeats the cause once per validation that checks the metadata (4 times for a Node
    # update on v1.34); the emulator says it once.
    causes = {(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]}
    assert causes == {("FieldValueTooLong", "metadata.annotations", TOO_LONG.split(": ", 1)[1])}
    return True


async def test_create_refuses_annotations_over_256_kib(backend: Backend) -> None:
    path = backend.ns_path("configmaps")
    at_limit = {"metadata": {"name": "at-limit", "annotations": filler("a", LIMIT)}}
    assert (await backend.http("POST", path, body=at_limit))[0] == 201
    over = {"metadata": {"name": "over", "annotations": filler("a", LIMIT + 1)}}
    status, body, _ = await backend.http("POST", path, body=over)
    assert refused(status, body, "ConfigMap", "over")
    # Bytes, not characters: 2-byte characters count twice.
    wide = {"metadata": {"name": "wide", "annotations": {"a": "é" * (LIMIT // 2)}}}
    status, body, _ = await backend.http("POST", path, body=wide)
    assert refused(status, body, "ConfigMap", "wide")
    assert (await backend.http("GET", backend.ns_path("configmaps", "over")))[0] == 404


@pytest.mark.parametrize("how", ["put", "merge", "strategic", "json-patch"])
async def test_every_update_refuses_annotations_over_256_kib(backend: Backend, how: str) -> None:
    """The write the agent makes: one more annotation on a Node whose annotations are near the
    limit. Refused whole; the Node keeps what it had."""
    node = await backend.create_node("full")
    name = node["metadata"]["name"]
    path = f"/api/v1/nodes/{name}"
    if backend.real:  # kube-controller-manager's TTL controller annotates a new Node: let it
        node = await eventually(lambda: _with_ttl(backend, path), within=30, message="ttl")
    existing = node["metadata"].get("annotations") or {}
    used = sum(len(k.encode()) + len(v.encode()) for k, v in existing.items())
    near = filler("example.com/bulk", LIMIT - used - 100)
    await backend.ok("PATCH", path, body={"metadata": {"annotations": near}}, content_type=MERGE)
    extra = {"spot-rebalancer.io/notice": "y" * 100}  # 100 + its key: over by the key's length
    if how == "put":
        for _ in range(5):  # a controller may write the new Node between our GET and PUT: 409
            current = await backend.ok("GET", path)
            current["metadata"]["annotations"].update(extra)
            status, body, _ = await backend.http("PUT", path, body=current)
            if status != 409:
                break
    elif how == "json-patch":
        patch = [{"op": "add", "path": "/metadata/annotations/spot-rebalancer.io~1notice",
                  "value": extra["spot-rebalancer.io/notice"]}]  # fmt: skip
        status, body, _ = await backend.http("PATCH", path, body=patch, content_type=JSON_PATCH)
    else:
        status, body, _ = await backend.http(
            "PATCH",
            path,
            body={"metadata": {"annotations": extra}},
            content_type=MERGE if how == "merge" else STRATEGIC,
        )
    assert refused(status, body, "Node", name)
    annotations = (await backend.ok("GET", path))["metadata"]["annotations"]
    assert "spot-rebalancer.io/notice" not in annotations and annotations.items() >= near.items()
    # Exactly at the limit is allowed.
    fits = {"spot-rebalancer.io/notice": "y" * (100 - len("spot-rebalancer.io/notice"))}
    await backend.ok("PATCH", path, body={"metadata": {"annotations": fits}}, content_type=MERGE)

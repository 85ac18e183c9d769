"""PATCH semantics, as tables: strategic merge keys and directives, JSON merge, JSON patch."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer.sim.patch import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    apply,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from rebalancer.sim.status import ApiError

POD: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "finalizers": ["a", "b"],
        "ownerReferences": [{"uid": "u1", "name": "rs1"}, {"uid": "u2", "name": "rs2"}],
    },
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "v1",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 80, "name": "http"}],
            },
            {"name": "sidecar", "image": "s1"},
        ],
        "tolerations": [{"key": "a", "operator": "Exists"}],
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "True"},
        ]
    },
}


@pytest.mark.parametrize(
    ("patch", "path", "expected"),
    [
        # containers merge by name; fields inside merge too
        (
            {"spec": {"containers": [{"name": "app", "image": "v2"}]}},
            ("spec", "containers"),
            [
                {
                    "name": "app",
                    "image": "v2",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "name": "http"}],
                },
                {"name": "sidecar", "image": "s1"},
            ],
        ),
        # env merges by name inside a container
        (
            {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}},
            ("spec", "containers", 0, "env"),
            [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        ),
        # $patch: delete removes by merge key
        (
            {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}},
            ("spec", "containers", -1, "name"),
            "app",
        ),
        # tolerations have no merge key upstream: replaced
        (
            {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}},
            ("spec", "tolerations"),
            [{"key": "b", "operator": "Exists"}],
        ),
        # conditions merge by type
        (
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            ("status", "conditions"),
            [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        ),
        # ownerReferences merge by uid
        (
            {"metadata": {"ownerReferences": [{"uid": "u2", "name": "renamed"}]}},
            ("metadata", "ownerReferences", 1, "name"),
            "renamed",
        ),
        # finalizers: a merged set; $deleteFromPrimitiveList removes
        (
            {"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]}},
            ("metadata", "finalizers"),
            ["b", "c"],
        ),
        # volumes merge by name; null deletes a map key
        (
            {"spec": {"volumes": [{"name": "cache", "emptyDir": {}}], "tolerations": None}},
            ("spec", "volumes", -1, "name"),
            "cache",
        ),
        # $patch: replace on a list item replaces the list
        (
            {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}},
            ("spec", "containers"),
            [{"name": "only", "image": "x"}],
        ),
        # $setElementOrder is accepted (ordering hint)
        (
            {
                "status": {
                    "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
                    "conditions": [{"type": "Ready", "status": "Unknown"}],
                }
            },
            ("status", "conditions", 0, "status"),
            "Unknown",
        ),
    ],
)
def test_strategic_merge(patch: dict[str, Any], path: tuple[Any, ...], expected: Any) -> None:
    result: Any = strategic_merge_patch(POD, patch)
    for part in path:
        result = result[part]
    assert result == expected
    assert POD["spec"]["containers"][0]["image"] == "v1"  # the input is not changed


def test_strategic_merge_node_taints_are_replaced() -> None:
    node = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    patched = strategic_merge_patch(
        node, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}
    )
    assert patched["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]


def test_strategic_merge_without_merge_key_value_is_400() -> None:
    with pytest.raises(ApiError) as caught:
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}})
    assert caught.value.code == 400


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    patched = merge_patch(POD, {"spec": {"containers": [{"name": "x"}]}, "status": None})
    assert patched["spec"]["containers"] == [{"name": "x"}]
    assert "status" not in patched


@pytest.mark.parametrize(
    ("operations", "check"),
    [
        (
            [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}],
            lambda d: d["metadata"]["labels"] == {"a": "b"},
        ),
        (
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "z"}],
            lambda d: d["metadata"]["finalizers"] == ["a", "b", "z"],
        ),
        (
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            lambda d: d["metadata"]["finalizers"] == ["b"],
        ),
        (
            [{"op": "replace", "path": "/spec/containers/1/image", "value": "s2"}],
            lambda d: d["spec"]["containers"][1]["image"] == "s2",
        ),
        (
            [{"op": "move", "from": "/metadata/finalizers", "path": "/metadata/moved"}],
            lambda d: "finalizers" not in d["metadata"] and d["metadata"]["moved"] == ["a", "b"],
        ),
        (
            [{"op": "copy", "from": "/metadata/name", "path": "/metadata/generateName"}],
            lambda d: d["metadata"]["generateName"] == "p",
        ),
        (
            [
                {"op": "test", "path": "/metadata/name", "value": "p"},
                {"op": "add", "path": "/metadata/x~1y", "value": 1},
            ],
            lambda d: d["metadata"]["x/y"] == 1,
        ),
    ],
)
def test_json_patch(operations: list[dict[str, Any]], check: Any) -> None:
    assert check(json_patch(POD, operations))


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "test", "path": "/metadata/name", "value": "q"}],
        [{"op": "remove", "path": "/metadata/nothing"}],
        [{"op": "replace", "path": "/spec/containers/9", "value": {}}],
    ],
)
def test_json_patch_that_does_not_apply_is_422(operations: list[dict[str, Any]]) -> None:
    with pytest.raises(ApiError) as caught:
        json_patch(POD, operations)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")


def test_apply_dispatches_on_media_type() -> None:
    body = {"metadata": {"labels": {"a": "1"}}}
    for media in (STRATEGIC_MERGE_PATCH, MERGE_PATCH, f"{MERGE_PATCH}; charset=utf-8"):
        assert apply(POD, media, body)["metadata"]["labels"] == {"a": "1"}
    assert apply(POD, JSON_PATCH, [])["metadata"]["name"] == "p"
    with pytest.raises(ApiError) as caught:
        apply(POD, "application/xml", body)
    assert caught.value.code == 415

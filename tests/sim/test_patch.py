"""PATCH semantics through the API, as tables: strategic merge keys, directives and the order of
merged lists, JSON merge, JSON patch. Both backends (see backend.py).

Most cases patch a PodTemplate (pod spec fields under `template.spec`, and no controller acts on
it); conditions are patched on a Pod nobody schedules (`schedulerName` of no scheduler), through
its status subresource.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .backend import Backend

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

Extract = Callable[[dict[str, Any]], Any]


def _template(owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": "p",
            "labels": {"a": "1"},
            "finalizers": ["example.com/a", "example.com/b"],
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": o["metadata"]["name"],
                    "uid": o["metadata"]["uid"],
                }
                for o in owners
            ],
        },
        "template": {
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
            }
        },
    }


async def _patched_template(
    backend: Backend, patch: Any, content_type: str = STRATEGIC
) -> tuple[int, Any]:
    # Real owners: the garbage collector deletes objects whose owners do not exist.
    owners = [
        await backend.create("configmaps", {"metadata": {"name": f"owner-{i}"}}) for i in (1, 2)
    ]
    await backend.create("podtemplates", _template(owners))
    status, body, _ = await backend.http(
        "PATCH", backend.ns_path("podtemplates", "p"), body=patch, content_type=content_type
    )
    return status, body


def _names(items: list[dict[str, Any]]) -> list[str]:
    return [item["name"] for item in items]


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["template"]["spec"]
    return spec


def _containers(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["name"], c["image"]) for c in _spec(obj)["containers"]]


@pytest.mark.parametrize(
    ("patch", "extract", "expected"),
    [
        pytest.param(
            {"template": {"spec": {"containers": [{"name": "app", "image": "v2"}]}}},
            lambda o: (_containers(o), _names(_spec(o)["containers"][0]["env"])),
            ([("app", "v2"), ("sidecar", "s1")], ["A"]),
            id="containers-merge-by-name-fields-inside-too",
        ),
        pytest.param(
            {
                "template": {
                    "spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "2"}]}]}
                }
            },
            lambda o: _names(_spec(o)["containers"][0]["env"]),
            ["B", "A"],  # items new to the list come before the ones only the server had
            id="env-merges-by-name-new-first",
        ),
        pytest.param(
            {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}},
            _containers,
            [("app", "v1")],
            id="patch-delete-by-merge-key",
        ),
        pytest.param(
            {"template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}},
            lambda o: _spec(o)["tolerations"],
            [{"key": "b", "operator": "Exists"}],
            id="tolerations-have-no-merge-key-replaced",
        ),
        pytest.param(
            {
                "template": {
                    "spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}
                }
            },
            _containers,
            [("only", "x")],
            id="patch-replace-replaces-the-list",
        ),
        pytest.param(
            {
                "template": {
                    "spec": {"volumes": [{"name": "cache", "emptyDir": {}}], "tolerations": None}
                }
            },
            lambda o: (_names(_spec(o)["volumes"]), "tolerations" in _spec(o)),
            (["cache", "data"], False),
            id="volumes-merge-by-name-null-deletes",
        ),
        pytest.param(
            {
                "metadata": {
                    "finalizers": ["example.com/c"],
                    "$deleteFromPrimitiveList/finalizers": ["example.com/a"],
                }
            },
            lambda o: o["metadata"]["finalizers"],
            ["example.com/c", "example.com/b"],
            id="finalizers-merged-set-delete-from-primitive-list",
        ),
    ],
)
async def test_strategic_merge(
    backend: Backend, patch: dict[str, Any], extract: Extract, expected: Any
) -> None:
    status, body = await _patched_template(backend, patch)
    assert status == 200, body
    assert extract(body) == expected


async def test_strategic_merge_of_owner_references_by_uid(backend: Backend) -> None:
    owner = await backend.create("configmaps", {"metadata": {"name": "owner-3"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner-3",
        "uid": owner["metadata"]["uid"],
    }
    status, body = await _patched_template(backend, {"metadata": {"ownerReferences": [reference]}})
    assert status == 200, body
    assert [r["name"] for r in body["metadata"]["ownerReferences"]] == [
        "owner-3",
        "owner-1",
        "owner-2",
    ]


async def test_strategic_merge_without_merge_key_value_is_500(backend: Backend) -> None:
    status, body = await _patched_template(
        backend, {"template": {"spec": {"containers": [{"image": "x"}]}}}
    )
    assert status == 500  # upstream's strategic merge reports this as an internal error
    assert "reason" not in body
    assert body["message"] == "map: map[image:x] does not contain declared merge key: name"


async def test_merge_patch_replaces_lists_and_deletes_nulls(backend: Backend) -> None:
    status, body = await _patched_template(
        backend,
        {
            "metadata": {"labels": None},
            "template": {"spec": {"containers": [{"name": "x", "image": "x"}]}},
        },
        MERGE_PATCH,
    )
    assert status == 200, body
    assert _containers(body) == [("x", "x")]
    assert "labels" not in body["metadata"]


# ---- conditions: a Pod's status ----------------------------------------------------------------


async def _pod_with_conditions(backend: Backend) -> str:
    await backend.create(
        "pods",
        {
            "metadata": {"name": "unscheduled"},
            "spec": {
                "schedulerName": "no-such-scheduler",  # nobody binds it, no kubelet runs it
                "containers": [{"name": "app", "image": "v1"}],
            },
        },
    )
    path = backend.ns_path("pods", "unscheduled/status")
    conditions = [
        {"type": "Ready", "status": "False"},
        {"type": "PodScheduled", "status": "True"},
    ]
    await backend.ok(
        "PATCH",
        path,
        body={"status": {"conditions": conditions}},
        content_type=MERGE_PATCH,
    )
    return path


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        pytest.param(
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            [("Ready", "True"), ("PodScheduled", "True")],
            id="conditions-merge-by-type",
        ),
        pytest.param(
            {"status": {"conditions": [{"type": "example.com/New", "status": "True"}]}},
            [("example.com/New", "True"), ("Ready", "False"), ("PodScheduled", "True")],
            id="new-condition-first",
        ),
        pytest.param(
            {
                "status": {
                    "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
                    "conditions": [{"type": "Ready", "status": "Unknown"}],
                }
            },
            [("PodScheduled", "True"), ("Ready", "Unknown")],
            id="set-element-order",
        ),
    ],
)
async def test_strategic_merge_of_conditions(
    backend: Backend, patch: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    path = await _pod_with_conditions(backend)
    status, body, _ = await backend.http("PATCH", path, body=patch, content_type=STRATEGIC)
    assert status == 200, body
    assert [(c["type"], c["status"]) for c in body["status"]["conditions"]] == expected


# ---- JSON patch ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operations", "extract", "expected"),
    [
        pytest.param(
            [{"op": "add", "path": "/metadata/labels", "value": {"b": "2"}}],
            lambda o: o["metadata"]["labels"],
            {"b": "2"},
            id="add-replaces-a-map",
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/z"}],
            lambda o: o["metadata"]["finalizers"],
            ["example.com/a", "example.com/b", "example.com/z"],
            id="add-appends",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            lambda o: o["metadata"]["finalizers"],
            ["example.com/b"],
            id="remove-by-index",
        ),
        pytest.param(
            [{"op": "replace", "path": "/template/spec/containers/1/image", "value": "s2"}],
            _containers,
            [("app", "v1"), ("sidecar", "s2")],
            id="replace",
        ),
        pytest.param(
            [
                {"op": "add", "path": "/metadata/annotations", "value": {}},
                {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/annotations/a"},
            ],
            lambda o: (o["metadata"].get("labels"), o["metadata"]["annotations"]),
            (None, {"a": "1"}),  # an empty map is left out, like every omitempty field
            id="move",
        ),
        pytest.param(
            [{"op": "copy", "from": "/metadata/name", "path": "/metadata/generateName"}],
            lambda o: o["metadata"]["generateName"],
            "p",
            id="copy",
        ),
        pytest.param(
            [
                {"op": "test", "path": "/metadata/name", "value": "p"},
                {"op": "add", "path": "/metadata/labels/x~1y", "value": "1"},
            ],
            lambda o: o["metadata"]["labels"],
            {"a": "1", "x/y": "1"},
            id="test-then-add-escaped",
        ),
    ],
)
async def test_json_patch(
    backend: Backend, operations: list[dict[str, Any]], extract: Extract, expected: Any
) -> None:
    status, body = await _patched_template(backend, operations, JSON_PATCH)
    assert status == 200, body
    assert extract(body) == expected


@pytest.mark.parametrize(
    "operations",
    [
        pytest.param([{"op": "test", "path": "/metadata/name", "value": "q"}], id="test-fails"),
        pytest.param([{"op": "remove", "path": "/metadata/nothing"}], id="remove-missing"),
        pytest.param(
            [{"op": "replace", "path": "/template/spec/containers/9", "value": {}}],
            id="replace-out-of-range",
        ),
    ],
)
async def test_json_patch_that_does_not_apply_is_422(
    backend: Backend, operations: list[dict[str, Any]]
) -> None:
    status, body = await _patched_template(backend, operations, JSON_PATCH)
    assert status == 422
    assert body == {  # which operation failed and why is not told
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }


async def test_patch_media_types(backend: Backend) -> None:
    path = backend.ns_path("configmaps", "m")
    await backend.create("configmaps", {"metadata": {"name": "m"}})
    for index, media in enumerate((STRATEGIC, MERGE_PATCH, f"{MERGE_PATCH}; charset=utf-8")):
        body = {"metadata": {"labels": {"n": str(index)}}}
        status, patched, _ = await backend.http("PATCH", path, body=body, content_type=media)
        assert (status, patched["metadata"]["labels"]) == (200, {"n": str(index)})
    status, patched, _ = await backend.http("PATCH", path, body=[], content_type=JSON_PATCH)
    assert (status, patched["metadata"]["name"]) == (200, "m")
    status, error, _ = await backend.http(
        "PATCH", path, body={"metadata": {}}, content_type="application/xml"
    )
    assert (status, error["reason"]) == (415, "UnsupportedMediaType")

"""The real kubectl binary against both backends: what an operator would type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .backend import Backend
from .conftest import eventually
from .test_api import POLICY, _container, _deployment, _pdb, _ready_inference


async def _node(backend: Backend, name: str) -> dict[str, Any]:
    node: dict[str, Any] = await backend.ok("GET", f"/api/v1/nodes/{name}")
    return node


async def test_get_nodes_and_pods_as_json(backend: Backend) -> None:
    code, out = await backend.kubectl("get", "nodes", "-o", "json")
    assert code == 0, out
    nodes = json.loads(out)
    assert nodes["kind"] == "List"
    spot = [
        n
        for n in nodes["items"]
        if n["metadata"]["labels"].get("kubernetes.azure.com/scalesetpriority") == "spot"
    ]
    assert len(spot) == 3
    await _ready_inference(backend)
    code, out = await backend.kubectl("get", "pods", "-o", "json", "-l", "app=inference")
    assert code == 0, out
    assert len(json.loads(out)["items"]) == 3
    code, out = await backend.kubectl("get", "nodes")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]  # server-side Table
    assert len(rows) == len(nodes["items"])
    assert all(row.split()[1] == "Ready" for row in rows)


async def test_cordon_uncordon(backend: Backend) -> None:
    name = (await backend.create_node("cordon"))["metadata"]["name"]
    code, out = await backend.kubectl("cordon", name)
    assert (code, out.strip()) == (0, f"node/{name} cordoned")
    assert (await _node(backend, name))["spec"]["unschedulable"] is True
    code, out = await backend.kubectl("cordon", name)
    assert (code, out.strip()) == (0, f"node/{name} already cordoned")
    code, out = await backend.kubectl("uncordon", name)
    assert (code, out.strip()) == (0, f"node/{name} uncordoned")
    assert not (await _node(backend, name))["spec"].get("unschedulable")


def _agent(spec: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": "node-agent"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [dict(_container(), name="agent")], **spec},
            },
        },
    }


async def test_drain_blocked_by_pdb_then_allowed(backend: Backend) -> None:
    name = (await backend.create_node("drain", run_pods=True))["metadata"]["name"]
    own = backend.on_own_node(name)
    deployment = _deployment(replicas=2)
    deployment["spec"]["template"]["spec"].update(own)
    await backend.create("deployments", deployment, group="apps/v1")
    await backend.create("daemonsets", _agent(own), group="apps/v1")
    await backend.create("poddisruptionbudgets", _pdb(maxUnavailable=0), group=POLICY)
    await backend.wait_ready("app=inference", 2)
    await backend.wait_ready("app=node-agent", 1)
    flags = ("--ignore-daemonsets", "--delete-emptydir-data")
    code, out = await backend.kubectl("drain", name, *flags, "--timeout=2s")
    assert code != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in out
    assert "global timeout reached" in out
    assert len(await backend.ready_pods("app=inference")) == 2
    await backend.ok(
        "PATCH",
        backend.ns_path("poddisruptionbudgets", "inference", group=POLICY),
        body={"spec": {"maxUnavailable": 2}},
        content_type="application/merge-patch+json",
    )
    code, out = await backend.kubectl("drain", name, *flags, "--timeout=20s", limit_seconds=30)
    assert code == 0, out
    assert f"node/{name} drained" in out
    assert f"ignoring DaemonSet-managed Pods: {backend.namespace}/node-agent-" in out
    left = await backend.pods(fieldSelector=f"spec.nodeName={name}")
    assert [p["metadata"]["labels"]["app"] for p in left] == ["node-agent"]


async def test_scale_annotate_taint(backend: Backend) -> None:
    await _ready_inference(backend)
    code, out = await backend.kubectl("scale", "deployment", "inference", "--replicas=1")
    assert (code, out.strip()) == (0, "deployment.apps/inference scaled")

    async def one_left() -> bool:
        pods = await backend.pods(labelSelector="app=inference")
        return len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 1

    await eventually(one_left, within=10, message="one replica left")
    name = (await backend.create_node("taint"))["metadata"]["name"]
    code, out = await backend.kubectl("annotate", "node", name, "example.com/owner=team-a")
    assert code == 0, out
    annotations = (await _node(backend, name))["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "team-a"
    code, out = await backend.kubectl("taint", "node", name, "dedicated=infra:NoSchedule")
    assert (code, out.strip()) == (0, f"node/{name} tainted")
    taints = (await _node(backend, name))["spec"]["taints"]
    assert {"key": "dedicated", "value": "infra", "effect": "NoSchedule"} in taints
    code, out = await backend.kubectl("taint", "node", name, "dedicated-")
    assert (code, out.strip()) == (0, f"node/{name} untainted")
    keys = [t["key"] for t in (await _node(backend, name))["spec"].get("taints") or []]
    assert "dedicated" not in keys


async def test_patch_strategic_merge_json(backend: Backend) -> None:
    await backend.create("deployments", _deployment(replicas=0), group="apps/v1")
    path = backend.ns_path("deployments", "inference", group="apps/v1")
    deployment = ("deployment", "inference")
    code, out = await backend.kubectl(
        "patch",
        *deployment,
        "--type=strategic",
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"inference","image":"v2"}]}}}}',
    )
    assert code == 0, out
    (container,) = (await backend.ok("GET", path))["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "v2" and container["resources"]["limits"] == {"memory": "64Mi"}
    code, out = await backend.kubectl(
        "patch", *deployment, "--type=merge", "-p", '{"metadata":{"labels":{"tier":"gpu"}}}'
    )
    assert code == 0, out
    assert (await backend.ok("GET", path))["metadata"]["labels"]["tier"] == "gpu"
    code, out = await backend.kubectl(
        "patch",
        *deployment,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/replicas","value":2}]',
    )
    assert code == 0, out
    assert (await backend.ok("GET", path))["spec"]["replicas"] == 2
    code, out = await backend.kubectl(
        "patch",
        *deployment,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/nothing"}]',
    )
    assert (code, out.strip()) == (
        1,
        "The request is invalid: the server rejected our request due to an error in our request",
    )


async def test_not_found_message(backend: Backend) -> None:
    code, out = await backend.kubectl("get", "pod", "ghost")
    assert code != 0
    assert out.strip() == 'Error from server (NotFound): pods "ghost" not found'


async def test_create_apply_and_server_side_apply_from_a_file(
    backend: Backend, tmp_path: Path
) -> None:
    manifest = tmp_path / "objects.yaml"
    team = f"{backend.namespace}-team"  # cluster-scoped: a name no other test uses
    text = (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: demo, namespace: {backend.namespace}}}\n"
        f'data: {{a: "1"}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {team}}}\n'
    )
    demo = backend.ns_path("configmaps", "demo")
    manifest.write_text(text)
    code, out = await backend.kubectl("create", "-f", str(manifest))
    assert code == 0, out
    assert (await backend.ok("GET", demo))["data"] == {"a": "1"}
    assert (await backend.http("GET", f"/api/v1/namespaces/{team}"))[0] == 200
    manifest.write_text(text.replace('"1"', '"2"'))
    code, out = await backend.kubectl("apply", "-f", str(manifest))
    assert code == 0, out
    assert (await backend.ok("GET", demo))["data"] == {"a": "2"}
    manifest.write_text(text.replace('"1"', '"3"'))
    code, out = await backend.kubectl("apply", "--server-side", "-f", str(manifest))
    assert code == 0, out
    assert (await backend.ok("GET", demo))["data"] == {"a": "3"}
    code, out = await backend.kubectl("delete", "--wait=false", "-f", str(manifest))
    assert code == 0, out
    assert (await backend.http("GET", demo))[0] == 404

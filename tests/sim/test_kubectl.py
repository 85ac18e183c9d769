"""The real kubectl binary against the emulator: what an operator would type."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from rebalancer.sim import resources as R
from rebalancer.sim.cluster import ClusterEmulator
from rebalancer.sim.objects import condition_true

from .conftest import eventually

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl not installed")


async def kubectl(
    cluster: ClusterEmulator, *args: str, limit_seconds: float = 30.0
) -> tuple[int, str]:
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path), HOME="/tmp")
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), limit_seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode or 0, output.decode()


def _ready_replicas(cluster: ClusterEmulator) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.pods("default")
        if condition_true(p, "Ready") and not p["metadata"].get("deletionTimestamp")
    ]


async def _steady(cluster: ClusterEmulator) -> None:
    await eventually(lambda: len(_ready_replicas(cluster)) == 3, message="3 ready replicas")
    await eventually(
        lambda: (
            cluster.store.must_get(R.PDBS, "default", "inference")["status"].get(
                "disruptionsAllowed"
            )
            == 1
        ),
        message="PDB allows one",
    )


async def test_get_nodes_and_pods_as_json(served: ClusterEmulator) -> None:
    code, out = await kubectl(served, "get", "nodes", "-o", "json")
    assert code == 0, out
    nodes = json.loads(out)
    assert nodes["kind"] == "List" or nodes["kind"] == "NodeList"
    assert len(nodes["items"]) == 4
    spot = [
        n
        for n in nodes["items"]
        if n["metadata"]["labels"].get("kubernetes.azure.com/scalesetpriority") == "spot"
    ]
    assert len(spot) == 3
    await _steady(served)
    code, out = await kubectl(served, "get", "pods", "-o", "json", "-l", "app=inference")
    assert code == 0, out
    assert len(json.loads(out)["items"]) == 3
    code, out = await kubectl(served, "get", "nodes")
    assert code == 0, out
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]  # server-side Table
    assert len(rows) == 4 and all(row.split()[1] == "Ready" for row in rows)


async def test_cordon_uncordon(served: ClusterEmulator) -> None:
    name = served.nodes("gpuspot")[0]["metadata"]["name"]
    code, out = await kubectl(served, "cordon", name)
    assert (code, out.strip()) == (0, f"node/{name} cordoned")
    assert served.store.must_get(R.NODES, "", name)["spec"]["unschedulable"] is True
    code, out = await kubectl(served, "cordon", name)
    assert (code, out.strip()) == (0, f"node/{name} already cordoned")
    code, out = await kubectl(served, "uncordon", name)
    assert (code, out.strip()) == (0, f"node/{name} uncordoned")
    assert not served.store.must_get(R.NODES, "", name)["spec"].get("unschedulable")


async def test_drain_blocked_by_pdb_then_allowed(served: ClusterEmulator) -> None:
    await _steady(served)
    first, second = sorted(n["metadata"]["name"] for n in served.nodes("gpuspot"))[:2]
    flags = ("--ignore-daemonsets", "--delete-emptydir-data")
    code, out = await kubectl(served, "drain", first, *flags, "--timeout=20s")
    assert code == 0, out
    assert f"node/{first} drained" in out
    assert "ignoring DaemonSet-managed Pods: kube-system/node-agent-" in out
    assert [p["metadata"]["namespace"] for p in served.pods(node=first)] == ["kube-system"]
    # The replacement needs a new on-demand node (5 s): until it is Ready the budget is spent.
    code, out = await kubectl(served, "drain", second, *flags, "--timeout=2s")
    assert code != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in out
    assert "global timeout reached" in out
    assert len(served.pods(node=second, namespace="default")) == 1
    await eventually(lambda: len(_ready_replicas(served)) == 3, within=15, message="replacement")
    code, out = await kubectl(served, "drain", second, *flags, "--timeout=30s", limit_seconds=40)
    assert code == 0, out
    assert f"node/{second} drained" in out


async def test_scale_annotate_taint(served: ClusterEmulator) -> None:
    code, out = await kubectl(served, "scale", "deployment", "inference", "--replicas=1")
    assert (code, out.strip()) == (0, "deployment.apps/inference scaled")
    assert served.store.must_get(R.DEPLOYMENTS, "default", "inference")["spec"]["replicas"] == 1
    await eventually(
        lambda: (
            len([p for p in served.pods("default") if not p["metadata"].get("deletionTimestamp")])
            == 1
        ),
        message="one replica left",
    )
    name = served.nodes("system")[0]["metadata"]["name"]
    code, out = await kubectl(served, "annotate", "node", name, "example.com/owner=team-a")
    assert code == 0, out
    annotations = served.store.must_get(R.NODES, "", name)["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "team-a"
    code, out = await kubectl(served, "taint", "node", name, "dedicated=infra:NoSchedule")
    assert (code, out.strip()) == (0, f"node/{name} tainted")
    taints = served.store.must_get(R.NODES, "", name)["spec"]["taints"]
    assert {"key": "dedicated", "value": "infra", "effect": "NoSchedule"} in taints
    code, out = await kubectl(served, "taint", "node", name, "dedicated-")
    assert (code, out.strip()) == (0, f"node/{name} untainted")
    assert "taints" not in served.store.must_get(R.NODES, "", name)["spec"]


async def test_patch_strategic_merge_json(served: ClusterEmulator) -> None:
    deployment = ("deployment", "inference")
    code, out = await kubectl(
        served,
        "patch",
        *deployment,
        "--type=strategic",
        "-p",
        '{"spec":{"template":{"spec":{"containers":[{"name":"inference","image":"v2"}]}}}}',
    )
    assert code == 0, out
    stored = served.store.must_get(R.DEPLOYMENTS, "default", "inference")
    (container,) = stored["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "v2" and container["resources"]["limits"]["nvidia.com/gpu"]
    code, out = await kubectl(
        served, "patch", *deployment, "--type=merge", "-p", '{"metadata":{"labels":{"tier":"gpu"}}}'
    )
    assert code == 0, out
    stored = served.store.must_get(R.DEPLOYMENTS, "default", "inference")
    assert stored["metadata"]["labels"]["tier"] == "gpu"
    code, out = await kubectl(
        served,
        "patch",
        *deployment,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/replicas","value":2}]',
    )
    assert code == 0, out
    assert served.store.must_get(R.DEPLOYMENTS, "default", "inference")["spec"]["replicas"] == 2
    code, out = await kubectl(
        served,
        "patch",
        *deployment,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/nothing"}]',
    )
    assert code != 0 and "The request is invalid" in out
    assert "doc is missing path" in out


async def test_not_found_message(served: ClusterEmulator) -> None:
    code, out = await kubectl(served, "get", "pod", "ghost")
    assert code != 0
    assert out.strip() == 'Error from server (NotFound): pods "ghost" not found'


async def test_create_apply_and_server_side_apply_from_a_file(
    served: ClusterEmulator, tmp_path: Path
) -> None:
    manifest = tmp_path / "objects.yaml"
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo, namespace: default}\n"
        'data: {a: "1"}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n'
    )
    manifest.write_text(text)
    code, out = await kubectl(served, "create", "-f", str(manifest))
    assert code == 0, out
    assert served.store.must_get(R.CONFIGMAPS, "default", "demo")["data"] == {"a": "1"}
    assert served.store.get(R.NAMESPACES, "", "team") is not None
    manifest.write_text(text.replace('"1"', '"2"'))
    code, out = await kubectl(served, "apply", "-f", str(manifest))
    assert code == 0, out
    assert served.store.must_get(R.CONFIGMAPS, "default", "demo")["data"] == {"a": "2"}
    manifest.write_text(text.replace('"1"', '"3"'))
    code, out = await kubectl(served, "apply", "--server-side", "-f", str(manifest))
    assert code == 0, out
    assert served.store.must_get(R.CONFIGMAPS, "default", "demo")["data"] == {"a": "3"}
    code, out = await kubectl(served, "delete", "-f", str(manifest))
    assert code == 0, out
    assert served.store.get(R.CONFIGMAPS, "default", "demo") is None

"""The served emulator end to end: a node's IMDS endpoint through the project's own IMDS
client, `rebalancer sim serve` as a process, and a few less common API verbs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp

from rebalancer.azure.imds import ImdsClient
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.objects import condition_true
from tests.helpers import KUBECTL

from .conftest import eventually


async def test_node_imds_endpoint_with_the_project_client(served: ClusterEmulator) -> None:
    node = served.nodes("gpuspot")[0]["metadata"]["name"]
    vm = served.vm_name_for(node)
    assert served.imds_url_for(node).endswith(f"/vms/{vm}")
    event = served.preempt(node, notice_seconds=60)
    async with ImdsClient(base_url=served.imds_url_for(node)) as imds:
        fetched = await imds.get_scheduled_events()
        (seen,) = fetched.document.events
        assert (seen.event_id, seen.event_type, seen.resources) == (
            event.event_id,
            "Preempt",
            (vm,),
        )
        await imds.acknowledge([seen.event_id])
    # Approval starts the event now: the VM goes long before NotBefore.
    await eventually(
        lambda: not condition_true(served.store.must_get(R.NODES, "", node), "Ready"),
        message="node NotReady after approval",
    )
    await eventually(
        lambda: served.store.get(R.NODES, "", node) is None, within=10, message="node deleted"
    )


async def test_deletecollection_and_apply_patch(served: ClusterEmulator) -> None:
    assert served.urls is not None
    base = f"{served.urls.api}/api/v1/namespaces/default/configmaps"
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer x"}) as session:
        for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
            body = {"metadata": {"name": name, "labels": {"team": team}}, "data": {"k": "v"}}
            async with session.post(base, json=body) as response:
                assert response.status == 201
        async with session.delete(base, params={"labelSelector": "team=x"}) as response:
            assert response.status == 200
            deleted = await response.json()
        assert sorted(i["metadata"]["name"] for i in deleted["items"]) == ["a", "b"]
        assert [c["metadata"]["name"] for c in served.store.items(R.CONFIGMAPS, "default")] == ["c"]
        manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: v1\n"
        headers = {"Content-Type": "application/apply-patch+yaml"}
        async with session.patch(
            f"{base}/applied", data=manifest, headers=headers, params={"fieldManager": "t"}
        ) as response:
            assert response.status == 201
        async with session.patch(
            f"{base}/applied",
            data=manifest.replace("v1\n", "v2\n"),
            headers=headers,
            params={"fieldManager": "t"},
        ) as response:
            assert response.status == 200
    assert served.store.must_get(R.CONFIGMAPS, "default", "applied")["data"] == {"k": "v2"}


async def test_sim_serve_refuses_a_kubeconfig_dir_it_cannot_make_in_one_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rebalancer.cli", "sim", "serve", "aks-gpu-small",
        "--kubeconfig-dir", str(tmp_path / "a-file" / "kube"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert err.decode().splitlines() == [
        f"rebalancer: --kubeconfig-dir {tmp_path / 'a-file' / 'kube'}: Not a directory"
    ]


async def test_sim_serve_command(tmp_path: Path) -> None:
    kube = tmp_path / "not" / "there" / "yet"  # made, as kubectl makes ~/.kube
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rebalancer.cli",
        "sim",
        "serve",
        "aks-gpu-small",
        "--kubeconfig-dir",
        str(kube),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        lines = []
        while not any(line.startswith("  nodes:") for line in lines):
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            assert line, f"serve exited early: {lines}"
            lines.append(line.decode().rstrip("\n"))
        assert lines[0].startswith("cluster emulator 'aks-gpu-small' on http://127.0.0.1:")
        assert f"kubeconfig:  {kube / 'kubeconfig'}" in lines[1]
        assert any("IMDS:" in line and "/vms/<vm-name>" in line for line in lines)
        kubectl = await asyncio.create_subprocess_exec(
            KUBECTL,
            "get",
            "nodes",
            "-o",
            "json",
            env=dict(os.environ, KUBECONFIG=str(kube / "kubeconfig"), HOME=str(tmp_path)),
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(kubectl.communicate(), 30)
        assert kubectl.returncode == 0
        assert len(json.loads(out)["items"]) == 5  # 2 system + 3 spot GPU
    finally:
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 15)
    assert code == 0


async def test_hpas_are_served_and_a_client_can_raise_min_replicas(
    served: ClusterEmulator,
) -> None:
    """What the controller does to an HPA during a surge: read it, merge-patch minReplicas."""
    assert served.urls is not None
    served.hpas.sync_seconds = 1.0  # instead of upstream's 15 s: a shorter test
    base = f"{served.urls.api}/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "inference"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "inference"},
            "minReplicas": 2,
            "maxReplicas": 6,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 60},
                    },
                }
            ],
        },
    }
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer x"}) as session:
        async with session.post(base, json=hpa) as response:
            assert response.status == 201
        headers = {"Content-Type": "application/merge-patch+json"}
        patch = json.dumps({"spec": {"minReplicas": 4}})
        async with session.patch(f"{base}/inference", data=patch, headers=headers) as response:
            assert response.status == 200
        async with session.get(base) as response:
            listed = await response.json()
    assert listed["kind"] == "HorizontalPodAutoscalerList"
    assert [i["spec"]["minReplicas"] for i in listed["items"]] == [4]
    # The HPA controller applies the new minimum at its next sync: 3 replicas -> 4 (with no
    # load annotation it has no metric, and would not scale on one).
    await eventually(
        lambda: (
            served.store.must_get(R.DEPLOYMENTS, "default", "inference")["spec"]["replicas"] == 4
        ),
        within=3,
        message="the Deployment at the HPA's new minimum",
    )
    assert [(r.old, r.new) for r in served.hpas.rescales] == [(3, 4)]

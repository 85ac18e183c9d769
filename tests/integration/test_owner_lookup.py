"""The webhook's owner lookup against the emulated API server over real HTTP on 127.0.0.1: the
list of one name it sends is answered as the API server answers it, for a Deployment and a
StatefulSet, and a name nobody has gives none (tests/unit/test_owner_lookup.py has the rest)."""

from __future__ import annotations

import copy
from pathlib import Path

from rebalancer.controller.owner_lookup import OwnerLookup
from rebalancer.kube.client import KubeClient
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.scenario import parse_scenario
from tests.e2e.rig import scenario


async def test_the_lookup_lists_the_one_name_the_pod_points_to(tmp_path: Path) -> None:
    cluster = ClusterEmulator(parse_scenario(scenario()), tick_seconds=0.05)
    await cluster.start(kubeconfig_dir=tmp_path, run_loops=False)
    client = await KubeClient.connect(str(cluster.kubeconfig_path))
    results: list[str] = []
    found = OwnerLookup(
        client, live=lambda _: None, monotonic=lambda: 0.0, on_result=results.append
    )
    try:
        (llm,) = [d for d in cluster.store.items(R.DEPLOYMENTS) if d["metadata"]["name"] == "llm"]
        template_labels = llm["spec"]["template"]["metadata"]["labels"]
        sts = copy.deepcopy(llm)
        sts["metadata"] = {"name": "llm-0", "namespace": "inference"}  # a name sharing a prefix
        cluster.store.create(R.STATEFULSETS, sts)

        def pod(kind: str, name: str, labels: dict[str, str]) -> dict[str, object]:
            owner = {"kind": kind, "name": name, "controller": True}
            return {"metadata": {"labels": labels, "ownerReferences": [owner]}}

        labels = {**template_labels, "pod-template-hash": "abc12"}
        deployment = await found.workload_of(pod("ReplicaSet", "llm-abc12", labels), "inference")
        assert deployment is not None and deployment.key == ("Deployment", "inference", "llm")
        statefulset = await found.workload_of(pod("StatefulSet", "llm-0", {}), "inference")
        assert statefulset is not None and statefulset.key == ("StatefulSet", "inference", "llm-0")
        nobody = {"pod-template-hash": "zz9"}
        assert await found.workload_of(pod("ReplicaSet", "ghost-zz9", nobody), "inference") is None
        assert results == ["fetched", "fetched", "absent"]
    finally:
        await client.close()
        await cluster.stop()

"""The real control plane is what the other `k8s` tests rely on: AKS-shaped nodes, RBAC enforced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane

pytestmark = pytest.mark.k8s


def test_nodes_are_aks_shaped_and_ready(control_plane: ControlPlane) -> None:
    nodes = json.loads(control_plane.kubectl("get", "nodes", "-o", "json"))["items"]
    pools: dict[str, int] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        pools[labels["kubernetes.azure.com/agentpool"]] = (
            pools.get(labels["kubernetes.azure.com/agentpool"], 0) + 1
        )
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]
        if labels["kubernetes.azure.com/agentpool"] == "gpuspot":
            assert labels["kubernetes.azure.com/scalesetpriority"] == "spot"
            assert {t["key"] for t in node["spec"]["taints"]} == {
                "kubernetes.azure.com/scalesetpriority",
                "sku",
            }
            assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert pools == {"system": 1, "gpuspot": 3, "gpuondemand": 2}


def test_rbac_is_enforced_for_service_accounts(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.kubectl("create", "namespace", "rbac-check")
    try:
        control_plane.kubectl("create", "serviceaccount", "nobody", "-n", "rbac-check")
        kubeconfig = control_plane.token_kubeconfig(tmp_path / "kc", "rbac-check", "nobody")
        with pytest.raises(AssertionError, match=r"(?i)forbidden"):
            control_plane.kubectl("get", "nodes", kubeconfig=kubeconfig)
    finally:
        control_plane.kubectl("delete", "namespace", "rbac-check", "--wait=false")

"""`kubectl spot-rebalancer status | doctor` through the real kubectl against the real control
plane (kube-apiserver v1.34 with AKS-shaped kwok nodes): the plugin's paged lists, objects as a
real API server serves and defaults them, DaemonSet status from the real DaemonSet controller,
and its client (TLS, the admin's client certificate) as a user's kubeconfig sets it up.

In a namespace of its own: a device plugin that tolerates only `sku=gpu` (the kwok spot nodes
advertise their GPUs anyway, so the doctor does not blame it), our agent's DaemonSet (the chart's
labels) without the spot toleration, and an embedder that cannot use spot. Expected findings and
pools come from the kwok nodes and these manifests, filtered to the test's own objects (other
tests share the cluster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer import names
from tests.controlplane import ControlPlane
from tests.helpers import KUBECTL

pytestmark = pytest.mark.k8s

NAMESPACE = "plugin-doctor"
GPU_ONLY = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
CHART_AGENT = {
    "app.kubernetes.io/name": "spot-rebalancer",
    "app.kubernetes.io/component": "agent",
    "app.kubernetes.io/part-of": "spot-rebalancer",
}


def daemonset(name: str, labels: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, **labels}}, "spec": spec},
        },
    }


MANIFESTS = [
    daemonset("nvidia-device-plugin-daemonset", {}, {
        "tolerations": GPU_ONLY,
        "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
    }),
    daemonset("agent", CHART_AGENT, {
        "nodeSelector": {names.AKS_SPOT_LABEL: "spot"},
        "tolerations": GPU_ONLY,
        "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
    }),
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "embedder", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "embedder"}},
            "template": {
                "metadata": {"labels": {"app": "embedder"}},
                "spec": {
                    "tolerations": GPU_ONLY,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
            },
        },
    },
]  # fmt: skip


def plugin(plane: ControlPlane, *args: str) -> tuple[int, dict[str, Any]]:
    env = dict(os.environ, HOME="/tmp")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        # kubectl takes no flag before a plugin's name: the plugin reads --kubeconfig itself.
        [KUBECTL, "spot-rebalancer", *args, "--kubeconfig", str(plane.admin_kubeconfig),
         "-n", NAMESPACE, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert result.returncode in (0, 1) and result.stdout, (result.returncode, result.stderr)
    return result.returncode, json.loads(result.stdout)


def until(predicate: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


def test_status_and_doctor_on_a_real_api_server(control_plane: ControlPlane) -> None:
    plane = control_plane
    plane.kubectl("create", "namespace", NAMESPACE)
    try:
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(MANIFESTS))
        nodes = plane.nodes()
        spot = [n for n in nodes if n["metadata"]["labels"].get(names.AKS_SPOT_LABEL) == "spot"]

        def agent_status() -> dict[str, Any]:
            found = json.loads(plane.kubectl("get", "daemonset", "agent", "-n", NAMESPACE,
                                             "-o", "json"))  # fmt: skip
            return dict(found.get("status") or {})

        until(lambda: "desiredNumberScheduled" in agent_status(), timeout=30, what="DS status")

        code, doc = plugin(plane, "doctor")
        mine = {
            (f["id"], f"{f['object']['kind']}/{f['object']['name']}")
            for f in doc["findings"]
            if f["object"]["namespace"] == NAMESPACE
        }
        assert mine == {
            ("agent-not-on-spot", "DaemonSet/agent"),
            ("workload-cannot-use-spot", "Deployment/embedder"),
        }
        assert code == 1  # the agent's finding is an error

        code, status = plugin(plane, "status")
        assert code == 0
        pools: dict[str, dict[str, Any]] = {}
        for node in nodes:
            labels = node["metadata"]["labels"]
            pool = pools.setdefault(labels[names.AKS_AGENTPOOL_LABEL], {"nodes": 0, "spot": False})
            pool["nodes"] += 1
            pool["spot"] = labels.get(names.AKS_SPOT_LABEL) == "spot"
        assert {
            p["name"]: {"nodes": p["nodes"], "spot": p["priority"] == "spot"}
            for p in status["pools"]
            if not p["declared"]
        } == pools
        assert status["install"]["namespace"] == NAMESPACE
        assert status["install"]["agent"] == {"name": "agent", "desired": 0, "ready": 0}
        assert len(spot) == sum(p["nodes"] for p in pools.values() if p["spot"])
        (embedder,) = [w for w in status["workloads"]
                       if (w["namespace"], w["name"]) == (NAMESPACE, "embedder")]  # fmt: skip
        assert embedder["replicas"] == 1
        assert all(c["priority"] == "on-demand" for c in embedder["pools"].values())
    finally:
        plane.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")

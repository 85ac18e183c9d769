"""The kubectl plugin's pure parts: where spot-rebalancer is and with which settings, the status
document from one view, its text, and the command line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.history import Entry, History
from rebalancer.controller.model import Surge
from rebalancer.plugin import doctor, status
from rebalancer.plugin.main import build_parser
from rebalancer.plugin.view import Raw, build_view, find_install, settings_from_env
from tests.unit.kube_objects import daemonset, deployment, node, pod, replicaset

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPOT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
GPU = "sku=gpu:NoSchedule"
CHART_LABELS = {"app.kubernetes.io/part-of": "spot-rebalancer"}
PRICES = """prices:
  - sku: Standard_NC24ads_A100_v4
    region: eastus
    onDemand: 4.0
    spot: 1.0
"""


def controller(namespace: str = "sr", env: dict[str, str] | None = None) -> dict[str, Any]:
    """The controller Deployment as the chart renders it (the parts the plugin reads)."""
    variables = [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]
    variables += [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {
        "metadata": {
            "name": "sr-controller",
            "namespace": namespace,
            "labels": {**CHART_LABELS, "app.kubernetes.io/component": "controller"},
        },
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "controller", "env": variables,
                         "volumeMounts": [{"name": "prices",
                                           "mountPath": "/etc/spot-rebalancer/prices"}]}
                    ],
                    "volumes": [{"name": "prices", "configMap": {"name": "sr-prices"}}],
                }
            },
        },
        "status": {"readyReplicas": 2},
    }  # fmt: skip


ENV = {
    "REBALANCER_LEASE_NAME": "lease1",
    "REBALANCER_POOLS": json.dumps([{"name": "gpuzero", "gpus": 1, "taints": [GPU]}]),
    "REBALANCER_PRICES_FILE": "/etc/spot-rebalancer/prices/prices.yaml",
}


def raw(**changes: Any) -> Raw:
    surge = Surge(base_replicas=3, added=1, event_ids=("E1",), doomed_pods=("inference/llm-1",),
                  deadline="2026-03-01T12:00:30Z")  # fmt: skip
    llm = deployment("llm", [SPOT, GPU], replicas=3,
                     annotations={names.SURGE_ANNOTATION: surge.to_json()})  # fmt: skip
    history = History(
        since=NOW - timedelta(hours=3),
        entries=(Entry("E0", "Preempt", "spot-9", "gpuspot", "eastus-1",
                       "Standard_NC24ads_A100_v4", True, NOW - timedelta(minutes=30)),),
    )  # fmt: skip
    parts: dict[str, Any] = {
        "nodes": [
            node("spot-0", "gpuspot", spot=True, gpus=1, taints=[SPOT, GPU],
                 annotations={names.DRAIN_REQUEST_ANNOTATION: "now"}),
            node("spot-1", "gpuspot", spot=True, gpus=1, taints=[SPOT, GPU]),
            node("od-0", "gpuondemand", spot=False, gpus=1, taints=[GPU]),
            node("sys-0", "system", spot=False, gpus=0, taints=[], sku="Standard_E2s_v9"),
        ],
        "pods": [
            pod("llm-1", "spot-0", owner=("ReplicaSet", "llm-abc")),
            pod("llm-2", "spot-1", owner=("ReplicaSet", "llm-abc")),
            pod("llm-3", "od-0", owner=("ReplicaSet", "llm-abc")),
            pod("llm-4", "", owner=("ReplicaSet", "llm-abc"), ready=False),
            pod("web-1", "sys-0", owner=("ReplicaSet", "web-abc"), gpus=0),
        ],
        "replicasets": [replicaset("llm"), replicaset("web")],
        "deployments": [llm, deployment("web", [], gpus=0), controller(env=ENV)],
        "statefulsets": [],
        "daemonsets": [],
        "history": {"metadata": {"resourceVersion": "7"},
                    "data": {"history.json": history.to_json()}},
        "lease": {"spec": {"holderIdentity": "sr-controller-0",
                           "renewTime": "2026-03-01T11:59:58.000000Z"}},
        "prices": {"data": {"prices.yaml": PRICES}},
    }  # fmt: skip
    parts.update(changes)
    return Raw(**parts)


def test_status_document() -> None:
    document = status.status_of(build_view(raw(), now=NOW, namespace=None))
    assert document["install"] == {
        "namespace": "sr",
        "controller": {"name": "sr-controller", "replicas": 2, "ready": 2},
        "leader": {"identity": "sr-controller-0", "renewed": "2026-03-01T11:59:58Z",
                   "secondsAgo": 2.0},
        "agent": None,
        "settings": "Deployment sr/sr-controller",
    }  # fmt: skip
    pools = {p["name"]: p for p in document["pools"]}
    assert [p["name"] for p in document["pools"]] == ["gpuspot", "gpuondemand", "gpuzero", "system"]
    assert pools["gpuspot"]["priority"] == "spot" and pools["gpuspot"]["nodes"] == 2
    assert pools["gpuspot"]["costPerHour"] == 2.0  # 2 x the price file's spot price
    assert pools["gpuondemand"]["costPerHour"] == 4.0
    assert pools["gpuzero"]["declared"] and pools["gpuzero"]["nodes"] == 0
    assert pools["gpuzero"]["taints"] == [GPU]
    (group,) = pools["gpuspot"]["riskGroups"]
    assert group["sources"] == ["prior", "history"]
    assert not any(r.startswith(("resource_graph", "placement_score")) for r in group["reasons"])
    assert document["risk"]["history"] == {
        "since": "2026-03-01T09:00:00Z", "preempts": {"1h": 1, "6h": 1, "24h": 1}
    }  # fmt: skip
    assert {u["source"] for u in document["risk"]["notSeen"]} == {
        "resource_graph", "placement_score"
    }  # fmt: skip
    (llm,) = document["workloads"]  # web asks for no GPU: not managed
    assert llm["pending"] == 1
    assert llm["pools"] == {
        "gpuondemand": {"priority": "on-demand", "replicas": 1, "ready": 1},
        "gpuspot": {"priority": "spot", "replicas": 2, "ready": 2},
    }
    assert (llm["fallback"], llm["surging"]) == (1, True)
    (notice,) = document["notices"]
    assert (notice["node"], notice["eventType"], notice["secondsLeft"]) == (
        "spot-0",
        "Manual",
        None,
    )
    assert document["surges"][0]["workload"] == "inference/llm"
    assert document["cost"] == {
        "spendPerHour": {"spot": 2.0, "onDemand": 4.0, "total": 6.0},
        "savingsPerHour": 6.0,
        "fallbackReplicas": 1,
        "fallbackCostPerHour": 4.0,
        "unpricedNodes": 1,
        "prices": "file+bundled",
    }
    assert document["problems"] == []


def test_status_text_says_the_same() -> None:
    text = status.render(status.status_of(build_view(raw(), now=NOW, namespace=None)))
    assert "spot-rebalancer in namespace sr: controller 2/2 ready; leader sr-controller-0" in text
    assert "gpuzero (declared)" in text
    assert "inference/llm" in text and "gpuspot=2" in text and "surging" in text
    assert "SPEND 6.00 $/hour (spot 2.00, on-demand 4.00); spot saves 6.00 $/hour" in text


def test_the_users_price_file_wins() -> None:
    view = build_view(raw(), now=NOW, namespace=None, prices_file=PRICES.replace("1.0", "2.0"))
    assert status.status_of(view)["cost"]["spendPerHour"]["spot"] == 4.0


def test_what_cannot_be_read_is_said() -> None:
    view = build_view(
        raw(deployments=[], daemonsets=None, prices=None, problems=("cannot list daemonsets",)),
        now=NOW,
        namespace=None,
    )
    assert view.install.namespace == "spot-rebalancer"
    assert view.problems[0] == "cannot list daemonsets"
    assert "the controller's default settings are assumed" in view.problems[1]
    assert doctor.report(view, doctor.findings_of(view))["problems"] == list(view.problems)


def test_install_found_by_the_charts_labels() -> None:
    agent = daemonset("sr-agent", "other", [],
                      labels={**CHART_LABELS, "app.kubernetes.io/component": "agent"})  # fmt: skip
    two = [controller("b"), controller("a")]
    install = find_install(two, [agent], None)
    assert install.namespace == "a" and "several namespaces (a, b)" in install.problems[0]
    assert find_install(two, [agent], "b").controller == controller("b")
    only_agent = find_install([], [agent], None)
    assert (only_agent.namespace, only_agent.agent) == ("other", agent)
    assert find_install([controller(env=ENV)], [], None).prices_configmap == (
        "sr-prices", "prices.yaml"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "check"),
    [
        ({"REBALANCER_GPU_WORKLOADS_ONLY": "false"}, lambda s, p: not s.gpu_workloads_only),
        (ENV, lambda s, p: s.lease_name == "lease1" and s.pools[0].name == "gpuzero"),
        ({"REBALANCER_POOLS": "[not json"}, lambda s, p: s.pools == [] and "not JSON" in p[0]),
        (
            {"REBALANCER_COOLDOWN_SECONDS": "-1"},
            lambda s, p: s.cooldown_seconds == 600 and "cooldown_seconds" in p[0],
        ),
        ({"REBALANCER_PRICES_FILE": "/in/the/pod"}, lambda s, p: s.prices_file is None and not p),
    ],
)
def test_settings_from_the_controllers_environment(env: dict[str, str], check: Any) -> None:
    settings, problems = settings_from_env(env)
    assert check(settings, problems)


def test_flags_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--context", "c1", "-n", "sr", "status", "-o", "json"])
    after = parser.parse_args(["doctor", "--kubeconfig", "k", "--context", "c2"])
    assert (before.context, before.namespace, before.output, before.command) == (
        "c1", "sr", "json", "status"
    )  # fmt: skip
    assert (after.kubeconfig, after.context, after.output, after.namespace) == (
        "k", "c2", "text", None
    )  # fmt: skip

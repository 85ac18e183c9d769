"""The chart's options for a first install (issue 20): notifications, host networking for the agent,
PodMonitors, common labels, priority classes, names, the label Prometheus selects on, NOTES.

Rendered by the real helm 4 (and helm 3 where the rendering differs by helm), validated with
kubernetes-validate where a new kind or field appears, and read back by the controller's own
settings class where the chart passes settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.controller.settings import ControllerSettings
from tests.chart.conftest import HELM_VERSIONS, Tools, by_kind, of_component, one, write_yaml
from tests.chart.generated import CHART, ROOT
from tests.chart.test_chart_render import EVERYTHING, install_notes
from tests.chart.test_controller_chart import controller_settings_from

pytestmark = pytest.mark.chart

SECRET_URL = "https://hooks.slack.com/services/T0/B0/s3cr3t"


def env_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item for item in container["env"]}


# ---- notifications -----------------------------------------------------------------------------


def test_no_notifications_by_default(tools: Tools) -> None:
    assert not [name for name in env_of(tools.template()) if name.startswith("REBALANCER_NOTIFY")]


def test_the_chart_defaults_are_the_controllers() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["notifications"]
    fields = ControllerSettings.model_fields
    assert values["target"] == fields["notify_target"].default
    assert values["events"] == fields["notify_on"].default
    assert values["ratePerMinute"] == fields["notify_rate_per_minute"].default
    assert values["queueSize"] == fields["notify_queue_size"].default
    assert values["timeoutSeconds"] == fields["notify_timeout_seconds"].default
    assert values["attempts"] == fields["notify_attempts"].default
    assert values["clusterName"] == fields["notify_cluster_name"].default


def test_the_url_comes_from_the_secret_and_the_controller_reads_every_value(
    tools: Tools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    objects = tools.template("-f", str(EVERYTHING))
    env = env_of(objects)
    ref = env["REBALANCER_NOTIFY_WEBHOOK_URL"]
    assert "value" not in ref
    assert ref["valueFrom"] == {
        "secretKeyRef": {"name": "spot-rebalancer-notify", "key": "slack-url"}
    }
    # What the kubelet puts in the environment from that Secret.
    monkeypatch.setenv("REBALANCER_NOTIFY_WEBHOOK_URL", SECRET_URL)
    settings = controller_settings_from(objects, monkeypatch, tmp_path)
    assert settings.notify_webhook_url is not None
    assert settings.notify_webhook_url.get_secret_value() == SECRET_URL
    assert settings.notify_target == "slack"
    assert settings.notify_on == ["notice", "failover_blocked"]
    assert settings.notify_rate_per_minute == 6
    assert settings.notify_queue_size == 50
    assert settings.notify_timeout_seconds == 5.0
    assert settings.notify_attempts == 2
    assert settings.notify_cluster_name == "prod-eastus"
    # The controller's RBAC does not need the Secret: the kubelet reads it. (The Secrets it may
    # read, its own records and the webhook's certificate, are granted by name.)
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        for rule in role["rules"]:
            reads = {"get", "list", "watch"} & set(rule["verbs"])
            if "secrets" in rule.get("resources", []) and reads:
                assert rule.get("resourceNames"), rule
                assert "spot-rebalancer-notify" not in rule["resourceNames"], rule


def test_a_plain_url_works_and_notes_warn(tools: Tools) -> None:
    objects = tools.template("--set", f"notifications.webhookURL={SECRET_URL}")
    assert env_of(objects)["REBALANCER_NOTIFY_WEBHOOK_URL"]["value"] == SECRET_URL
    notes = install_notes(tools, "--set", f"notifications.webhookURL={SECRET_URL}")
    assert "WARNING: notifications.webhookURL is set in plain text" in notes
    assert "webhookURLSecretName" in notes
    # The Secret wins when both are set; no warning then.
    both = ("--set", f"notifications.webhookURL={SECRET_URL}",
            "--set", "notifications.webhookURLSecretName=notify")  # fmt: skip
    assert "valueFrom" in env_of(tools.template(*both))["REBALANCER_NOTIFY_WEBHOOK_URL"]
    notes = install_notes(tools, *both)
    assert "plain text" not in notes and "Secret notify, key url" in notes


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("webhookURL", "hooks.slack.com/services/x"),
        ("webhookURL", "ftp://example.com/x"),
        ("webhookURLSecretName", "Not_A_Name"),
        ("target", "discord"),
        ("events", ["notice", "everything"]),
        ("events", ["notice", "notice"]),
        ("ratePerMinute", 0),
        ("timeoutSeconds", 0),
        ("attempts", 11),
        ("extra", True),
    ],
)
def test_the_schema_refuses_bad_notifications(tools: Tools, key: str, value: Any) -> None:
    result = tools.helm(
        "helm4", "template", "r", str(CHART),
        "--set-json", f"notifications.{key}={json.dumps(value)}",
    )  # fmt: skip
    assert result.returncode != 0 and "notifications" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "url",
    ["hooks.slack.com/services/x", "ftp://example.com/x", "https://", "https://a b/c"],
)
def test_the_controller_refuses_what_the_schema_refuses(tools: Tools, url: str) -> None:
    result = tools.helm(
        "helm4", "template", "r", str(CHART), "--set-json",
        f"notifications.webhookURL={json.dumps(url)}",
    )  # fmt: skip
    assert result.returncode != 0
    with pytest.raises(ValueError, match="not an http"):
        ControllerSettings(notify_webhook_url=url)


# ---- the agent on the host network -------------------------------------------------------------


def test_host_network_is_off_by_default_and_on_with_cluster_dns(
    tools: Tools, tmp_path: Path
) -> None:
    spec = one(tools.template(), "DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is False and "dnsPolicy" not in spec
    objects = tools.template("--set", "agent.hostNetwork=true")
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert one(tools.template("--set", "agent.hostNetwork=true", helm="helm3"), "DaemonSet") == one(
        objects, "DaemonSet"
    )
    validate(tools, tmp_path, objects)
    notes = install_notes(tools, "--set", "agent.hostNetwork=true")
    assert "host networking" in notes and "privileged" in notes


def validate(tools: Tools, tmp_path: Path, objects: list[dict[str, Any]]) -> None:
    manifest = write_yaml(tmp_path / "rendered.yaml", objects)
    result = tools.run(tools.path("KUBERNETES_VALIDATE"), "--strict", "-k", "1.30.0", str(manifest))
    assert result.returncode == 0 and "ERROR" not in result.stdout, result.stdout + result.stderr


# ---- PodMonitors, ServiceMonitor labels --------------------------------------------------------


def test_pod_monitors_scrape_each_components_pods(tools: Tools) -> None:
    objects = tools.template(
        "--set", "podMonitor.enabled=true", "--set", "podMonitor.labels.release=kps",
        "--set", "podMonitor.interval=15s",
    )  # fmt: skip
    assert not by_kind(objects, "ServiceMonitor")
    for component, kind in (("agent", "DaemonSet"), ("controller", "Deployment")):
        monitor = of_component(objects, "PodMonitor", component)
        assert monitor["metadata"]["labels"]["release"] == "kps"
        workload = of_component(objects, kind, component)
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["spot-rebalancer"]}
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert endpoint["port"] in [port["name"] for port in container["ports"]]
        assert endpoint["interval"] == "15s"
        assert endpoint["relabelings"][0]["targetLabel"] == "node"


def test_pod_and_service_monitors_together_are_refused(tools: Tools) -> None:
    result = tools.helm(
        "helm4", "template", "r", str(CHART),
        "--set", "podMonitor.enabled=true", "--set", "serviceMonitor.enabled=true",
    )  # fmt: skip
    assert result.returncode != 0 and "scraped twice" in result.stderr


def test_service_monitor_labels_and_the_old_name(tools: Tools) -> None:
    new = tools.template(
        "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=kps"
    )
    old = tools.template(
        "--set", "serviceMonitor.enabled=true",
        "--set", "serviceMonitor.additionalLabels.release=kps",
    )  # fmt: skip
    for objects in (new, old):
        for monitor in by_kind(objects, "ServiceMonitor"):
            assert monitor["metadata"]["labels"]["release"] == "kps"
    notes = install_notes(
        tools, "--set", "serviceMonitor.enabled=true",
        "--set", "serviceMonitor.additionalLabels.release=kps",
    )  # fmt: skip
    assert "serviceMonitor.additionalLabels is deprecated" in notes
    unlabelled = install_notes(tools, "--set", "serviceMonitor.enabled=true")
    assert "release: <its release name>" in unlabelled
    assert "serviceMonitor.labels.release=kube-prometheus-stack" in unlabelled
    labelled = install_notes(
        tools, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=k"
    )
    assert "release: <its release name>" not in labelled and "deprecated" not in labelled


def test_the_chart_readme_says_which_label_kube_prometheus_stack_selects() -> None:
    readme = (CHART / "README.md").read_text()
    assert "serviceMonitorSelectorNilUsesHelmValues" in readme
    assert "labels: {release: kube-prometheus-stack}" in readme


# ---- labels, priority, names -------------------------------------------------------------------


def test_common_labels_on_every_object_never_in_selectors(tools: Tools) -> None:
    objects = tools.template("-f", str(EVERYTHING))
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["example.com/cost-center"] == "gpu-platform", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "spot-rebalancer"  # not overridden
    for kind in ("DaemonSet", "Deployment"):
        workload = one(objects, kind)
        assert "example.com/cost-center" in workload["spec"]["template"]["metadata"]["labels"]
        assert "example.com/cost-center" not in workload["spec"]["selector"]["matchLabels"]


def test_the_controller_is_system_cluster_critical_and_a_quota_admits_it_where_needed(
    tools: Tools, tmp_path: Path
) -> None:
    objects = tools.template()
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert not by_kind(objects, "ResourceQuota")
    unset = tools.template("--set", "controller.priorityClassName=")
    assert "priorityClassName" not in one(unset, "Deployment")["spec"]["template"]["spec"]
    objects = tools.template("--set", "priorityClassQuota.enabled=true")
    quota = one(objects, "ResourceQuota")
    assert quota["metadata"]["namespace"] == "spot-rebalancer"
    assert "hard" not in quota["spec"]  # admits, limits nothing
    (expression,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expression["scopeName"] == "PriorityClass" and expression["operator"] == "In"
    agent = one(objects, "DaemonSet")["spec"]["template"]["spec"]["priorityClassName"]
    assert {agent, "system-cluster-critical"} == set(expression["values"])
    validate(tools, tmp_path, objects)


@pytest.mark.parametrize("release", ["spot-rebalancer", "prod", "spot-rebalancer-eu"])
def test_no_name_says_spot_rebalancer_twice(tools: Tools, release: str) -> None:
    objects = tools.template(
        "--set", "grafanaDashboards.enabled=true", "--set", "controller.prices[0].sku=x",
        "--set", "controller.prices[0].region=eastus", "--set", "controller.prices[0].spot=1",
        "--set", "priorityClassQuota.enabled=true", "--set", "controller.webhook.enabled=true",
        release=release,
    )  # fmt: skip
    names = [obj["metadata"]["name"] for obj in objects]
    assert not [name for name in names if name.count("spot-rebalancer") > 1], names
    prefix = release if "spot-rebalancer" in release else f"{release}-spot-rebalancer"
    maps = sorted(name for obj, name in zip(objects, names, strict=True)
                  if obj["kind"] == "ConfigMap" and "dashboard" in name)  # fmt: skip
    assert maps == [f"{prefix}-dashboard-cost", f"{prefix}-dashboard-evictions"]


# ---- NOTES and links ---------------------------------------------------------------------------


@pytest.mark.parametrize("helm", HELM_VERSIONS[:1])
def test_notes_name_the_kubectl_plugin(tools: Tools, helm: str) -> None:
    notes = install_notes(tools)
    assert "kubectl spot-rebalancer status" in notes
    assert "kubectl spot-rebalancer doctor" in notes


def test_every_repository_path_the_chart_names_exists() -> None:
    """Chart.yaml, values.yaml, the values profile, the chart README and NOTES point readers at
    files of the repository (tests, docs, scripts): each must be there."""
    texts = [
        (CHART / name).read_text()
        for name in ("Chart.yaml", "values.yaml", "values-aks-spot.yaml", "README.md")
    ]
    texts.append((CHART / "templates" / "NOTES.txt").read_text())
    named = set()
    for text in texts:
        named |= set(re.findall(r"\b((?:tests|docs|scripts|deploy|dashboards)/[\w./-]*\w)", text))
    assert "tests/chart/test_packaging.py" in named  # Chart.yaml's, which was a missing file
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []

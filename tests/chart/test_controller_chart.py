"""The controller half of the chart: placement, leader election wiring, settings, budget, notes.

Rendered by the real helm; the settings are read back by the controller's own ControllerSettings,
so a value the chart passes in a shape the process cannot read fails here, not in a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from rebalancer.config import PoolShape, setting_fields, setting_value
from rebalancer.controller.settings import ControllerSettings
from rebalancer.kube.leader import LeaderElector
from tests.chart.conftest import Tools, by_kind, of_component, one
from tests.chart.generated import CHART
from tests.chart.test_chart_render import (
    SCENARIOS,
    assert_settings_are_values,
    snake,
    values_of,
)

pytestmark = pytest.mark.chart

SELECTOR = {
    "app.kubernetes.io/name": "spot-rebalancer",
    "app.kubernetes.io/instance": "spot-rebalancer",
    "app.kubernetes.io/component": "controller",
}
OFF_SPOT = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {
                        "key": "kubernetes.azure.com/scalesetpriority",
                        "operator": "NotIn",
                        "values": ["spot"],
                    }
                ]
            }
        ]
    }
}


@pytest.fixture(scope="module")
def rendered(tools: Tools) -> dict[str, list[dict[str, Any]]]:
    return {name: tools.template(*args) for name, args in SCENARIOS.items()}


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("scenario", ["defaults", "aks-spot"])
def test_two_replicas_kept_off_spot_and_spread(
    rendered: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    objects = rendered[scenario]
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # A rollout starts the new replica before stopping an old one.
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    spec = pod_spec(objects)
    assert spec["affinity"]["nodeAffinity"] == OFF_SPOT
    assert "tolerations" not in spec  # no spot taint is tolerated, on top of the affinity
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == SELECTOR
    (spread,) = spec["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": SELECTOR},
    }
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}


def test_placement_is_overridable(rendered: dict[str, list[dict[str, Any]]], tools: Tools) -> None:
    spec = pod_spec(rendered["everything"])
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    )
    (required,) = spec["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    assert spec["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    assert spec["nodeSelector"] == {"kubernetes.azure.com/mode": "system"}
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    anywhere = pod_spec(
        tools.template(
            "--set-json", "controller.nodeAffinity=null", "--set", "controller.podAntiAffinity=none"
        )
    )
    assert "affinity" not in anywhere


def test_leader_election_wiring(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["defaults"]
    (container,) = pod_spec(objects)["containers"]
    assert container["args"] == ["controller"]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The Role that allows the Lease is in the namespace the pods run in (POD_NAMESPACE).
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == one(objects, "Deployment")["metadata"]["namespace"]
    assert role["rules"][0]["resources"] == ["leases"]
    binding = one(objects, "RoleBinding")
    account = of_component(objects, "ServiceAccount", "controller")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "spot-rebalancer",
        }
    ]
    cluster_binding = of_component(objects, "ClusterRoleBinding", "controller")
    assert cluster_binding["subjects"] == binding["subjects"]
    assert pod_spec(objects)["serviceAccountName"] == account["metadata"]["name"]
    assert pod_spec(objects)["automountServiceAccountToken"] is True
    assert account["automountServiceAccountToken"] is False


def test_probes_port_and_service(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["defaults"]
    (container,) = pod_spec(objects)["containers"]
    assert container["ports"] == [
        {"name": "http-metrics", "containerPort": 9102, "protocol": "TCP"}
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    service = of_component(objects, "Service", "controller")
    assert service["spec"]["selector"] == SELECTOR
    assert service["spec"]["ports"][0]["targetPort"] == "http-metrics"


# ControllerSettings fields the chart does not expose as controller.settings, and why.
NOT_IN_SETTINGS = {
    "namespace": "POD_NAMESPACE from the downward API: the Lease lives in the release namespace",
    "identity": "POD_NAME from the downward API",
    "kubeconfig": "in-cluster credentials of the ServiceAccount",
    "http_host": "must listen on the pod IP for probes and scraping",
    "http_port": "controller.port, shared with the probes, the Service and the container port",
    "prices_file": "controller.prices: rendered into a ConfigMap, mounted, and named by it",
    "pools": "controller.pools: the cluster's pools, not a tuning knob (read back below)",
    "agent_node_selector": "agent.nodeSelector: where the agent runs is where its notices count",
    "webhook_enabled": "controller.webhook.enabled: installs the webhook's objects too",
    "webhook_port": "controller.webhook.port, shared with the container port and the Service",
    "webhook_service": "the chart's webhook Service: named by the chart",
    "webhook_secret": "the chart's webhook Secret: named by the chart",
    "webhook_configuration": "the chart's MutatingWebhookConfiguration: named by the chart",
    "webhook_cert_manager": "controller.webhook.certManager.enabled: installs its Certificate too",
    "helm_chart": "chartReference: where the chart is published (the release stamps it)",
    "helm_chart_version": "the chart's own version (.Chart.Version)",
    **{
        name: "notifications.*: the URL from a Secret (test_chart_options.py reads them back)"
        for name in setting_fields(ControllerSettings)
        if name.startswith("notify_")
    },
}
DIFFERENT_DEFAULTS = {
    "log_format": ("json", "a pod has no terminal, so auto means json anyway; say it plainly"),
}


def test_every_controller_setting_is_a_chart_value() -> None:
    assert_settings_are_values(
        "controller", ControllerSettings, NOT_IN_SETTINGS, DIFFERENT_DEFAULTS
    )


def controller_settings_from(
    objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, pod_root: Path
) -> ControllerSettings:
    """The controller's settings exactly as the process builds them from the rendered env, with
    the rendered ConfigMap volumes materialised under `pod_root` as the kubelet mounts them."""
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config_maps = {c["metadata"]["name"]: c for c in by_kind(objects, "ConfigMap")}
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if "configMap" not in volumes[mount["name"]]:
            continue  # the webhook's scratch /tmp (an emptyDir): nothing to read back
        config_map = config_maps[volumes[mount["name"]]["configMap"]["name"]]
        folder = pod_root / mount["mountPath"].lstrip("/")
        folder.mkdir(parents=True)
        for key, text in config_map["data"].items():
            (folder / key).write_text(text)
    for item in container["env"]:
        if "value" in item:
            value = item["value"]
            if value.startswith("/etc/"):  # a path inside the pod
                value = str(pod_root / value.lstrip("/"))
            monkeypatch.setenv(item["name"], value)
    # What the downward API fills in.
    monkeypatch.setenv("POD_NAMESPACE", "spot-rebalancer")
    monkeypatch.setenv("POD_NAME", "spot-rebalancer-controller-5d9c7-abcde")
    return ControllerSettings()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_controller_reads_back_every_rendered_setting(
    rendered: dict[str, list[dict[str, Any]]],
    scenario: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    settings = controller_settings_from(rendered[scenario], monkeypatch, tmp_path)
    values = values_of(scenario)["controller"]
    for key, value in values["settings"].items():
        assert setting_value(settings, snake(key)) == value, key
    assert settings.planner.pools == [PoolShape.model_validate(pool) for pool in values["pools"]]
    assert settings.http_port == values["port"]
    assert settings.namespace == "spot-rebalancer"
    assert settings.identity == "spot-rebalancer-controller-5d9c7-abcde"


# (key, value): helm's schema and the controller's settings must agree on each of these.
SETTING_CASES = [
    ("resyncSeconds", 0),
    ("resyncSeconds", 61),
    ("resyncSeconds", 0.5),
    ("leaseDurationSeconds", -1),
    ("deadlineMarginSeconds", -0.5),
    ("deadlineMarginSeconds", 0),
    ("actNowGraceSeconds", 2.5),
    ("cooldownSeconds", "long"),
    ("eventPolicy", {"Preempt": "panic"}),
    ("eventPolicy", {"Preempt": "drain", "Freeze": "none"}),
    ("workloadSelector", "app!=llm"),
    ("workloadSelector", "app=llm,tier"),
    ("clientQps", 0),
    ("watchTimeoutSeconds", 5),
    ("dryRun", "maybe"),
    ("logLevel", "trace"),
    ("clientBurst", 0),
    ("returnWindow", "22:00-06:00"),
    ("returnWindow", "late"),
    ("returnMaxConcurrent", -1),
    ("pricesRefreshSeconds", 30),
    ("costIntervalSeconds", 0),
    ("webhookHandshakeTimeoutSeconds", 0),
    ("webhookRequestTimeoutSeconds", 301),
    ("webhookMaxConnections", 0),
    ("webhookMaxConnections", 1.5),
    ("webhookMaxBodyBytes", 1024),
    ("webhookMaxJsonDepth", 501),
]


@pytest.mark.parametrize(("key", "value"), SETTING_CASES)
def test_schema_and_controller_agree(
    tools: Tools, key: str, value: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = tools.helm(
        "helm4",
        "template",
        "r",
        str(CHART),
        "--set-json",
        f"controller.settings.{key}={json.dumps(value)}",
    )
    try:
        ControllerSettings.model_validate({snake(key): value})
        controller_accepts = True
    except pydantic.ValidationError:
        controller_accepts = False
    assert (result.returncode == 0) == controller_accepts, result.stderr
    if controller_accepts:
        objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        settings = controller_settings_from(objects, monkeypatch, tmp_path)
        read_back = setting_value(settings, snake(key))
        if key == "eventPolicy":  # helm merges the map into the defaults
            assert value.items() <= read_back.items()
        else:
            assert read_back == value


GPU_POOL = {"name": "gpuondemand", "gpus": 1, "taints": ["sku=gpu:NoSchedule"]}
# controller.pools: helm (schema and template) and the controller must agree on each of these.
POOL_CASES = [
    [],
    [GPU_POOL, {"name": "cpu", "spot": True, "labels": {"team": "ml"}}],
    [{**GPU_POOL, "labels": {"kubernetes.azure.com/agentpool": "gpuondemand"}}],
    [{"gpus": 1}],
    [{"name": ""}],
    [{"name": "Not A Name"}],
    [{**GPU_POOL, "gpu": 1}],
    [{**GPU_POOL, "gpus": -1}],
    [{**GPU_POOL, "taints": ["sku=gpu"]}],
    [{**GPU_POOL, "taints": ["sku=gpu:Sometimes"]}],
    [{**GPU_POOL, "labels": {"sku": 1}}],
    [GPU_POOL, GPU_POOL],
    [{**GPU_POOL, "labels": {"kubernetes.azure.com/agentpool": "other"}}],
]


@pytest.mark.parametrize("pools", POOL_CASES)
def test_helm_and_controller_agree_on_pools(
    tools: Tools, pools: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = tools.helm(
        "helm4", "template", "r", str(CHART), "--set-json", f"controller.pools={json.dumps(pools)}"
    )
    try:
        expected = ControllerSettings.model_validate({"pools": pools}).planner.pools
    except pydantic.ValidationError:
        expected = None
    assert (result.returncode == 0) == (expected is not None), result.stderr
    if expected is not None:
        objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        assert controller_settings_from(objects, monkeypatch, tmp_path).planner.pools == expected


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("controller.podAntiAffinity", '"sometimes"'),
        ("controller.replicaCount", '"two"'),
        ("controller.topologySpread.whenUnsatisfiable", '"Never"'),
        ("controller.podDisruptionBudget.maxUnavailable", "0"),
        ("controller.settings.leaseName", '"Not A Name"'),
        ("controller.settings.noSuchSetting", "1"),
        ("controller.port", "0"),
        ("grafanaDashboards.labels", '{"grafana_dashboard": 1}'),
    ],
)
def test_schema_rejects_bad_controller_values(tools: Tools, path: str, value: str) -> None:
    result = tools.helm("helm4", "template", "r", str(CHART), "--set-json", f"{path}={value}")
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert path.rsplit(".", maxsplit=1)[-1] in result.stderr, result.stderr


@pytest.mark.parametrize("helm", ["helm4", "helm3"])
@pytest.mark.parametrize(
    ("lease", "renew", "retry", "accepted"),
    [(15, 10, 2, True), (4, 3, 1, True), (10, 10, 2, False), (15, 10, 9, False)],
)
def test_lease_timings_are_checked_at_install(
    tools: Tools, helm: str, lease: float, renew: float, retry: float, accepted: bool
) -> None:
    """The LeaderElector's rule, which the schema cannot express, fails the install instead."""
    result = tools.helm(
        helm,
        "template",
        "r",
        str(CHART),
        "--set-json",
        f"controller.settings.leaseDurationSeconds={lease}",
        "--set-json",
        f"controller.settings.renewDeadlineSeconds={renew}",
        "--set-json",
        f"controller.settings.retryPeriodSeconds={retry}",
    )
    assert (result.returncode == 0) == accepted, result.stderr
    if not accepted:
        assert "leaseDurationSeconds > renewDeadlineSeconds" in result.stderr
    try:
        LeaderElector(
            None,  # type: ignore[arg-type]  # nothing is called at construction
            namespace="n",
            name="l",
            identity="i",
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )
        controller_accepts = True
    except ValueError:
        controller_accepts = False
    assert controller_accepts == accepted


def test_dashboards_ship_as_sidecar_config_maps(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert not [obj for obj in rendered["defaults"] if obj["kind"] == "ConfigMap"]
    maps = [
        obj
        for obj in rendered["everything"]
        if obj["kind"] == "ConfigMap" and not obj["metadata"]["name"].endswith("-prices")
    ]
    dashboards = sorted((CHART / "dashboards").glob("*.json"))
    assert dashboards and len(maps) == len(dashboards)
    for config_map, path in zip(
        sorted(maps, key=lambda m: next(iter(m["data"]))), dashboards, strict=True
    ):
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["namespace"] == "monitoring"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "Spot"}
        assert json.loads(config_map["data"][path.name]) == json.loads(path.read_text())


def test_notes_say_dry_run_and_unsafe_placement(tools: Tools) -> None:
    result = tools.helm(
        "helm4",
        "install",
        "spot-rebalancer",
        str(CHART),
        "-n",
        "spot",
        "--dry-run=client",
        "--set",
        "controller.settings.dryRun=true",
        "--set-json",
        "controller.nodeAffinity=null",
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "DRY RUN" in notes and "may run on spot nodes" in notes
    disabled = tools.helm(
        "helm4", "install", "x", str(CHART), "--dry-run=client", "--set", "controller.enabled=false"
    )
    assert "controller is disabled" in disabled.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_workload_identity_only_when_enabled(
    rendered: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    """AKS's webhook projects a federated token into pods labelled `use`, for the client id the
    ServiceAccount names; off by default (the Azure APIs of the risk model are optional)."""
    objects = rendered[scenario]
    identity = values_of(scenario)["controller"]["azureWorkloadIdentity"]
    annotations = of_component(objects, "ServiceAccount", "controller")["metadata"].get(
        "annotations", {}
    )
    labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    wi = {k: v for k, v in annotations.items() if k.startswith("azure.workload.identity/")}
    if identity["enabled"]:
        assert wi == {
            "azure.workload.identity/client-id": identity["clientId"],
            "azure.workload.identity/tenant-id": identity["tenantId"],
        }
        assert labels["azure.workload.identity/use"] == "true"
    else:
        assert wi == {}
        assert "azure.workload.identity/use" not in labels
    assert scenario != "everything" or identity["enabled"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["controller.azureWorkloadIdentity.enabled=true"], "clientId is required"),
        (["controller.settings.riskPlacementScoreEnabled=true"], "needs azureSubscriptionId"),
        (["controller.settings.riskMediumRatePerHour=0.3"], "riskMediumRatePerHour is above"),
    ],
)
def test_risk_settings_the_controller_would_refuse_are_refused(
    tools: Tools, values: list[str], message: str
) -> None:
    args = [arg for value in values for arg in ("--set-json", value)]
    with pytest.raises(AssertionError, match=message):
        tools.template(*args)

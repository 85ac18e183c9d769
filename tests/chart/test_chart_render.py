"""The Helm chart, rendered by the real helm 4 and helm 3 binaries and checked as a cluster would.

Three value sets: the defaults, the AKS spot GPU profile (values-aks-spot.yaml) and every optional
feature on (values-everything.yaml). Each must lint, render identically under both helm versions,
validate against the Kubernetes schemas, and keep the restricted Pod Security Standard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from rebalancer import __version__
from rebalancer.config import AgentSettings, setting_fields
from tests.chart.conftest import HELM_VERSIONS, Tools, of_component, one, write_yaml
from tests.chart.generated import CHART

pytestmark = pytest.mark.chart

AKS_SPOT = CHART / "values-aks-spot.yaml"
EVERYTHING = Path(__file__).parent / "values-everything.yaml"
SCENARIOS: dict[str, list[str]] = {
    "defaults": [],
    "aks-spot": ["-f", str(AKS_SPOT)],
    "everything": ["-f", str(EVERYTHING)],
}
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
# 1.30: the oldest Kubernetes AKS still supports with long-term support, and the version named in
# the issue; plus the newest schema kubernetes-validate ships, so a removed field shows up early.
KUBERNETES_VERSIONS = ("1.30.0", latest_version())
SPOT_TOLERATION = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}


@pytest.fixture(scope="module")
def rendered(tools: Tools) -> dict[str, list[dict[str, Any]]]:
    return {name: tools.template(*args) for name, args in SCENARIOS.items()}


def values_of(scenario: str) -> dict[str, Any]:
    """The values a scenario installs with: values.yaml merged with its -f file."""

    def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
        merged = dict(base)
        for key, value in override.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                merged[key] = merge(base[key], value)
            else:
                merged[key] = value
        return merged

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    extra = SCENARIOS[scenario]
    return merge(values, yaml.safe_load(Path(extra[1]).read_text())) if extra else values


def pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    workloads = ("DaemonSet", "Deployment", "StatefulSet", "Job", "ReplicaSet")
    return [obj["spec"]["template"]["spec"] for obj in objects if obj["kind"] in workloads]


# ---- helm itself ---------------------------------------------------------------------------------


@pytest.mark.parametrize("helm", HELM_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(tools: Tools, helm: str, scenario: str) -> None:
    result = tools.helm(helm, "lint", "--strict", str(CHART), *SCENARIOS[scenario])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm3_and_helm4_render_the_same(
    tools: Tools, rendered: dict[str, list[dict[str, Any]]], scenario: str
) -> None:
    assert tools.template(*SCENARIOS[scenario], helm="helm3") == rendered[scenario]


# ---- Kubernetes schemas ----------------------------------------------------------------------------


@pytest.mark.parametrize("kubernetes", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_manifests_validate_strictly(
    tools: Tools,
    rendered: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
    scenario: str,
    kubernetes: str,
) -> None:
    objects = rendered[scenario]
    manifest = write_yaml(tmp_path / "rendered.yaml", objects)
    result = tools.run(
        tools.path("KUBERNETES_VALIDATE"), "--strict", "-k", kubernetes, str(manifest)
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ERROR" not in output
    # Every built-in object was checked against its schema and passed...
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            name = f"{obj['kind'].lower()}/{obj['metadata']['name']}"
            assert f"passed for resource {name}" in output, output
    # ...and the only objects that were not are the prometheus-operator kinds, for which
    # kubernetes-validate has no schema (it warns). They are checked elsewhere: the rules by
    # promtool (test_alerts.py), the ServiceMonitor's wiring by test_service_monitor_scrapes_the_agent.
    unchecked = set(re.findall(r"Couldn't find schema for kind (\w+)", output))
    assert unchecked == {obj["kind"] for obj in objects} & CRD_KINDS


# ---- what gets installed ----------------------------------------------------------------------------


AGENT_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "DaemonSet"}
CONTROLLER_KINDS = {
    "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
    "Deployment", "PodDisruptionBudget",
}  # fmt: skip


def test_kinds_per_scenario(rendered: dict[str, list[dict[str, Any]]]) -> None:
    both = AGENT_KINDS | CONTROLLER_KINDS
    assert {obj["kind"] for obj in rendered["defaults"]} == both
    # The dashboards' ConfigMaps come with the profile and with everything on.
    assert {obj["kind"] for obj in rendered["aks-spot"]} == both | CRD_KINDS | {"ConfigMap"}
    assert {obj["kind"] for obj in rendered["everything"]} == both | CRD_KINDS | {
        "ConfigMap",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",  # the placement webhook (and a second Service for it)
        "ResourceQuota",  # priorityClassQuota
    }


def components(objects: list[dict[str, Any]]) -> set[str]:
    return {obj["metadata"]["labels"].get("app.kubernetes.io/component", "") for obj in objects}


def test_each_component_can_be_turned_off(tools: Tools) -> None:
    no_agent = tools.template("--set", "agent.enabled=false")
    assert components(no_agent) == {"controller"}
    assert {obj["kind"] for obj in no_agent} == CONTROLLER_KINDS
    no_controller = tools.template("--set", "controller.enabled=false")
    assert components(no_controller) == {"agent"}
    assert {obj["kind"] for obj in no_controller} == AGENT_KINDS
    assert tools.template("--set", "agent.enabled=false", "--set", "controller.enabled=false") == []


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_restricted_pod_security(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    specs = pod_specs(rendered[scenario])
    assert specs
    for spec in specs:
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 65532
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["runAsUser"] == 65532
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert not context.get("privileged")
            assert not [p for p in container.get("ports", []) if "hostPort" in p]
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"])
            assert {"cpu", "memory"} <= set(resources["limits"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_agent_daemonset(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    values = values_of(scenario)
    daemonset = one(rendered[scenario], "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["args"] == ["agent"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert spec["hostNetwork"] is False
    assert spec["automountServiceAccountToken"] is True
    assert spec["priorityClassName"] == "system-node-critical"
    account = of_component(rendered[scenario], "ServiceAccount", "agent")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec.get("nodeSelector", {}) == values["agent"]["nodeSelector"]
    assert spec["tolerations"] == values["agent"]["tolerations"]
    (port,) = container["ports"]
    assert port == {"name": "http-metrics", "containerPort": 9101, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate" and "maxUnavailable" in strategy["rollingUpdate"]
    for extra in values["agent"]["extraEnv"]:
        assert env[extra["name"]] == extra


def test_default_placement_is_aks_spot_nodes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = one(rendered["defaults"], "DaemonSet")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.azure.com/scalesetpriority": "spot"}
    assert SPOT_TOLERATION in spec["tolerations"]
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    sku = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    assert gpu in spec["tolerations"] and sku in spec["tolerations"]


def test_aks_profile_writes_the_tolerations_once(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """values-aks-spot.yaml: one anchored list, used as the chart's only tolerations list."""
    text = AKS_SPOT.read_text()
    assert text.count("key: kubernetes.azure.com/scalesetpriority") == 1
    assert "  tolerations: *spotGpuTolerations" in text  # agent.tolerations
    anchored = yaml.safe_load(text)["x-spot-gpu-tolerations"]
    assert SPOT_TOLERATION in anchored
    spec = one(rendered["aks-spot"], "DaemonSet")["spec"]["template"]["spec"]
    assert spec["tolerations"] == anchored


def test_custom_tolerations_replace_the_defaults(tools: Tools) -> None:
    custom = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    objects = tools.template("--set-json", f"agent.tolerations={json.dumps(custom)}")
    assert one(objects, "DaemonSet")["spec"]["template"]["spec"]["tolerations"] == custom


@pytest.mark.parametrize("old", [[{"key": "dedicated", "operator": "Exists"}], []])
def test_the_old_top_level_tolerations_still_work_for_one_release(
    tools: Tools, old: list[dict[str, str]]
) -> None:
    """Chart 0.2's `tolerations` (a values file written for it) is the agent's, over
    `agent.tolerations`, even when empty (it replaced the defaults then too); NOTES say to move
    it."""
    objects = tools.template("--set-json", f"tolerations={json.dumps(old)}")
    assert one(objects, "DaemonSet")["spec"]["template"]["spec"].get("tolerations", []) == old
    notes = install_notes(tools, "--set-json", f"tolerations={json.dumps(old)}")
    assert "top-level `tolerations` is deprecated" in notes and "agent.tolerations" in notes
    assert "deprecated" not in install_notes(tools)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_standard_labels(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    for obj in rendered[scenario]:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "spot-rebalancer"
        assert labels["app.kubernetes.io/instance"] == "spot-rebalancer"
        assert labels["app.kubernetes.io/version"] == __version__
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"spot-rebalancer-{chart_meta()['version']}"
        if obj["kind"] in ("PrometheusRule", "ResourceQuota") or (  # shared by all components
            obj["kind"] == "ConfigMap" and not obj["metadata"]["name"].endswith("-prices")
        ):
            assert "app.kubernetes.io/component" not in labels
        else:
            assert labels["app.kubernetes.io/component"] in ("agent", "controller", "webhook")
    for kind in ("DaemonSet", "Deployment"):
        workload = one(rendered[scenario], kind)
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
        assert "app.kubernetes.io/version" not in selector  # immutable across upgrades


@pytest.mark.parametrize(("component", "kind", "port"), [
    ("agent", "DaemonSet", 9101), ("controller", "Deployment", 9102),
])  # fmt: skip
def test_service_monitor_scrapes_each_component(
    rendered: dict[str, list[dict[str, Any]]], component: str, kind: str, port: int
) -> None:
    objects = rendered["everything"]
    service = of_component(objects, "Service", component)
    monitor = of_component(objects, "ServiceMonitor", component)
    workload = one(objects, kind)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["port"] == port
    assert service["spec"]["selector"].items() <= (
        workload["spec"]["template"]["metadata"]["labels"].items()
    )
    # The Service selects this component's pods only, not the other's.
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == component
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["spot-rebalancer"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "http-metrics"
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"
    assert endpoint["relabelings"][0]["targetLabel"] == "node"
    assert endpoint["relabelings"][1]["targetLabel"] == "pool"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_names_and_image(tools: Tools, rendered: dict[str, list[dict[str, Any]]]) -> None:
    image = one(rendered["defaults"], "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == f"spot-rebalancer:{chart_meta()['appVersion']}"
    everything = one(rendered["everything"], "DaemonSet")
    assert everything["metadata"]["name"] == "spot-agent"
    container = everything["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("myregistry.example/spot-rebalancer@sha256:")
    assert container["imagePullPolicy"] == "Always"
    tagged = tools.template(
        "--set", "image.tag=1.2.3", "--set", "nameOverride=rebal", release="prod"
    )
    daemonset = one(tagged, "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":1.2.3")
    assert daemonset["metadata"]["name"] == "prod-rebal-agent"
    assert daemonset["metadata"]["labels"]["app.kubernetes.io/name"] == "rebal"


# ---- agent settings: chart values <-> the agent's own settings ------------------------------------

# AgentSettings fields the chart does not expose as agent.settings, and why.
NOT_IN_SETTINGS = {
    "node_name": "NODE_NAME from the downward API",
    "vm_name": "differs per node; derived from the Node's providerID",
    "kubeconfig": "in-cluster credentials of the ServiceAccount",
    "http_host": "must listen on the pod IP for probes and scraping",
    "http_port": "agent.port, shared with the probes, the Service and the container port",
}


# Chart defaults that deliberately differ from the agent's own, and why.
DIFFERENT_DEFAULTS = {
    "log_format": ("json", "a pod has no terminal, so auto means json anyway; say it plainly"),
}


def snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def assert_settings_are_values(
    component: str,
    settings_cls: type[Any],
    not_in_settings: dict[str, str],
    different_defaults: dict[str, tuple[Any, str]],
) -> None:
    """Every setting of a process is a chart value (or listed as left out, with why), and each
    value's default is the process's own (or listed as deliberately different)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    exposed = {snake(key) for key in values[component]["settings"]}
    assert exposed.isdisjoint(not_in_settings)
    fields = setting_fields(settings_cls)
    assert exposed | set(not_in_settings) == set(fields)
    for key, default in values[component]["settings"].items():
        if snake(key) in different_defaults:
            assert default == different_defaults[snake(key)][0], key
        else:
            assert fields[snake(key)].get_default(call_default_factory=True) == default, key


def test_every_agent_setting_is_a_chart_value() -> None:
    assert_settings_are_values("agent", AgentSettings, NOT_IN_SETTINGS, DIFFERENT_DEFAULTS)


def agent_settings_from(
    daemonset: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> AgentSettings:
    """Build the agent's settings exactly as the process would, from the rendered env."""
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    for item in container["env"]:
        if item["name"].startswith("REBALANCER_"):
            monkeypatch.setenv(item["name"], item["value"])
    monkeypatch.setenv("NODE_NAME", "aks-gpuspot-12345678-vmss000000")  # the downward API's job
    return AgentSettings()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agent_reads_back_every_rendered_setting(
    rendered: dict[str, list[dict[str, Any]]], scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = agent_settings_from(one(rendered[scenario], "DaemonSet"), monkeypatch)
    values = values_of(scenario)["agent"]
    for key, value in values["settings"].items():
        assert getattr(settings, snake(key)) == value, key
    assert settings.http_port == values["port"]


# (key, value): helm's schema and the agent's settings must agree on each of these.
SETTING_CASES = [
    ("pollIntervalSeconds", "fast"),
    ("pollIntervalSeconds", 0.1),
    ("pollIntervalSeconds", 0.25),
    ("pollIntervalSeconds", 61),
    ("imdsTimeoutSeconds", 0),
    ("imdsFirstCallTimeoutSeconds", -1),
    ("imdsMaxBodyBytes", 100),
    ("imdsMaxBodyBytes", 4096),
    ("ackEventTypes", ["Preempt", "Explode"]),
    ("ackEventTypes", ["Freeze"]),
    ("ackEnabled", "sometimes"),
    ("nodeResyncSeconds", 0),
    ("kubeTimeoutSeconds", 0.5),
    ("logLevel", "verbose"),
    ("logFormat", "console"),
]


@pytest.mark.parametrize(("key", "value"), SETTING_CASES)
def test_schema_and_agent_agree(
    tools: Tools, key: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = tools.helm(
        "helm4",
        "template",
        "r",
        str(CHART),
        "--set-json",
        f"agent.settings.{key}={json.dumps(value)}",
    )
    try:
        AgentSettings.model_validate({"node_name": "n", snake(key): value})
        agent_accepts = True
    except pydantic.ValidationError:
        agent_accepts = False
    assert (result.returncode == 0) == agent_accepts, result.stderr
    if agent_accepts:  # and the value the agent then reads is the one asked for
        objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        settings = agent_settings_from(one(objects, "DaemonSet"), monkeypatch)
        assert getattr(settings, snake(key)) == value


# Values the schema must refuse at install time, with the path helm names in its error.
BAD_VALUES = [
    ("agent.settings.pollIntervalSeconds", '"fast"'),
    ("agent.settings.pollIntervalSeconds", "0.1"),
    ("agent.settings.unknownSetting", "1"),
    ("agent.port", "70000"),
    ("agent.updateStrategy", '{"type": "Sometimes"}'),
    ("tolerations", '[{"key": "x", "operator": "Maybe"}]'),
    ("image.pullPolicy", '"Sometimes"'),
    ("image.digest", '"latest"'),
    ("prometheusRule.rules.agentNotPolling.for", '"soon"'),
    ("prometheusRule.rules.agentNodeWritesFailing.errorRatio", "1.5"),
    ("networkPolicy.metricsFrom", "[{}]"),
    ("networkPolicy.metricsFrom", '[{"podSelecter": {"matchLabels": {"a": "b"}}}]'),
    ("networkPolicy.metricsFrom", '[{"ipBlock": {"except": ["10.0.0.0/8"]}}]'),
    ("notAValue", "true"),
]


@pytest.mark.parametrize("helm", HELM_VERSIONS)
@pytest.mark.parametrize(("path", "value"), BAD_VALUES)
def test_schema_rejects(tools: Tools, helm: str, path: str, value: str) -> None:
    result = tools.helm(helm, "template", "r", str(CHART), "--set-json", f"{path}={value}")
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    leaf = path.rsplit(".", maxsplit=1)[-1]
    assert leaf in result.stderr, result.stderr


# ---- NetworkPolicy -----------------------------------------------------------------------------


def test_network_policies_admit_only_the_given_peers_to_the_metrics_port(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    values = values_of("everything")
    policies = [obj for obj in rendered["everything"] if obj["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in policies} == {
        "agent",
        "controller",
    }
    for policy in policies:
        component = policy["metadata"]["labels"]["app.kubernetes.io/component"]
        kind = "DaemonSet" if component == "agent" else "Deployment"
        workload = of_component(rendered["everything"], kind, component)
        # Selects exactly the component's pods...
        assert (
            policy["spec"]["podSelector"]["matchLabels"]
            == workload["spec"]["selector"]["matchLabels"]
        )
        # ...restricts ingress only (egress reaches IMDS, the API server, the prices API)...
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        # ...and admits the given peers on the container port named http-metrics, and (the
        # controller, with the webhook on) any source on the webhook's port: nothing else.
        rule, *webhook = policy["spec"]["ingress"]
        assert rule["from"] == values["networkPolicy"]["metricsFrom"]
        assert rule["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
        ports = [
            port["name"]
            for container in workload["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        ]
        if component == "controller":
            assert webhook == [{"ports": [{"port": "webhook", "protocol": "TCP"}]}]
            assert ports == ["http-metrics", "webhook"]
        else:
            assert webhook == []
            assert ports == ["http-metrics"]


def test_the_webhook_port_admits_only_the_given_peers(tools: Tools) -> None:
    """The README's AKS example: the konnectivity agents and the API server's subnet."""
    peers = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"app": "konnectivity-agent"}},
        },
        {"ipBlock": {"cidr": "10.225.0.0/28"}},
    ]
    objects = tools.template(
        "--set", "networkPolicy.enabled=true", "--set", "controller.webhook.enabled=true",
        "--set-json", f"networkPolicy.webhookFrom={json.dumps(peers)}",
    )  # fmt: skip
    (policy,) = [
        obj
        for obj in objects
        if obj["kind"] == "NetworkPolicy"
        and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"
    ]
    assert policy["spec"]["ingress"] == [
        {"from": peers, "ports": [{"port": "webhook", "protocol": "TCP"}]}
    ]


def test_network_policies_without_peers_admit_nothing(tools: Tools) -> None:
    """No peers means no ingress rule at all: a rule without `from` would admit every source."""
    policies = [
        obj
        for obj in tools.template("--set", "networkPolicy.enabled=true")
        if obj["kind"] == "NetworkPolicy"
    ]
    assert len(policies) == 2
    for policy in policies:
        assert policy["spec"]["ingress"] == [] and policy["spec"]["policyTypes"] == ["Ingress"]


def test_network_policies_follow_the_installed_components(tools: Tools) -> None:
    objects = tools.template(
        "--set", "networkPolicy.enabled=true", "--set", "controller.enabled=false"
    )
    policies = [obj for obj in objects if obj["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["labels"]["app.kubernetes.io/component"] for p in policies] == ["agent"]


def chart_meta() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


# NOTES.txt is rendered only by `helm install`; helm 4 does a client-side dry run offline, while
# helm 3.17 still asks a cluster for its version, and no cluster runs here.
@pytest.mark.parametrize("helm", ["helm4"])
def test_notes(tools: Tools, helm: str) -> None:
    """NOTES.txt renders and warns about the placeholder image."""
    result = tools.helm(
        helm, "install", "spot-rebalancer", str(CHART), "-n", "spot", "--dry-run=client"
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "rollout status daemonset/spot-rebalancer-agent" in notes
    assert "rollout status deployment/spot-rebalancer-controller" in notes
    assert "get lease spot-rebalancer-controller" in notes
    assert "image.repository is the placeholder" in notes
    assert "DRY RUN" not in notes and "controller is disabled" not in notes
    pinned = tools.helm(
        helm,
        "install",
        "spot-rebalancer",
        str(CHART),
        "-n",
        "spot",
        "--dry-run=client",
        "--set",
        "image.repository=myregistry.example/spot-rebalancer",
    )
    assert "placeholder" not in pinned.stdout.split("NOTES:", 1)[1]


def install_notes(tools: Tools, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (helm 4's client-side dry run: no cluster)."""
    result = tools.helm(
        "helm4", "install", "spot-rebalancer", str(CHART), "-n", "spot", "--dry-run=client", *args
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]

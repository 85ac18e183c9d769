"""Defaulting and the little validation the real API server does on create for our kinds.

Upstream's defaulting functions and admission plugins set fields clients rely on (a pod's
`schedulerName`, `terminationGracePeriodSeconds`, the 300 s not-ready/unreachable tolerations
of the DefaultTolerationSeconds plugin, a Deployment's strategy). The store calls `on_create`
for every new object, whoever creates it.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim import resources as R
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.status import invalid

Obj = dict[str, Any]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def admit_node(node: Obj) -> None:
    """The TaintNodesByCondition admission plugin: a Node created through the API starts
    tainted not-ready (NoSchedule) until the node lifecycle controller sees it Ready. (Nodes the
    emulated cloud registers are Ready at once and skip it.)"""
    spec = node.setdefault("spec", {})
    taints = spec.get("taints") or []
    if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
        spec["taints"] = [*taints, {"key": NOT_READY_TAINT, "effect": "NoSchedule"}]


def on_create(resource: ResourceType, obj: Obj) -> None:
    if resource is R.PODS:
        _pod(obj)
    elif resource in (R.DEPLOYMENTS, R.REPLICASETS, R.STATEFULSETS, R.DAEMONSETS):
        _workload(resource, obj)
    elif resource is R.PDBS:
        obj.setdefault(
            "status",
            {
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "disruptionsAllowed": 0,
                "expectedPods": 0,
                "observedGeneration": 0,
            },
        )
    elif resource is R.NODES:
        obj.setdefault("spec", {})
        obj.setdefault("status", {})
    elif resource is R.MUTATING_WEBHOOKS:
        _webhook_configuration(obj)


def _pod(pod: Obj) -> None:
    name = pod.get("metadata", {}).get("name") or pod.get("metadata", {}).get("generateName", "")
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise invalid(R.PODS, name, [("spec.containers", "FieldValueRequired", "Required value")])
    for index, container in enumerate(spec["containers"]):
        if not container.get("name"):
            raise invalid(
                R.PODS,
                name,
                [(f"spec.containers[{index}].name", "FieldValueRequired", "Required value")],
            )
    pod_spec_defaults(pod)
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}


def pod_spec_defaults(pod: Obj) -> None:
    """What a pod's spec has once decoded (the scheme's defaults) and past the built-in
    DefaultTolerationSeconds admission plugin: what mutating webhooks see, before validation and
    before the status a create sets."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(
            t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
        ):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    for container in spec.get("containers") or []:
        if isinstance(container, dict):
            container.setdefault("resources", {})
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("imagePullPolicy", "IfNotPresent")
    _port_protocols(spec)


def _qos_class(spec: Obj) -> str:
    requests_any = limits_all = False
    guaranteed = True
    for container in spec.get("containers", []):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
        limits_all = limits_all or bool(limits)
    if guaranteed and limits_all:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _workload(resource: ResourceType, obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if resource is not R.DAEMONSETS:
        spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    if resource is R.DEPLOYMENTS:
        # Upstream's SetDefaults_Deployment: an empty strategy (`kubectl create deployment`
        # sends `strategy: {}`) is a RollingUpdate of 25 % / 25 %.
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("progressDeadlineSeconds", 600)
    if resource is R.STATEFULSETS:
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("serviceName", "")
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    pod_spec.setdefault("restartPolicy", "Always")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    _port_protocols(pod_spec)
    obj.setdefault("status", {})


def _port_protocols(spec: Obj) -> None:
    """Upstream's SetDefaults_ContainerPort: a port without a protocol is TCP."""
    for container in spec.get("containers") or []:
        for port in (container.get("ports") or []) if isinstance(container, dict) else []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")


# ---- admissionregistration.k8s.io/v1 MutatingWebhookConfiguration ---------------------------

_SIDE_EFFECTS = ("None", "NoneOnDryRun")  # all v1 accepts on create
_REVIEW_VERSIONS = ("v1", "v1beta1")
_FAILURE_POLICIES = ("Fail", "Ignore")


def _webhook_configuration(config: Obj) -> None:
    """Upstream's v1 defaults (failurePolicy Fail, matchPolicy Equivalent, empty selectors,
    timeoutSeconds 10, reinvocationPolicy Never, rule scope `*`, service port 443) and the
    validation a configuration most often fails (names, sideEffects, admissionReviewVersions,
    timeoutSeconds, clientConfig), with upstream's messages."""
    name = config.get("metadata", {}).get("name", "")
    webhooks = config.get("webhooks")
    if webhooks is None:
        return
    if not isinstance(webhooks, list) or not all(isinstance(w, dict) for w in webhooks):
        raise invalid(
            R.MUTATING_WEBHOOKS, name, [("webhooks", "FieldValueInvalid", "Invalid value")]
        )
    errors: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for index, webhook in enumerate(webhooks):
        errors += _webhook_errors(f"webhooks[{index}]", webhook, seen)
        webhook.setdefault("failurePolicy", "Fail")
        webhook.setdefault("matchPolicy", "Equivalent")
        webhook.setdefault("namespaceSelector", {})
        webhook.setdefault("objectSelector", {})
        webhook.setdefault("timeoutSeconds", 10)
        webhook.setdefault("reinvocationPolicy", "Never")
        for rule in webhook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (webhook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)
    if errors:
        raise invalid(R.MUTATING_WEBHOOKS, name, errors)


def _webhook_errors(path: str, webhook: Obj, seen: set[str]) -> list[tuple[str, str, str]]:
    errors: list[tuple[str, str, str]] = []
    name = str(webhook.get("name") or "")
    if not name:
        errors.append((f"{path}.name", "FieldValueRequired", "Required value"))
    elif len(name.split(".")) < 3:
        errors.append(
            (
                f"{path}.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": should be a domain with at least three segments '
                "separated by dots",
            )
        )
    elif name in seen:
        errors.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
    seen.add(name)
    side_effects = webhook.get("sideEffects")
    if side_effects is None:
        errors.append(
            (
                f"{path}.sideEffects",
                "FieldValueRequired",
                "Required value: must specify one of None, NoneOnDryRun",
            )
        )
    elif side_effects not in _SIDE_EFFECTS:
        errors.append(
            (
                f"{path}.sideEffects",
                "FieldValueNotSupported",
                f'Unsupported value: "{side_effects}": supported values: "None", "NoneOnDryRun"',
            )
        )
    versions = webhook.get("admissionReviewVersions") or []
    if not versions:
        errors.append(
            (
                f"{path}.admissionReviewVersions",
                "FieldValueRequired",
                "Required value: must specify one of v1, v1beta1",
            )
        )
    elif not any(v in _REVIEW_VERSIONS for v in versions):
        listed = ", ".join(f'"{v}"' for v in versions)
        errors.append(
            (
                f"{path}.admissionReviewVersions",
                "FieldValueInvalid",
                f"Invalid value: []string{{{listed}}}: must include at least one of v1, v1beta1",
            )
        )
    timeout = webhook.get("timeoutSeconds")
    if timeout is not None and not (isinstance(timeout, int) and 1 <= timeout <= 30):
        errors.append(
            (
                f"{path}.timeoutSeconds",
                "FieldValueInvalid",
                f"Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds",
            )
        )
    policy = webhook.get("failurePolicy")
    if policy is not None and policy not in _FAILURE_POLICIES:
        errors.append(
            (
                f"{path}.failurePolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Fail", "Ignore"',
            )
        )
    client = webhook.get("clientConfig") or {}
    if ("url" in client) == ("service" in client):
        errors.append(
            (
                f"{path}.clientConfig",
                "FieldValueRequired",
                "Required value: exactly one of url or service is required",
            )
        )
    elif "url" in client and not str(client["url"]).startswith("https://"):
        errors.append(
            (
                f"{path}.clientConfig.url",
                "FieldValueInvalid",
                f"Invalid value: \"{client['url']}\": 'https' is the only allowed URL scheme",
            )
        )
    return errors

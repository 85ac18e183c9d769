"""The agent's ValidatingAdmissionPolicy as the chart renders it (tests/k8s/test_admission_policy.py
proves on a real API server that it allows and refuses what it should).

It is rendered only where the API server serves the kind: `helm install` asks the server;
`helm template` has to be told with `--api-versions`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate.utils import latest_version

from rebalancer import names
from tests.chart.conftest import HELM_VERSIONS, Tools, by_kind, of_component, one, write_yaml

pytestmark = pytest.mark.chart

SERVED = ("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def policy_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] in POLICY_KINDS]


@pytest.mark.parametrize("helm", HELM_VERSIONS)
def test_rendered_where_the_api_serves_it(tools: Tools, helm: str) -> None:
    objects = tools.template(*SERVED, helm=helm, release="sr", namespace="ops")
    policy = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "paramRef" not in binding["spec"]  # no parameters: the policy binds everywhere
    assert policy["spec"]["failurePolicy"] == "Fail"
    # It matches the agent's own ServiceAccount, as the chart names it, and nothing else.
    account = of_component(objects, "ServiceAccount", "agent")["metadata"]
    (condition,) = policy["spec"]["matchConditions"]
    username = f"system:serviceaccount:{account.get('namespace', 'ops')}:{account['name']}"
    assert condition["expression"] == f'request.userInfo.username == "{username}"'
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"nodes", "nodes/status"}
    assert rule["operations"] == ["UPDATE"]
    # The names it protects are the ones the agent writes.
    text = str(policy["spec"])
    assert names.EVENTS_ANNOTATION in text and names.CONDITION_TYPE in text
    assert "authentication.kubernetes.io/node-name" in text
    assert policy["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"


def test_not_rendered_where_the_api_does_not_serve_it(tools: Tools) -> None:
    assert policy_objects(tools.template()) == []
    assert policy_objects(tools.template("--api-versions", "admissionregistration.k8s.io/v1")) == []


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "agent.admissionPolicy.enabled=false"],
        ["--set", "agent.rbac.create=false"],
        ["--set", "agent.enabled=false"],
    ],
)
def test_turned_off(tools: Tools, values: list[str]) -> None:
    assert policy_objects(tools.template(*SERVED, *values)) == []


def test_validation_actions_and_a_named_service_account(tools: Tools) -> None:
    objects = tools.template(
        *SERVED,
        "--set-json",
        'agent.admissionPolicy.validationActions=["Warn","Audit"]',
        "--set",
        "agent.serviceAccount.name=node-agent",
        namespace="ops",
    )
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    (condition,) = one(objects, "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert '"system:serviceaccount:ops:node-agent"' in condition["expression"]


@pytest.mark.parametrize(
    "bad", ['["Block"]', "[]", '["Deny","Deny"]'], ids=["unknown", "empty", "twice"]
)
def test_schema_rejects_bad_validation_actions(tools: Tools, bad: str) -> None:
    result = tools.helm(
        "helm4",
        "template",
        "sr",
        str(Path(__file__).parents[2] / "charts" / "spot-rebalancer"),
        *SERVED,
        "--set-json",
        f"agent.admissionPolicy.validationActions={bad}",
    )
    assert result.returncode != 0
    assert "validationActions" in result.stderr


@pytest.mark.parametrize("kubernetes", ("1.30.0", latest_version()))
def test_validates_strictly(tools: Tools, tmp_path: Path, kubernetes: str) -> None:
    objects = policy_objects(tools.template(*SERVED))
    assert {obj["kind"] for obj in objects} == POLICY_KINDS
    manifest = write_yaml(tmp_path / "policy.yaml", objects)
    result = tools.run(
        tools.path("KUBERNETES_VALIDATE"), "--strict", "-k", kubernetes, str(manifest)
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "ERROR" not in output, output
    for obj in objects:
        assert f"passed for resource {obj['kind'].lower()}/{obj['metadata']['name']}" in output


def test_everything_else_renders_as_before(tools: Tools) -> None:
    with_policy = tools.template(*SERVED)
    without = tools.template()
    assert [obj for obj in with_policy if obj["kind"] not in POLICY_KINDS] == without
    assert len(by_kind(with_policy, "ValidatingAdmissionPolicy")) == 1


# Node status fields by the Kubernetes version that added them, read from k8s.io/api core/v1
# NodeStatus (v0.30.0, v0.31.0, v0.34.4, v0.35.0). The policy compares each with the old object,
# but these three: conditions (all but the agent's own, compared apart) and capacity and
# allocatable (CEL cannot type-check maps of quantities: the README says so).
NODE_STATUS_FIELDS = {
    "1.30.0": ("capacity", "allocatable", "phase", "conditions", "addresses", "daemonEndpoints",
               "nodeInfo", "images", "volumesInUse", "volumesAttached", "config",
               "runtimeHandlers"),
    "1.31.0": ("features",),
    "1.35.0": ("declaredFeatures",),
}  # fmt: skip
NOT_COMPARED_ALONE = {"capacity", "allocatable", "conditions"}


def status_fields_of(version: str) -> set[str]:
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    return {
        field
        for since, fields in NODE_STATUS_FIELDS.items()
        if key(since) <= key(version)
        for field in fields
    }


def compared_status_fields(policy: dict[str, Any]) -> set[str]:
    """The status fields a validation of the policy holds equal to the old object's."""
    found = set()
    for validation in policy["spec"]["validations"]:
        expression = " ".join(validation["expression"].split())
        for field in re.findall(r"object\.status\.(\w+) == oldObject\.status\.(\w+)", expression):
            if field[0] == field[1]:
                found.add(field[0])
    return found


@pytest.mark.parametrize("helm", HELM_VERSIONS)
@pytest.mark.parametrize("kubernetes", ["1.30.0", "1.31.0", "1.34.4", "1.35.0"])
def test_every_node_status_field_of_the_servers_version_is_held(
    tools: Tools, helm: str, kubernetes: str
) -> None:
    """runtimeHandlers and features were writable by the agent (issue 18): each field of the
    version's NodeStatus is compared, and none the version does not have (it would not
    type-check, and then the policy refuses every request)."""
    policy = one(tools.template(*SERVED, "--kube-version", kubernetes, helm=helm),
                 "ValidatingAdmissionPolicy")  # fmt: skip
    assert compared_status_fields(policy) == status_fields_of(kubernetes) - NOT_COMPARED_ALONE
    messages = {v.get("message", "") for v in policy["spec"]["validations"]}
    assert "the spot-rebalancer agent may not change a Node's status.runtimeHandlers" in messages

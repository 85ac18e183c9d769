"""The agent's ValidatingAdmissionPolicy as the chart renders it (tests/k8s/test_admission_policy.py
proves on a real API server that it allows and refuses what it should).

It is rendered only where the API server serves the kind: `helm install` asks the server;
`helm template` has to be told with `--api-versions`.
"""

from __future__ import annotations

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

"""Settings: selectors, declared pools and the one-line error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from rebalancer.cli import main
from rebalancer.config import (
    ControllerSettings,
    PoolShape,
    describe_error,
    parse_selector,
    parse_taint,
)


def test_parse_selector() -> None:
    assert parse_selector("app=llm, tier ,") == {"app": "llm", "tier": None}
    assert parse_selector("") == {}


@pytest.mark.parametrize("text", ["app!=llm", "app in (a)", "=x"])
def test_unsupported_selectors_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        ControllerSettings(workload_selector=text)
    line = describe_error(error.value)
    assert line.startswith("invalid setting workload_selector (REBALANCER_WORKLOAD_SELECTOR")
    assert "\n" not in line


def test_parse_taint() -> None:
    assert parse_taint("sku=gpu:NoSchedule") == ("sku", "gpu", "NoSchedule")
    assert parse_taint("nvidia.com/gpu:NoExecute") == ("nvidia.com/gpu", "", "NoExecute")
    assert parse_taint("team=:PreferNoSchedule") == ("team", "", "PreferNoSchedule")


@pytest.mark.parametrize("text", ["sku=gpu", "sku=gpu:Never", ":NoSchedule", "a b:NoSchedule"])
def test_a_taint_not_in_kubectls_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="use key=value:Effect"):
        parse_taint(text)


def test_pools_come_from_json_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = [
        {"name": "gpuondemand", "gpus": 1, "taints": ["sku=gpu:NoSchedule"],
         "labels": {"kubernetes.azure.com/agentpool": "gpuondemand", "sku": "gpu"}},
        {"name": "cpu"},
    ]  # fmt: skip
    monkeypatch.setenv("REBALANCER_POOLS", json.dumps(declared))
    gpu, cpu = ControllerSettings().pools
    assert (gpu.name, gpu.spot, gpu.gpus, gpu.taints) == (
        "gpuondemand",
        False,
        1,
        ["sku=gpu:NoSchedule"],
    )
    assert gpu.labels["sku"] == "gpu"
    assert cpu == PoolShape(name="cpu", spot=False, gpus=0, labels={}, taints=[])
    assert ControllerSettings.model_fields["pools"].default == []


@pytest.mark.parametrize(
    ("pools", "says"),
    [
        ([{"spot": False}], "[0].name: Field required"),
        ([{"name": ""}], "[0].name: String should have at least 1 character"),
        ([{"name": "a", "taints": ["sku=gpu"]}], "[0].taints: Value error, taint 'sku=gpu'"),
        ([{"name": "a", "gpu": 1}], "[0].gpu: Extra inputs are not permitted"),
        ([{"name": "a", "gpus": -1}], "[0].gpus: Input should be greater than or equal to 0"),
        ([{"name": "a"}, {"name": "a"}], "pools declared twice: ['a']"),
        (
            [{"name": "a", "labels": {"kubernetes.azure.com/agentpool": "b"}}],
            "kubernetes.azure.com/agentpool is the pool's name, not b",
        ),
    ],
)
def test_a_bad_pool_is_refused_in_one_line(pools: list[dict[str, Any]], says: str) -> None:
    with pytest.raises(ValidationError) as error:
        ControllerSettings.model_validate({"pools": pools})
    line = describe_error(error.value)
    assert line.startswith("invalid setting pools (REBALANCER_POOLS / --pools): ")
    assert says in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({"REBALANCER_POOLS": "[{bad"}, [], "pools (REBALANCER_POOLS / --pools): not valid JSON"),
        ({}, ["--pools", "[{bad"], "pools (REBALANCER_POOLS / --pools): not valid JSON"),
        (
            {"REBALANCER_EVENT_POLICY": "{bad"},
            [],
            "event_policy (REBALANCER_EVENT_POLICY / --event-policy): not valid JSON",
        ),
        (
            {"REBALANCER_POOLS": '[{"name": "a", "taints": ["x"]}]'},
            [],
            "pools (REBALANCER_POOLS / --pools): [0].taints: Value error, taint 'x'",
        ),
    ],
)
def test_the_controller_stops_with_one_line_and_exit_2(
    env: dict[str, str],
    argv: list[str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Were the value accepted, the controller would fail on this kubeconfig instead, not hang.
    monkeypatch.setenv("REBALANCER_KUBECONFIG", "/nonexistent/kubeconfig")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        main(["controller", *argv])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"rebalancer: invalid setting {says}")

"""Settings: selectors, declared pools and the one-line error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from rebalancer.cli import main
from rebalancer.config import (
    PoolShape,
    describe_error,
    parse_selector,
    parse_taint,
    setting_fields,
)
from rebalancer.controller.settings import ControllerSettings


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
    gpu, cpu = ControllerSettings().planner.pools
    assert (gpu.name, gpu.spot, gpu.gpus, gpu.taints) == (
        "gpuondemand",
        False,
        1,
        ["sku=gpu:NoSchedule"],
    )
    assert gpu.labels["sku"] == "gpu"
    assert cpu == PoolShape(name="cpu", spot=False, gpus=0, labels={}, taints=[])
    assert setting_fields(ControllerSettings)["pools"].get_default(call_default_factory=True) == []


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


# ---- settings declared once: the planner's types, nested, named flat -----------------------------


def test_a_planners_setting_is_declared_in_its_type_and_named_flat() -> None:
    from rebalancer.controller.planning.settings import Settings
    from rebalancer.controller.returns import ReturnSettings
    from rebalancer.controller.risk import RiskSettings
    from rebalancer.setting_groups import fields_of

    fields = setting_fields(ControllerSettings)
    # The very field of the planner's type, not a copy of its default and description.
    assert fields["return_quiet_seconds"] is fields_of(ReturnSettings)["quiet_seconds"]
    assert fields["risk_prior_rate_per_hour"] is fields_of(RiskSettings)["prior_rate_per_hour"]
    assert fields["cooldown_seconds"] is fields_of(Settings)["cooldown_seconds"]
    # The planner's own constants are not settings.
    assert not {"record_history", "declared_pools", "risk_level_band", "target_fresh_factor"} & set(
        fields
    )
    settings = ControllerSettings()
    assert isinstance(settings.planner, Settings) and isinstance(settings.risk, RiskSettings)
    assert settings.planner == Settings() and settings.risk == RiskSettings()


def test_nested_settings_come_from_their_flat_variables_and_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rebalancer.cli import _load, build_parser

    monkeypatch.setenv("REBALANCER_RETURN_QUIET_SECONDS", "120")
    monkeypatch.setenv("REBALANCER_TARGET_RECOVERY_SECONDS", "90")
    monkeypatch.setenv("REBALANCER_RISK_PRIOR_RATE_PER_HOUR", "0.02")
    monkeypatch.setenv("REBALANCER_RISK_PRIOR_RATES", '{"Standard_NC24ads_A100_v4": 0.08}')
    monkeypatch.setenv("REBALANCER_DEADLINE_MARGIN_SECONDS", "7")
    monkeypatch.setenv("REBALANCER_COOLDOWN_SECONDS", "60")
    parser, sources = build_parser()
    args = parser.parse_args(
        ["controller", "--return-window", "22:00-06:00", "--cooldown-seconds", "30"]
    )
    settings = _load(ControllerSettings, sources["controller"], args)
    planner = settings.planner
    assert (planner.returns.quiet_seconds, planner.returns.window_minutes) == (120, (1320, 360))
    assert planner.target.recovery_seconds == 90
    assert (planner.deadline_margin_seconds, planner.cooldown_seconds) == (7, 30)  # flag wins
    assert settings.risk.prior_rate_per_hour == 0.02
    assert settings.risk.priors == {"standard_nc24ads_a100_v4": 0.08}
    # Keyword arguments are the flat names too (the tests and the plugin give them so).
    given = ControllerSettings(return_max_concurrent=3, target_fresh_seconds=0)
    assert (given.planner.returns.max_concurrent, given.planner.target.fresh_hours) == (3, 0)


def test_the_planners_types_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rebalancer.controller.planning.settings import Settings

    monkeypatch.setenv("REBALANCER_RETURN_QUIET_SECONDS", "120")
    monkeypatch.setenv("REBALANCER_COOLDOWN_SECONDS", "60")
    assert Settings().returns.quiet_seconds == 600 and Settings().cooldown_seconds == 600


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            {"return_quiet_seconds": -1},
            "return_quiet_seconds (REBALANCER_RETURN_QUIET_SECONDS / --return-quiet-seconds): "
            "Input should be greater than or equal to 0",
        ),
        (
            {"return_window": "22-6"},
            "return_window (REBALANCER_RETURN_WINDOW / --return-window): Value error, window",
        ),
        (
            {"risk_medium_rate_per_hour": 0.2, "risk_high_rate_per_hour": 0.1},
            "risk_high_rate_per_hour (REBALANCER_RISK_HIGH_RATE_PER_HOUR / "
            "--risk-high-rate-per-hour): Value error, below risk_medium_rate_per_hour (0.2)",
        ),
        (
            {"target_spot_price_share": 2},
            "target_spot_price_share (REBALANCER_TARGET_SPOT_PRICE_SHARE / "
            "--target-spot-price-share): Input should be less than or equal to 1",
        ),
    ],
)
def test_a_bad_nested_setting_is_named_flat(values: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError) as error:
        ControllerSettings.model_validate(values)
    line = describe_error(error.value)
    assert line.startswith(f"invalid setting {says}")
    assert "\n" not in line


def test_a_bad_nested_variable_stops_the_controller_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REBALANCER_KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.setenv("REBALANCER_RISK_PRIOR_RATES", "{bad")
    with pytest.raises(SystemExit) as stopped:
        main(["controller"])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "rebalancer: invalid setting risk_prior_rates (REBALANCER_RISK_PRIOR_RATES / "
        "--risk-prior-rates): not valid JSON"
    )

"""`rebalancer simulate` from the command line: output, and exit 2 with a clear message on bad
input (naming the file and the problem)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from rebalancer.cli import main
from rebalancer.simulate.files import add_arguments
from rebalancer.simulate.workload import Scenario

Capture = pytest.CaptureFixture[str]


def test_json_output_has_every_policy_that_exists(
    write_trace: Callable[..., Path], capsys: Capture
) -> None:
    trace = write_trace("zone-a", [2, 2, 0, 0, 2, 2])
    assert main(["simulate", "--trace", str(trace), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in document["results"]] == [
        "on-demand",
        "spot-drain",
        "failover",
        "spothedge",
        "eviction-aware",
        "target",
        "dynamic-fallback",
        "oracle",
    ]
    references = {r["policy"] for r in document["results"] if r["reference"]}
    assert references == {"on-demand", "spothedge", "dynamic-fallback", "oracle"}
    on_demand = document["results"][0]
    assert on_demand["availability"] == 1.0
    assert on_demand["costFractionOfOnDemand"] == pytest.approx(1.0)
    assert document["traces"][0]["name"] == "zone-a"
    assert document["horizonSeconds"] == 6 * 600


def test_a_folder_of_traces_and_a_yaml_config(
    write_trace: Callable[..., Path], tmp_path: Path, capsys: Capture
) -> None:
    write_trace("a", [1, 1, 1])
    write_trace("b", [1, 0, 1])
    config = tmp_path / "sim.yaml"
    config.write_text("replicas: 2\nloadSeconds: uniform:60:120\npolicies: [on-demand]\n")
    assert main(["simulate", "--trace", str(tmp_path), "--config", str(config), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in document["traces"]] == ["a", "b"]
    assert document["scenario"]["replicas"] == 2
    assert document["scenario"]["loadSeconds"] == "uniform:60:120"
    assert [r["policy"] for r in document["results"]] == ["on-demand"]


def test_flags_override_the_config(
    write_trace: Callable[..., Path], tmp_path: Path, capsys: Capture
) -> None:
    trace = write_trace("a", [1, 1, 1])
    config = tmp_path / "sim.yaml"
    config.write_text("replicas: 2\n")
    argv = ["simulate", "--trace", str(trace), "--config", str(config), "--replicas", "4"]
    assert main([*argv, "--policy", "on-demand", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["replicas"] == 4


def test_the_controllers_settings_from_the_config_and_flags(
    write_trace: Callable[..., Path], tmp_path: Path, capsys: Capture
) -> None:
    trace = write_trace("a", [1, 1, 1])
    config = tmp_path / "sim.yaml"
    config.write_text("cooldownSeconds: 60\nreturnQuietSeconds: 120\n")
    argv = ["simulate", "--trace", str(trace), "--config", str(config), "--policy", "failover"]
    assert main([*argv, "--return-quiet-seconds", "300", "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["scenario"]
    assert settings["cooldownSeconds"] == 60
    assert settings["returnQuietSeconds"] == 300
    assert settings["deadlineMarginSeconds"] is None  # the controller's own default


def test_every_setting_has_a_flag() -> None:
    """Each key of the YAML file is a flag too (but the warm-up, a property of the method)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.dest for a in parser._actions}
    assert {f.name for f in fields(Scenario)} - flags == {"warmup_seconds"}


def _fails(argv: list[str], capsys: Capture) -> str:
    assert main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_a_file_that_is_not_a_trace(tmp_path: Path, capsys: Capture) -> None:
    bad = tmp_path / "prices.csv"
    bad.write_text("sku,price\n")
    err = _fails(["--trace", str(bad)], capsys)
    assert f"{bad}: not a spot trace: not JSON" in err


def test_an_empty_trace(write_trace: Callable[..., Path], capsys: Capture) -> None:
    trace = write_trace("empty", [])
    assert f"{trace}: empty trace" in _fails(["--trace", str(trace)], capsys)


def test_a_trace_with_a_gap(write_trace: Callable[..., Path], capsys: Capture) -> None:
    trace = write_trace("holes", [1, 1, None, 1], gap_seconds=300)
    assert f"{trace}: gap at tick 2 (600 s)" in _fails(["--trace", str(trace)], capsys)


def test_a_missing_trace(tmp_path: Path, capsys: Capture) -> None:
    missing = tmp_path / "nope.json"
    assert f"{missing}: trace not found" in _fails(["--trace", str(missing)], capsys)


def test_no_trace_at_all(capsys: Capture) -> None:
    assert "no trace given" in _fails([], capsys)


def test_a_policy_that_cannot_be_met(write_trace: Callable[..., Path], capsys: Capture) -> None:
    trace = write_trace("a", [1, 1])
    argv = ["--trace", str(trace), "--policy", "on-demand", "--on-demand-limit", "2"]
    err = _fails(argv, capsys)
    assert "--policy on-demand cannot be met: 3 replicas need 3 on-demand nodes" in err
    assert "--on-demand-limit is 2" in err


def test_a_spot_policy_that_can_never_have_every_replica(
    write_trace: Callable[..., Path], capsys: Capture
) -> None:
    trace = write_trace("a", [0, 1, 1, 0])
    argv = ["--trace", str(trace), "--policy", "failover", "--on-demand-limit", "1"]
    err = _fails(argv, capsys)
    assert "--policy failover cannot be met: at most 2 replicas ever fit" in err


def test_a_workload_that_fits_no_pool(write_trace: Callable[..., Path], capsys: Capture) -> None:
    trace = write_trace("a", [1, 1])
    err = _fails(["--trace", str(trace), "--gpus-per-replica", "2"], capsys)
    assert "workload does not fit any pool: a replica needs 2 GPUs" in err
    assert "Standard_NC24ads_A100_v4 node has 1" in err


def test_the_placement_policy_from_flags_and_config(
    write_trace: Callable[..., Path], tmp_path: Path, capsys: Capture
) -> None:
    # The config sets three, the flags two more and override one; the rest stay defaults.
    config = tmp_path / "policy.yaml"
    config.write_text("maxRisk: medium\nminOnDemand: 1\nriskHighRatePerHour: 0.1\n")
    flags = ["--policy", "eviction-aware", "--spread", "pool", "--min-on-demand", "2", "--json"]
    argv = ["simulate", "--config", str(config), "--trace", str(write_trace("a", [1, 1, 1]))]
    argv += flags
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    settings = document["scenario"]
    assert (settings["maxRisk"], settings["minOnDemand"], settings["spread"]) == (
        "medium",
        2,
        "pool",
    )
    assert settings["failoverTo"] == "on-demand"
    assert settings["riskHighRatePerHour"] == 0.1
    assert settings["riskMediumRatePerHour"] is None  # the controller's own default
    assert [r["policy"] for r in document["results"]] == ["eviction-aware"]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--max-risk", "extreme"], "flags: max_risk: 'extreme' is not one of low, medium, high"),
        (["--spread", "rack"], "flags: spread: 'rack' is not one of zone, pool, none"),
        (["--min-on-demand", "-1"], "flags: min_on_demand: expected a whole number >= 0"),
        (["--risk-high-rate-per-hour", "2"], "riskHighRatePerHour is evictions per node-hour"),
        (
            ["--risk-medium-rate-per-hour", "0.2"],
            "riskHighRatePerHour 0.15 is below riskMediumRatePerHour 0.2",
        ),
    ],
)
def test_a_bad_placement_policy(
    write_trace: Callable[..., Path], capsys: Capture, argv: list[str], problem: str
) -> None:
    trace = write_trace("a", [1, 1])
    assert problem in _fails(["--trace", str(trace), "--policy", "eviction-aware", *argv], capsys)


def test_a_bad_setting_in_the_config_names_the_file(
    write_trace: Callable[..., Path], tmp_path: Path, capsys: Capture
) -> None:
    trace = write_trace("a", [1, 1])
    config = tmp_path / "sim.yaml"
    config.write_text("noticeSeconds: sometimes\n")
    err = _fails(["--trace", str(trace), "--config", str(config)], capsys)
    assert f"{config}: noticeSeconds: 'sometimes' is not a duration distribution" in err


def test_a_size_without_a_price(write_trace: Callable[..., Path], capsys: Capture) -> None:
    trace = write_trace("a", [1, 1])
    err = _fails(["--trace", str(trace), "--region", "antarctica"], capsys)
    assert "no on-demand and spot price" in err


def test_traces_of_different_lengths_are_cut_to_the_common_span(
    write_trace: Callable[..., Path], capsys: Capture
) -> None:
    short = write_trace("short", [1] * 4)
    long = write_trace("long", [1] * 10)
    argv = ["simulate", "--trace", str(short), "--trace", str(long), "--json"]
    assert main([*argv, "--policy", "on-demand"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["horizonSeconds"] == 4 * 600
    assert "cut: long" in captured.err
    assert main([*argv, "--policy", "on-demand", "--days", "1"]) == 2
    assert "--days 1.0: the traces cover 0.0 days" in capsys.readouterr().err

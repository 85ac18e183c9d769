"""Alert rules: checked and unit-tested by the real promtool, one source for chart and plain file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from rebalancer.metrics import AgentMetrics, ControllerMetrics
from tests.chart.conftest import Tools, one
from tests.chart.generated import (
    ALERTS_FILE,
    CHART,
    CHART_README,
    alert_rules_file,
    readme_with_table,
    undocumented,
    values_table,
)

pytestmark = pytest.mark.chart

ALERTS_TEST = ALERTS_FILE.parent / "alerts.test.yaml"


def rule_groups(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "PrometheusRule")["spec"]
    return spec


def alerts_of(groups: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups["groups"] for rule in group["rules"]}


def check_rules(tools: Tools, path: Path) -> None:
    result = tools.run(tools.path("PROMTOOL"), "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    "values", [[], ["-f", str(Path(__file__).parent / "values-everything.yaml")]]
)
def test_promtool_checks_the_rendered_prometheus_rule(
    tools: Tools, tmp_path: Path, values: list[str]
) -> None:
    objects = tools.template("--set", "prometheusRule.enabled=true", *values)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups(objects)))
    check_rules(tools, path)


def test_promtool_checks_the_plain_rules_file(tools: Tools) -> None:
    check_rules(tools, ALERTS_FILE)


def test_promtool_unit_tests_pass(tools: Tools) -> None:
    result = tools.run(tools.path("PROMTOOL"), "test", "rules", str(ALERTS_TEST))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    alerts = set(alerts_of(yaml.safe_load(ALERTS_FILE.read_text())))
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == alerts and silent == alerts


def test_plain_rules_file_is_the_chart_render(tools: Tools) -> None:
    assert ALERTS_FILE.read_text() == alert_rules_file(tools.env), (
        "deploy/prometheus/alerts.yaml is stale: run scripts/render-chart-files"
    )


AGENT_ALERTS = {
    "SpotRebalancerAgentNotPolling",
    "SpotRebalancerAgentNodeWritesFailing",
    "SpotRebalancerAgentAcknowledgementsFailing",
}
CONTROLLER_ALERTS = {
    "SpotRebalancerControllerNoLeader",
    "SpotRebalancerEvictionRateHigh",
    "SpotRebalancerFailoverBlocked",
    "SpotRebalancerDrainMissedDeadline",
    "SpotRebalancerReplicaDeficit",
    "SpotRebalancerFallbackCostHigh",
    "SpotRebalancerFailoverSlow",
    "SpotRebalancerDoctorFindings",
    "SpotRebalancerTargetBudgetSpent",
}
RUNBOOKS = ALERTS_FILE.parents[2] / "docs" / "runbooks.md"


def test_the_plain_file_has_every_alert() -> None:
    assert (
        set(alerts_of(yaml.safe_load(ALERTS_FILE.read_text()))) == AGENT_ALERTS | CONTROLLER_ALERTS
    )


def test_thresholds_and_switches_come_from_values(tools: Tools) -> None:
    objects = tools.template(
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.rules.agentNotPolling.staleSeconds=45",
        "--set",
        "prometheusRule.rules.agentNodeWritesFailing.for=9m",
        "--set",
        "prometheusRule.rules.agentAcknowledgementsFailing.enabled=false",
        "--set",
        "prometheusRule.rules.evictionRateHigh.threshold=25",
        "--set",
        "prometheusRule.rules.evictionRateHigh.eventTypes=Preempt|Terminate",
        "--set",
        "prometheusRule.rules.replicaDeficit.window=10m",
        "--set",
        "prometheusRule.rules.drainMissedDeadline.enabled=false",
        "--set",
        "prometheusRule.rules.failoverSlow.seconds=300",
        "--set-json",  # --set would make 0.5 a string
        "prometheusRule.rules.failoverSlow.quantile=0.5",
        "--set",
        "prometheusRule.rules.doctorFindings.for=1h",
        "--set",
        "prometheusRule.alertLabels.team=inference",
    )
    alerts = alerts_of(rule_groups(objects))
    assert set(alerts) == (AGENT_ALERTS | CONTROLLER_ALERTS) - {
        "SpotRebalancerAgentAcknowledgementsFailing",
        "SpotRebalancerDrainMissedDeadline",
    }
    assert alerts["SpotRebalancerAgentNotPolling"]["expr"].endswith("> 45")
    assert alerts["SpotRebalancerAgentNodeWritesFailing"]["for"] == "9m"
    eviction = alerts["SpotRebalancerEvictionRateHigh"]["expr"]
    assert eviction.endswith("> 25") and 'event_type=~"Preempt|Terminate"' in eviction
    assert "[10m]" in alerts["SpotRebalancerReplicaDeficit"]["expr"]
    slow = alerts["SpotRebalancerFailoverSlow"]["expr"]
    assert slow.startswith("histogram_quantile(0.5,") and slow.endswith("> 300")
    assert alerts["SpotRebalancerDoctorFindings"]["for"] == "1h"
    for rule in alerts.values():
        assert rule["labels"]["team"] == "inference"


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbooks' section headings (lower case, spaces to dashes)."""
    headings = re.findall(r"^#+ (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_a_runbook_section(tools: Tools) -> None:
    """With the runbooks' address (a release stamps it), every alert links to its own section."""
    anchors = runbook_anchors()
    published = "https://forge.example/spot-rebalancer/blob/v1.2.3/docs/runbooks.md"
    objects = tools.template(
        "--set", "prometheusRule.enabled=true", "--set", f"prometheusRule.runbookURL={published}"
    )  # fmt: skip
    alerts = alerts_of(rule_groups(objects))
    assert alerts.keys() == alerts_of(yaml.safe_load(ALERTS_FILE.read_text())).keys()
    for name, rule in alerts.items():
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == published
        assert anchor == name.lower() and anchor in anchors, f"{name}: no section #{anchor}"


def test_no_guessed_runbook_address_without_a_release(tools: Tools) -> None:
    """The chart from a source checkout does not know where its runbooks are published: no
    alert links to an address the project does not own."""
    objects = tools.template("--set", "prometheusRule.enabled=true")
    for source in (
        alerts_of(rule_groups(objects)),
        alerts_of(yaml.safe_load(ALERTS_FILE.read_text())),
    ):
        assert source
        assert not [n for n, rule in source.items() if "runbook_url" in rule["annotations"]]


def test_runbook_url_comes_from_values(tools: Tools) -> None:
    objects = tools.template(
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.runbookURL=https://wiki.example.com/spot/runbooks",
    )
    for name, rule in alerts_of(rule_groups(objects)).items():
        assert rule["annotations"]["runbook_url"] == (
            f"https://wiki.example.com/spot/runbooks#{name.lower()}"
        )


def test_controller_alerts_keep_the_cluster_apart() -> None:
    """A shared Prometheus: every aggregation of a controller alert keeps `cluster` (agent alerts
    aggregate `without`, which keeps it); promtool's cases show the leaderless cluster firing."""
    for name, rule in alerts_of(yaml.safe_load(ALERTS_FILE.read_text())).items():
        if name in AGENT_ALERTS:
            assert " by (" not in rule["expr"], name
            continue
        groupings = re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"])
        assert groupings, name
        for grouping in groupings:
            assert "cluster" in [label.strip() for label in grouping.split(",")], (name, grouping)
        assert not re.search(r"\b(max|sum|min|count)\s*\(", rule["expr"]), (
            f"{name}: an aggregation without `by (cluster, ...)`"
        )


def test_no_controller_alerts_without_the_controller(tools: Tools) -> None:
    """An agent-only install must not page for a controller it does not run (absent leader)."""
    objects = tools.template(
        "--set", "prometheusRule.enabled=true", "--set", "controller.enabled=false"
    )
    assert set(alerts_of(rule_groups(objects))) == AGENT_ALERTS


def exported_names(*registries: CollectorRegistry) -> set[str]:
    """Every series name the registries can export, whether or not a labelled child exists yet
    (labelled metrics export nothing until first used, so the samples alone would miss them)."""
    suffixes = {
        "counter": ["_total", "_created"],
        "histogram": ["_bucket", "_sum", "_count", "_created"],
        "gauge": [""],
        "info": ["_info"],
    }
    names = set()
    for registry in registries:
        for family in registry.collect():
            for suffix in suffixes[family.type]:
                names.add(family.name + suffix)
    return names


def all_exported_names() -> set[str]:
    return exported_names(AgentMetrics().registry, ControllerMetrics().registry)


def metric_names_in(expr: str) -> set[str]:
    return set(re.findall(r"\brebalancer_[a-z_]+", expr))


def test_alerts_use_only_metrics_the_processes_export() -> None:
    exported = all_exported_names()
    assert "rebalancer_controller_leader" in exported
    assert "rebalancer_agent_imds_poll_duration_seconds_bucket" in exported
    assert "rebalancer_controller_notices_total" in exported
    for name, rule in alerts_of(yaml.safe_load(ALERTS_FILE.read_text())).items():
        used = metric_names_in(rule["expr"])
        assert used, name
        assert used <= exported, f"{name} uses {used - exported}"


def test_chart_readme_values_table_is_current() -> None:
    values_text = (CHART / "values.yaml").read_text()
    assert undocumented(values_text) == [], "values.yaml keys without a `# --` description"
    readme = CHART_README.read_text()
    assert readme == readme_with_table(readme, values_table(values_text)), (
        "charts/spot-rebalancer/README.md values table is stale: run scripts/render-chart-files"
    )

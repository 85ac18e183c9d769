"""The Grafana dashboards of spot-rebalancer, as code (grafana-foundation-sdk, Grafana 11.6 schema).

`scripts/render-chart-files` runs `python -m dashboards.build`, which writes each dashboard as
JSON twice: `dashboards/<name>.json` to import into Grafana by hand, and
`charts/spot-rebalancer/dashboards/<name>.json`, which the chart ships as ConfigMaps for Grafana's
dashboard sidecar (Helm can only read files inside the chart). tests/chart/test_dashboards.py
fails when either copy differs from this code, runs every query against a real Prometheus that
scraped a real agent and controller through evictions, and checks every metric name against
rebalancer/metrics.py. Metric names come from there only: nothing here is invented.

Conventions of the queries:
- `$cluster` and `$pool` filter everything that has those labels. `cluster` is whatever external
  or target label your Prometheus sets (absent labels match the `All` value `.*`).
- Both controller replicas observe the cluster (notices, lead times, replica deficit), so those
  are taken as `max` over the replicas: a sum would count each notice twice. What only the
  leader does (cordon, drain, surge, evictions) is summed over the replicas, so a leader change
  loses nothing.
- `$__rate_interval` for rates shown over time, `$__range` for totals of the time range;
  annotations look at 1-minute windows with a 1-minute step.

Both dashboards link to each other (keeping the time range and the variables) and mark
eviction notices and blocked fail-overs as annotations on every time series.

Cost metrics are accounted by every controller replica from what it observes (the same nodes,
the same prices), so they too are taken as `max` over replicas.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_DIRS = (ROOT / "dashboards", ROOT / "charts" / "spot-rebalancer" / "dashboards")

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster"'
POOL = 'cluster=~"$cluster",pool=~"$pool"'
TAGS = ["spot-rebalancer", "azure", "spot"]
TITLES = {
    "spot-rebalancer-evictions": "Spot rebalancer: evictions and failover",
    "spot-rebalancer-cost": "Spot rebalancer: spot cost and savings",
}
# One annotation per minute in which something happened: the step and the window agree, so no
# event falls between two steps.
ANNOTATION_STEP = "1m"
# Annotations: what the Prometheus data source needs beyond the SDK's AnnotationQuery (which
# has no titleFormat, tagKeys or step), merged into the JSON by `render`.
ANNOTATIONS: dict[str, dict[str, str]] = {
    "Eviction notices": {
        "expr": "max by (pool, event_type) (sum without (source, zone, sku, priority) "
        f"(increase(rebalancer_controller_notices_total{{{POOL}}}[1m]))) > 0",
        "iconColor": "red",
        "titleFormat": "{{event_type}} on pool {{pool}}",
        "tagKeys": "pool,event_type",
    },
    "Fail-overs blocked": {
        "expr": "sum by (workload, reason) "
        f"(increase(rebalancer_controller_failovers_blocked_total{{{CLUSTER}}}[1m])) > 0",
        "iconColor": "orange",
        "titleFormat": "{{workload}} could not fail over ({{reason}})",
        "tagKeys": "workload,reason",
    },
}

Panel = timeseries.Panel | stat.Panel | table.Panel


def q(
    expr: str, legend: str = "", *, ref: str = "A", instant: bool = False
) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        query = query.legend_format(legend)
    return query.instant() if instant else query.range()


def series(
    title: str, description: str, unit: str, *queries: prometheus.Dataquery, span: int = 12
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .span(span)
        .height(8)
        .legend(
            VizLegendOptions()
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def single(title: str, description: str, unit: str, expr: str, *, span: int = 6) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .span(span)
        .height(5)
        .with_target(q(expr, instant=True))
    )


def quantiles(metric: str, by: str, where: str, *, legend: str = "") -> list[prometheus.Dataquery]:
    """p50 and p90 of a histogram, its buckets aggregated `by` (e.g. `sum by (le)`); `legend`
    goes before the quantile's name (e.g. `{{pool}} `)."""
    buckets = f"{by} (rate({metric}_bucket{{{where}}}[$__rate_interval]))"
    return [
        q(f"histogram_quantile(0.5, {buckets})", f"{legend}p50", ref="A"),
        q(f"histogram_quantile(0.9, {buckets})", f"{legend}p90", ref="B"),
    ]


def shared(board: dashboard.Dashboard, uid: str) -> dashboard.Dashboard:
    """What every dashboard has: the pickers, the annotations and links to the others."""
    for name, annotation in ANNOTATIONS.items():
        board = board.annotation(
            dashboard.AnnotationQuery()
            .name(name)
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color(annotation["iconColor"])
            .expr(annotation["expr"])
        )
    for other, title in TITLES.items():
        if other != uid:
            board = board.link(
                dashboard.DashboardLink(title)
                .type(DashboardLinkType.LINK)
                .url(f"/d/{other}")
                .icon("dashboard")
                .tooltip(f"Open {title}")
                .keep_time(True)
                .include_vars(True)
                .as_dropdown(False)
                .target_blank(False)
            )
    return variables(board.uid(uid).title(TITLES[uid]))


def variables(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """Data source, cluster and pool pickers shared by every dashboard."""
    return (
        board.with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            dashboard.QueryVariable("cluster")
            .label("Cluster")
            .datasource(DATASOURCE)
            .query("label_values(rebalancer_build_info, cluster)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
        .with_variable(
            dashboard.QueryVariable("pool")
            .label("Node pool")
            .datasource(DATASOURCE)
            .query(f"label_values(rebalancer_controller_notices_total{{{CLUSTER}}}, pool)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .include_all(True)
            .all_value(".*")
            .multi(True)
        )
    )


def evictions_and_failover() -> dashboard.Dashboard:
    notices = f"rebalancer_controller_notices_total{{{POOL}}}"
    per_replica = "sum without (source, priority)"  # one replica's notices, then max over both
    board = shared(
        dashboard.Dashboard(TITLES["spot-rebalancer-evictions"])
        .description(
            "Eviction notices on AKS spot nodes and what spot-rebalancer did about them: "
            "cordon, surge onto on-demand capacity, drain; the health of its agents and leader."
        )
        .tags(TAGS)
        .time("now-6h", "now")
        .refresh("30s")
        .tooltip(DashboardCursorSync.CROSSHAIR),
        "spot-rebalancer-evictions",
    )
    rows: list[tuple[str, list[Panel]]] = [
        (
            "Notices",
            [
                single(
                    "Notices in range",
                    "Eviction and maintenance notices first seen by the controller.",
                    "short",
                    f"sum(max by (event_type, pool, zone, sku) ({per_replica} "
                    f"(increase({notices}[$__range]))))",
                ),
                single(
                    "Nodes being acted on",
                    "Nodes with a live notice now (cordoned, draining, or waiting for Azure).",
                    "short",
                    f"max(rebalancer_controller_active_notices{{{CLUSTER}}})",
                ),
                single(
                    "Fail-overs blocked in range",
                    "Workloads on a doomed node that no on-demand pool could take "
                    "(Warning Events SpotRebalancerFailoverBlocked say why).",
                    "short",
                    f'sum(increase(rebalancer_controller_failovers_total{{{CLUSTER},stage="blocked"}}'
                    "[$__range]))",
                ),
                single(
                    "Drains that missed the deadline",
                    "Nodes cordoned for an eviction but gone before they were drained.",
                    "short",
                    f"sum(increase(rebalancer_controller_drain_missed_deadline_total{{{POOL}}}"
                    "[$__range]))",
                ),
                series(
                    "Notice rate by pool and type",
                    "Notices per hour, per node pool and event type.",
                    "short",
                    q(
                        f"max by (pool, event_type) (sum without (source, zone, sku, priority) "
                        f"(rate({notices}[$__rate_interval]))) * 3600",
                        "{{pool}} {{event_type}}",
                    ),
                ),
                table.Panel()
                .title("Notices by type, pool, zone and SKU")
                .description("Notices first seen in the time range.")
                .datasource(DATASOURCE)
                .span(12)
                .height(8)
                .with_target(
                    q(
                        f"max by (event_type, pool, zone, sku) ({per_replica} "
                        f"(increase({notices}[$__range])))",
                        instant=True,
                    ).format(PromQueryFormat.TABLE)
                ),
                series(
                    "Notice lead time",
                    "Deadline (NotBefore) minus the moment the controller first saw the notice: "
                    "the time there was to act. Azure gives spot evictions 30 s at most.",
                    "s",
                    *quantiles(
                        "rebalancer_controller_notice_lead_time_seconds", "max by (le)", CLUSTER
                    ),
                ),
            ],
        ),
        (
            "Acting on a notice",
            [
                series(
                    "Notice to cordon",
                    "From the controller seeing a notice to the node cordoned and tainted.",
                    "s",
                    *quantiles(
                        "rebalancer_controller_notice_to_cordon_seconds", "sum by (le)", CLUSTER
                    ),
                    span=8,
                ),
                series(
                    "Drain duration",
                    "From the controller seeing a notice to the node marked drained (the agent "
                    "then acknowledges the event to Azure).",
                    "s",
                    *quantiles(
                        "rebalancer_controller_drain_duration_seconds", "sum by (le)", CLUSTER
                    ),
                    span=8,
                ),
                series(
                    "Time to replacement Ready by pool",
                    "From a workload's surge to its replacement replicas Ready elsewhere, by the "
                    "spot pool whose notice caused the surge (only the leader observes it).",
                    "s",
                    *quantiles(
                        "rebalancer_controller_notice_to_replacement_ready_seconds",
                        "sum by (le, pool)",
                        POOL,
                        legend="{{pool}} ",
                    ),
                    span=8,
                ),
                series(
                    "Replica deficit",
                    "Ready replicas missing on average (base replicas minus Ready) while a "
                    "workload is being failed over. Zero means make-before-break held.",
                    "short",
                    q(
                        "max by (workload) (rate(rebalancer_controller_replica_deficit_replica_"
                        f"seconds_total{{{CLUSTER}}}[$__rate_interval]))",
                        "{{workload}}",
                    ),
                ),
                series(
                    "Pods evicted, deleted at the deadline, blocked by a PDB",
                    "Pods per second by what was done to them; eviction_blocked is a 429 from a "
                    "PodDisruptionBudget (retried every pass until the deadline).",
                    "ops",
                    q(
                        "sum by (action) (rate(rebalancer_controller_pods_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{action}}",
                    ),
                ),
                series(
                    "Fail-overs by stage and reason",
                    "Surges started, completed (by reason) and blocked (by reason), per second.",
                    "ops",
                    q(
                        "sum by (stage, reason) (rate(rebalancer_controller_failovers_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{stage}} {{reason}}",
                    ),
                ),
                series(
                    "Actions by outcome",
                    "Planned actions the leader applied: ok, noop (already so), error, dry_run.",
                    "ops",
                    q(
                        "sum by (action, outcome) (rate(rebalancer_controller_actions_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{action}} {{outcome}}",
                    ),
                ),
            ],
        ),
        (
            "Health",
            [
                series(
                    "Leader",
                    "1 for the replica that holds the Lease. Exactly one should, always.",
                    "short",
                    q(
                        f"max by (instance) (rebalancer_controller_leader{{{CLUSTER}}})",
                        "{{instance}}",
                    ),
                    span=8,
                ),
                series(
                    "Caches synced",
                    "1 once a replica's informers have listed every resource; it plans only then.",
                    "short",
                    q(
                        f"min by (instance) (rebalancer_controller_cache_synced{{{CLUSTER}}})",
                        "{{instance}}",
                    ),
                    span=8,
                ),
                series(
                    "Reconcile errors by kind",
                    "Errors while planning or acting, per second (conflicts are retried).",
                    "ops",
                    q(
                        "sum by (kind) (rate(rebalancer_controller_reconcile_errors_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{kind}}",
                    ),
                    span=8,
                ),
                series(
                    "Agent last poll age",
                    "Seconds since each agent last read Azure Scheduled Events; notices for its "
                    "VM go unseen while this grows.",
                    "s",
                    q(
                        "max by (instance, node) (time() - "
                        f"rebalancer_agent_imds_last_success_timestamp_seconds{{{CLUSTER}}})",
                        "{{instance}} {{node}}",
                    ),
                    span=8,
                ),
                series(
                    "Agent errors by kind",
                    "Agent errors per second: imds, kube_api, ack, vm_name.",
                    "ops",
                    q(
                        "sum by (kind) (rate(rebalancer_agent_errors_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{kind}}",
                    ),
                    span=8,
                ),
                series(
                    "Agent IMDS polls by outcome",
                    "Scheduled Events polls per second of all agents, by outcome.",
                    "ops",
                    q(
                        "sum by (outcome) (rate(rebalancer_agent_imds_polls_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{outcome}}",
                    ),
                    span=8,
                ),
                series(
                    "Agent acknowledgements to Azure",
                    "Drained events acknowledged to Azure (lets the eviction start early).",
                    "ops",
                    q(
                        "sum by (outcome) (rate(rebalancer_agent_acknowledgements_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "{{outcome}}",
                    ),
                ),
                series(
                    "Agent notice lead time",
                    "NotBefore minus the moment the agent first saw the event in IMDS.",
                    "s",
                    *quantiles("rebalancer_agent_notice_lead_time_seconds", "sum by (le)", CLUSTER),
                ),
            ],
        ),
        ("Eviction risk", risk_panels()),
    ]
    return numbered(board, rows)


def risk_panels() -> list[Panel]:
    """The risk model per spot pool, zone and VM size (docs/risk.md): the estimate, the inputs
    it came from, and the state of Azure's data. Every replica computes the same figures from
    the same history and data, so `max` over replicas."""
    risk = "rebalancer_pool_eviction_risk"
    return [
        table.Panel()
        .title("Eviction risk now")
        .description(
            "Estimated evictions per node-hour (about the chance that one VM is evicted within "
            "the hour) and level (0 low, 1 medium, 2 high) of each spot pool, zone and VM size. "
            "The controller logs the reasons whenever a level changes."
        )
        .datasource(DATASOURCE)
        .span(12)
        .height(8)
        .with_target(
            q(
                f'max by (pool, zone, sku) ({risk}{{{POOL},source="estimate"}})',
                instant=True,
                ref="A",
            ).format(PromQueryFormat.TABLE)
        )
        .with_target(
            q(
                f"max by (pool, zone, sku) (rebalancer_pool_eviction_risk_level{{{POOL}}})",
                instant=True,
                ref="B",
            ).format(PromQueryFormat.TABLE)
        ),
        series(
            "Estimated eviction risk",
            "Evictions per node-hour of each spot group: the prior (Azure's bucket or the "
            "settings), scaled by the Spot Placement Score, updated by the cluster's own "
            "Preempts.",
            "percentunit",
            q(
                f'max by (pool, zone, sku) ({risk}{{{POOL},source="estimate"}})',
                "{{pool}} {{zone}} {{sku}}",
            ),
        ),
        series(
            "Risk inputs",
            "What the estimate came from, per group: history (the cluster's own rate), "
            "resource_graph (Azure's bucket) or prior (settings).",
            "percentunit",
            q(
                f'max by (pool, zone, source) ({risk}{{{POOL},source!="estimate"}})',
                "{{pool}} {{zone}} {{source}}",
            ),
        ),
        series(
            "Spot Placement Score",
            "Azure's score of each group's size and zone: 3 High, 2 Medium, 1 Low, 0 none.",
            "short",
            q(
                f"max by (pool, zone, sku) (rebalancer_spot_placement_score{{{POOL}}})",
                "{{pool}} {{zone}}",
            ),
            span=6,
        ),
        series(
            "Azure risk data refresh errors",
            "Failed fetches from Resource Graph and the Spot Placement Score API, by reason; "
            "the last good data stays in use until it is too old.",
            "short",
            q(
                "sum by (source, reason) (increase(rebalancer_risk_refresh_errors_total"
                f"{{{CLUSTER}}}[$__rate_interval]))",
                "{{source}} {{reason}}",
            ),
            span=6,
        ),
        series(
            "Azure risk data age",
            "Seconds since the data in use was fetched (only with the Azure APIs enabled).",
            "s",
            q(
                f"max by (source) (rebalancer_risk_source_age_seconds{{{CLUSTER}}})",
                "{{source}}",
            ),
        ),
    ]


def cost_and_savings() -> dashboard.Dashboard:
    board = shared(
        dashboard.Dashboard(TITLES["spot-rebalancer-cost"])
        .description(
            "What the nodes cost, what spot saves against the same nodes on demand, what running "
            "replicas on on-demand capacity (fallback) costs, and the prices behind it."
        )
        .tags(TAGS)
        .time("now-24h", "now")
        .refresh("1m")
        .tooltip(DashboardCursorSync.CROSSHAIR),
        "spot-rebalancer-cost",
    )
    usd = "currencyUSD"
    rows: list[tuple[str, list[Panel]]] = [
        (
            "Now",
            [
                single(
                    "Cost per hour",
                    "What every node costs now, at the prices in use.",
                    usd,
                    f"sum(max by (pool, priority) (rebalancer_cost_per_hour_dollars{{{POOL}}}))",
                    span=5,
                ),
                single(
                    "Spot saves per hour",
                    "On-demand price minus spot price of every spot node, now.",
                    usd,
                    f"max(rebalancer_savings_per_hour_dollars{{{CLUSTER}}})",
                    span=5,
                ),
                single(
                    "Spot saves, share of on-demand",
                    "What spot saves now as a share of what the same nodes would cost on "
                    "demand: savings / (cost + savings), per hour, over every pool (savings "
                    "have no pool label).",
                    "percent",
                    f"100 * max(rebalancer_savings_per_hour_dollars{{{CLUSTER}}}) / "
                    f"(sum(max by (pool, priority) (rebalancer_cost_per_hour_dollars{{{CLUSTER}}}))"
                    f" + max(rebalancer_savings_per_hour_dollars{{{CLUSTER}}}))",
                    span=4,
                ),
                single(
                    "Saved in range",
                    "What spot saved against the same nodes on demand, in the time range.",
                    usd,
                    f"max(increase(rebalancer_savings_dollars_total{{{CLUSTER}}}[$__range]))",
                    span=5,
                ),
                single(
                    "Fallback replicas",
                    "Replicas that could run on spot but run on on-demand nodes now.",
                    "short",
                    f"max(rebalancer_fallback_replicas{{{CLUSTER}}})",
                    span=5,
                ),
            ],
        ),
        (
            "Over time",
            [
                series(
                    "Cost per hour by pool and priority",
                    "What the nodes of each pool cost, USD per hour.",
                    usd,
                    q(
                        f"max by (pool, priority) (rebalancer_cost_per_hour_dollars{{{POOL}}})",
                        "{{pool}} ({{priority}})",
                    ),
                ),
                series(
                    "Spend rate by priority",
                    "USD per hour spent on spot and on regular (on-demand) nodes.",
                    usd,
                    q(
                        "max by (priority) (rate(rebalancer_spend_dollars_total"
                        f"{{{CLUSTER}}}[$__rate_interval])) * 3600",
                        "{{priority}}",
                    ),
                ),
                series(
                    "Savings per hour",
                    "What spot saves against running the same nodes on demand.",
                    usd,
                    q(f"max(rebalancer_savings_per_hour_dollars{{{CLUSTER}}})", "saved"),
                ),
                series(
                    "On-demand fallback cost",
                    "USD per hour of on-demand capacity taken by replicas that could run on spot "
                    "(their share of the nodes they run on).",
                    usd,
                    q(
                        "max(rate(rebalancer_fallback_cost_dollars_total"
                        f"{{{CLUSTER}}}[$__rate_interval])) * 3600",
                        "fallback",
                    ),
                ),
                series(
                    "Fallback replicas",
                    "Replicas on on-demand nodes that could run on spot; returns to spot bring "
                    "them back when it is safe.",
                    "short",
                    q(f"max(rebalancer_fallback_replicas{{{CLUSTER}}})", "replicas"),
                ),
                series(
                    "Preempt notices in sliding windows",
                    "Spot evictions per pool within each window the controller keeps (they "
                    "lengthen a pool's cool-down and hold back returns).",
                    "short",
                    q(
                        f"max by (pool, window) (rebalancer_evictions{{{POOL}}})",
                        "{{pool}} {{window}}",
                    ),
                ),
            ],
        ),
        (
            "Availability targets",
            [
                series(
                    "Error budget spent",
                    "Per workload with an availability target: the seconds below its owner's "
                    "count over the seconds the target allowed so far (100 %: all of it; above "
                    "90 % the controller plans the target for a tenth of its budget).",
                    "percentunit",
                    q(
                        "max by (namespace, workload) "
                        f"(rebalancer_target_budget_spent_ratio{{{CLUSTER}}})",
                        "{{namespace}}/{{workload}}",
                    ),
                    span=6,
                ),
                series(
                    "All Ready",
                    "Per workload with an availability target: the share of the time since its "
                    "owner's count was first all Ready with that count all Ready.",
                    "percentunit",
                    q(
                        "max by (namespace, workload) "
                        f"(rebalancer_target_all_ready_ratio{{{CLUSTER}}})",
                        "{{namespace}}/{{workload}}",
                    ),
                    span=6,
                ),
                series(
                    "Replicas the targets keep",
                    "The plan in force per workload: on spot (waiting: of those, left waiting "
                    "in zones without spot capacity) and on on-demand, beside its owner's count.",
                    "short",
                    q(
                        "max by (namespace, workload, kind) "
                        f"(rebalancer_target_replicas{{{CLUSTER}}})",
                        "{{namespace}}/{{workload}} {{kind}}",
                    ),
                ),
            ],
        ),
        (
            "Prices",
            [
                table.Panel()
                .title("Prices of the SKUs in use")
                .description("USD per hour by SKU, region and priority, from the price table.")
                .datasource(DATASOURCE)
                .unit(usd)
                .span(12)
                .height(8)
                .with_target(
                    q(
                        "max by (sku, region, priority) "
                        f"(rebalancer_sku_price_dollars_per_hour{{{CLUSTER}}})",
                        instant=True,
                    ).format(PromQueryFormat.TABLE)
                ),
                series(
                    "Price table source",
                    "Where the prices in use come from (bundled, file or the Retail Prices API).",
                    "short",
                    q(f"max by (source) (rebalancer_price_table_info{{{CLUSTER}}})", "{{source}}"),
                    span=6,
                ),
                series(
                    "Price table age and unpriced nodes",
                    "Seconds since the prices were loaded; nodes left out of the cost for want "
                    "of a price.",
                    "short",
                    q(f"max(rebalancer_price_table_age_seconds{{{CLUSTER}}})", "age (s)", ref="A"),
                    q(f"max(rebalancer_unpriced_nodes{{{CLUSTER}}})", "unpriced nodes", ref="B"),
                    q(
                        "sum(increase(rebalancer_price_refresh_errors_total"
                        f"{{{CLUSTER}}}[$__rate_interval]))",
                        "refresh errors",
                        ref="C",
                    ),
                    span=6,
                ),
            ],
        ),
    ]
    return numbered(board, rows)


def numbered(
    board: dashboard.Dashboard, rows: list[tuple[str, list[Panel]]]
) -> dashboard.Dashboard:
    """Rows and their panels, with ids unique in the dashboard (Grafana links use them)."""
    panel_id = 1
    for title, panels in rows:
        board = board.with_row(dashboard.Row(title).id(panel_id))
        panel_id += 1
        for panel in panels:
            board = board.with_panel(panel.id(panel_id))
            panel_id += 1
    return board


DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "spot-rebalancer-evictions": evictions_and_failover,
    "spot-rebalancer-cost": cost_and_savings,
}


def render(name: str) -> str:
    """One dashboard as the JSON that is committed (stable key order, trailing newline)."""
    document = json.loads(json.dumps(DASHBOARDS[name]().build(), cls=JSONEncoder))
    for annotation in document["annotations"]["list"]:
        extra = ANNOTATIONS[annotation["name"]]
        annotation.update({key: value for key, value in extra.items() if key != "expr"})
        annotation["step"] = ANNOTATION_STEP
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def main() -> int:
    for directory in OUTPUT_DIRS:
        directory.mkdir(parents=True, exist_ok=True)
        for name in DASHBOARDS:
            (directory / f"{name}.json").write_text(render(name))
    where = ", ".join(str(directory.relative_to(ROOT)) for directory in OUTPUT_DIRS)
    print(f"wrote {len(DASHBOARDS)} dashboard(s) to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every Prometheus metric of the project, in one place.

Base units and suffixes (`_seconds`, `_total`), bounded labels only: event_type, outcome, kind,
pool, zone, sku, priority, workload. Never a node, pod or event id as a label. Each process gets
its own registry, so tests can run several in one interpreter.

Every label value known in advance gets a child at zero when the metrics are built (`initialise`),
and the controller adds those it learns at run time (pools, workloads) before anything is counted
for them. Prometheus' `rate()` and `increase()` only see a change between two samples: a series
that is born with its first event already in it hides that event, so the first eviction of a pool
or the first blocked fail-over would never show on a dashboard nor fire an alert.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from rebalancer import __version__
from rebalancer.vocabulary import EVENT_TYPE_LABELS

# Re-exported: the agent takes it from here.
from rebalancer.vocabulary import event_type_label as event_type_label  # noqa: PLC0414

POLL_OUTCOMES = (
    "ok", "timeout", "connection_error", "http_error", "rate_limited", "gone", "parse_error",
    "too_large",
)  # fmt: skip
ENDED_OUTCOMES = ("cancelled", "completed", "ended")
WRITE_OUTCOMES = ("ok", "error")
AGENT_SKIP_REASONS = ("malformed_event", "odd_field", "unknown_event_type", "malformed_annotation")
AGENT_ERROR_KINDS = ("imds", "kube_api", "ack", "vm_name")
POD_ACTIONS = ("evicted", "deleted", "eviction_blocked")
RISK_SOURCES = ("resource_graph", "placement_score")  # the fetched ones
RISK_ERROR_REASONS = ("throttled", "auth", "timeout", "connection", "http_error", "parse", "empty")

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
LEAD_TIME_BUCKETS = (0, 5, 10, 15, 20, 25, 30, 45, 60, 120, 300, 600, 900, 1800, 3600)


def initialise(metric: Counter | Histogram, *label_values: Iterable[str]) -> None:
    """A child at zero for every combination of the given label values (see the module doc)."""
    for combination in itertools.product(*label_values):
        metric.labels(*combination)


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        Info("rebalancer_build", "Version of the running rebalancer.", registry=r).info(
            {"version": __version__, "component": "agent"}
        )
        self.polls = Counter(
            "rebalancer_agent_imds_polls_total",
            "Scheduled Events polls by outcome (ok, timeout, connection_error, http_error, "
            "rate_limited, gone, parse_error, too_large).",
            ["outcome"],
            registry=r,
        )
        self.poll_duration = Histogram(
            "rebalancer_agent_imds_poll_duration_seconds",
            "Time of one Scheduled Events poll, retries included.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            "rebalancer_agent_imds_last_success_timestamp_seconds",
            "Unix time of the last poll that returned a readable document.",
            registry=r,
        )
        self.events_seen = Counter(
            "rebalancer_agent_scheduled_events_seen_total",
            "Scheduled events for this VM seen for the first time, by type.",
            ["event_type"],
            registry=r,
        )
        self.events_ended = Counter(
            "rebalancer_agent_scheduled_events_ended_total",
            "Scheduled events for this VM that disappeared, by type and outcome "
            "(cancelled, completed, ended).",
            ["event_type", "outcome"],
            registry=r,
        )
        self.events_pending = Gauge(
            "rebalancer_agent_scheduled_events_pending",
            "Scheduled events for this VM currently listed by IMDS.",
            registry=r,
        )
        self.lead_time = Histogram(
            "rebalancer_agent_notice_lead_time_seconds",
            "NotBefore minus the time the agent first saw the event.",
            ["event_type"],
            buckets=LEAD_TIME_BUCKETS,
            registry=r,
        )
        self.publish_latency = Histogram(
            "rebalancer_agent_publish_latency_seconds",
            "Time from first seeing an event to its Node condition being written.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.node_writes = Counter(
            "rebalancer_agent_node_writes_total",
            "Writes of the condition or annotation on the Node, by outcome (ok, error, "
            "annotation_refused: the API server refused the annotation, the condition carries it).",
            ["outcome"],
            registry=r,
        )
        self.acknowledgements = Counter(
            "rebalancer_agent_acknowledgements_total",
            "Events acknowledged to Azure, by type and outcome (ok, error).",
            ["event_type", "outcome"],
            registry=r,
        )
        self.skipped = Counter(
            "rebalancer_agent_skipped_total",
            "Input the agent could not use and skipped, by reason.",
            ["reason"],
            registry=r,
        )
        self.errors = Counter(
            "rebalancer_agent_errors_total",
            "Errors by kind (imds, kube_api, ack, vm_name).",
            ["kind"],
            registry=r,
        )
        initialise(self.polls, POLL_OUTCOMES)
        initialise(self.events_seen, EVENT_TYPE_LABELS)
        initialise(self.events_ended, EVENT_TYPE_LABELS, ENDED_OUTCOMES)
        initialise(self.lead_time, EVENT_TYPE_LABELS)
        initialise(self.node_writes, WRITE_OUTCOMES)
        initialise(self.acknowledgements, EVENT_TYPE_LABELS, WRITE_OUTCOMES)
        initialise(self.skipped, AGENT_SKIP_REASONS)
        initialise(self.errors, AGENT_ERROR_KINDS)


WEBHOOK_OUTCOMES = (
    "placed", "no_policy", "no_fit", "unknown_workload", "not_pod", "not_ready", "unreadable",
    "bad_request", "error",
)  # fmt: skip
WEBHOOK_OWNER_LOOKUPS = ("informer", "fetched", "absent", "failed", "busy", "timeout")
WEBHOOK_TLS_ERRORS = ("api", "unreadable", "expiring", "no_configuration")
WEBHOOK_CONNECTIONS_CLOSED = (
    "displaced", "over_cap", "handshake_timeout", "handshake_failed", "write_timeout",
)  # fmt: skip
WEBHOOK_REQUESTS_REFUSED = ("too_large", "body_timeout", "too_deep", "not_json", "not_review")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        Info("rebalancer_build", "Version of the running rebalancer.", registry=r).info(
            {"version": __version__, "component": "controller"}
        )
        self.doctor_findings = Gauge(
            "rebalancer_doctor_findings",
            "Misconfigurations the doctor finds now, by check (kubectl spot-rebalancer doctor "
            "says what to change).",
            ["check"],
            registry=r,
        )
        self.notices = Counter(
            "rebalancer_controller_notices_total",
            "Notices first seen, by event type, source, pool, zone, SKU and priority.",
            ["event_type", "source", "pool", "zone", "sku", "priority"],
            registry=r,
        )
        self.notice_lead_time = Histogram(
            "rebalancer_controller_notice_lead_time_seconds",
            "Deadline minus the time the controller first saw the notice.",
            ["event_type"],
            buckets=LEAD_TIME_BUCKETS,
            registry=r,
        )
        self.notice_to_cordon = Histogram(
            "rebalancer_controller_notice_to_cordon_seconds",
            "From the controller seeing a notice to the node being cordoned.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.drain_duration = Histogram(
            "rebalancer_controller_drain_duration_seconds",
            "From the controller seeing a notice to the node marked drained.",
            buckets=LEAD_TIME_BUCKETS,
            registry=r,
        )
        self.drain_missed_deadline = Counter(
            "rebalancer_controller_drain_missed_deadline_total",
            "Nodes gone before they were marked drained, by pool and why: late_notice (first "
            "seen with less time left than the drain margin), eviction_blocked (a "
            "PodDisruptionBudget refused an eviction), pods_terminating (pods still shutting "
            "down), pods_left (pods not yet deleted), other.",
            ["pool", "reason"],
            registry=r,
        )
        self.pods = Counter(
            "rebalancer_controller_pods_total",
            "Pods acted on: evicted, deleted (at the deadline), eviction_blocked (429).",
            ["action"],
            registry=r,
        )
        self.failovers = Counter(
            "rebalancer_controller_failovers_total",
            "Workload surges by stage: started, completed (by reason), blocked (by reason).",
            ["stage", "reason"],
            registry=r,
        )
        self.failovers_blocked = Counter(
            "rebalancer_controller_failovers_blocked_total",
            "Blocked fail-overs by workload (namespace/name) and reason: the count of "
            'failovers_total{stage="blocked"}, naming the workload for an alert.',
            ["workload", "reason"],
            registry=r,
        )
        self.replacement_ready = Histogram(
            "rebalancer_controller_notice_to_replacement_ready_seconds",
            "From a workload's surge to its replacements being Ready, by the pool of the node "
            "under notice (the first, when a wave surged it from several).",
            ["pool"],
            buckets=LEAD_TIME_BUCKETS,
            registry=r,
        )
        self.replica_deficit = Counter(
            "rebalancer_controller_replica_deficit_replica_seconds_total",
            "Integral over time of desired minus Ready replicas of managed workloads.",
            ["workload"],
            registry=r,
        )
        self.actions = Counter(
            "rebalancer_controller_actions_total",
            "Planned actions by kind and outcome (ok, error, dry_run, noop).",
            ["action", "outcome"],
            registry=r,
        )
        self.leader = Gauge(
            "rebalancer_controller_leader", "1 while this replica leads.", registry=r
        )
        self.reconcile_errors = Counter(
            "rebalancer_controller_reconcile_errors_total",
            "Errors while planning or acting, by kind.",
            ["kind"],
            registry=r,
        )
        self.inputs_refused = Counter(
            "rebalancer_controller_inputs_refused_total",
            "Workloads left alone because a record of ours on them could not be read (counted "
            "once each time it appears), by kind.",
            ["kind"],
            registry=r,
        )
        self.planning_failures = Counter(
            "rebalancer_controller_planning_failures_total",
            "Objects a planning method failed on and left alone for the pass (counted once each "
            "time a failure appears), by method.",
            ["method"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "rebalancer_controller_reconcile_duration_seconds",
            "Time of one plan-and-act pass.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.skipped = Counter(
            "rebalancer_controller_skipped_total",
            "Signals that could not be used, by reason.",
            ["reason"],
            registry=r,
        )
        self.cache_synced = Gauge(
            "rebalancer_controller_cache_synced",
            "1 once every informer has listed.",
            registry=r,
        )
        self.risk_moves = Counter(
            "rebalancer_controller_risk_moves_total",
            "Moves of a replica off a spot group riskier than its workload's placement policy "
            "accepts: started, and finished by reason (MovedOffRisk, NoticeDuringReturn, "
            "LandedOutsidePolicy, SpotReplicaNotReady, RetiredPodGone, ReplicasChangedByOthers).",
            ["outcome"],
            registry=r,
        )
        self.returns = Counter(
            "rebalancer_controller_returns_total",
            "Returns to spot: started, and finished by reason (ReturnedToSpot, "
            "NoticeDuringReturn, LandedOnDemand, SpotReplicaNotReady, RetiredPodGone, "
            "ReplicasChangedByOthers).",
            ["outcome"],
            registry=r,
        )
        self.active_notices = Gauge(
            "rebalancer_controller_active_notices",
            "Nodes with a notice being acted on.",
            registry=r,
        )
        # ---- cost (computed by every replica, leader or not, from what it observes) ----
        self.cost_per_hour = Gauge(
            "rebalancer_cost_per_hour_dollars",
            "What the nodes cost now, USD per hour, by pool and priority (spot or regular).",
            ["pool", "priority"],
            registry=r,
        )
        self.spend = Counter(
            "rebalancer_spend_dollars_total",
            "USD spent on nodes since this process started, by priority.",
            ["priority"],
            registry=r,
        )
        self.savings_per_hour = Gauge(
            "rebalancer_savings_per_hour_dollars",
            "USD per hour that spot saves against running the same nodes on demand.",
            registry=r,
        )
        self.savings = Counter(
            "rebalancer_savings_dollars_total",
            "USD saved by spot against the same nodes on demand since this process started.",
            registry=r,
        )
        self.fallback_replicas = Gauge(
            "rebalancer_fallback_replicas",
            "Replicas that could run on spot but run on on-demand nodes.",
            registry=r,
        )
        self.fallback_replica_hours = Counter(
            "rebalancer_fallback_replica_hours_total",
            "Replica-hours run on on-demand nodes by workloads that could run on spot.",
            registry=r,
        )
        self.fallback_cost = Counter(
            "rebalancer_fallback_cost_dollars_total",
            "USD of those replicas' share of on-demand nodes.",
            registry=r,
        )
        self.sku_price = Gauge(
            "rebalancer_sku_price_dollars_per_hour",
            "Price of each SKU in use, USD per hour, by region and priority.",
            ["sku", "region", "priority"],
            registry=r,
        )
        self.unpriced_nodes = Gauge(
            "rebalancer_unpriced_nodes",
            "Nodes whose SKU and region have no price in the table (left out of the cost).",
            registry=r,
        )
        self.price_table_age = Gauge(
            "rebalancer_price_table_age_seconds",
            "Seconds since the price table in use was loaded.",
            registry=r,
        )
        self.price_table_source = Gauge(
            "rebalancer_price_table_info",
            "1 for the source of the price table in use.",
            ["source"],
            registry=r,
        )
        self.price_refresh_errors = Counter(
            "rebalancer_price_refresh_errors_total",
            "Failed refreshes from the Retail Prices API (the last good table stays in use).",
            registry=r,
        )
        self.evictions = Gauge(
            "rebalancer_evictions",
            "Preempt notices seen in a sliding window, by pool, SKU, zone and window.",
            ["pool", "sku", "zone", "window"],
            registry=r,
        )
        # ---- eviction risk (every replica, from the history and Azure's data it holds) ----
        self.eviction_risk = Gauge(
            "rebalancer_pool_eviction_risk",
            "Estimated evictions per node-hour of a spot node group (source=estimate), and the "
            "inputs it came from: history (the cluster's own rate), resource_graph (Azure's "
            "bucket), prior (settings), each only while it is used.",
            ["pool", "zone", "sku", "source"],
            registry=r,
        )
        self.eviction_risk_level = Gauge(
            "rebalancer_pool_eviction_risk_level",
            "Risk level of a spot node group: 0 low, 1 medium, 2 high.",
            ["pool", "zone", "sku"],
            registry=r,
        )
        self.placement_score = Gauge(
            "rebalancer_spot_placement_score",
            "Azure's Spot Placement Score of a spot node group's size and zone in use: 3 High, "
            "2 Medium, 1 Low, 0 none (not fetched, stale, DataNotFoundOrStale).",
            ["pool", "zone", "sku"],
            registry=r,
        )
        self.risk_source_age = Gauge(
            "rebalancer_risk_source_age_seconds",
            "Seconds since the risk data in use was fetched from Azure (resource_graph, "
            "placement_score); absent until a first fetch succeeds.",
            ["source"],
            registry=r,
        )
        self.risk_refresh_errors = Counter(
            "rebalancer_risk_refresh_errors_total",
            "Failed fetches of risk data from Azure by source and reason (throttled, auth, "
            "timeout, connection, http_error, parse, empty); the last good data stays in use.",
            ["source", "reason"],
            registry=r,
        )
        self.webhook_reviews = Counter(
            "rebalancer_webhook_reviews_total",
            "Pod admission reviews by outcome: placed, no_policy (the workload has none), "
            "no_fit (no pool its policy allows fits the pod), unknown_workload, not_pod, "
            "not_ready (caches not synced), unreadable (a GPU request that is not a quantity, "
            "such as full-width digits), bad_request, error (a bug: the pod was allowed "
            "unchanged).",
            ["outcome"],
            registry=r,
        )
        self.webhook_owner_lookups = Counter(
            "rebalancer_webhook_owner_lookups_total",
            "Workloads of new pods the last pass's view did not show yet (a brand-new workload's "
            "first pods), by result: informer (in the controller's live cache), fetched (one "
            "list of its name), absent (no such Deployment or StatefulSet owning the pod, or one "
            "with records of ours), failed (the list failed), busy (too many lookups at once), "
            "timeout (not learnt within the webhook's lookup bound); all but informer and "
            "fetched leave the pod unplaced.",
            ["result"],
            registry=r,
        )
        self.webhook_seconds = Histogram(
            "rebalancer_webhook_review_seconds",
            "Time to answer one admission review, from the request read to the answer ready.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.placements = Counter(
            "rebalancer_placements_total",
            "New pods placed by a workload's policy, by the capacity chosen (spot, on_demand).",
            ["namespace", "workload", "capacity"],
            registry=r,
        )
        self.webhook_tls_errors = Counter(
            "rebalancer_webhook_tls_errors_total",
            "Problems keeping the webhook's certificate: api (cannot read or write), unreadable "
            "(a Secret without the keys), expiring (cert-manager's does not serve), "
            "no_configuration (no MutatingWebhookConfiguration to put the CA in).",
            ["reason"],
            registry=r,
        )
        self.notifications = Counter(
            "rebalancer_notifications_total",
            "Notifications to the chat or webhook (REBALANCER_NOTIFY_WEBHOOK_URL) by target "
            "(slack, teams, generic) and outcome: sent, failed (an error, or a 429 or 5xx still "
            "there after the retries), rate_limited, queue_full (both dropped unsent).",
            ["target", "outcome"],
            registry=r,
        )
        self.webhook_connections = Gauge(
            "rebalancer_webhook_connections",
            "Connections open to the webhook's port, TLS handshakes included (at most "
            "webhook_max_connections).",
            registry=r,
        )
        self.webhook_connections_closed = Counter(
            "rebalancer_webhook_connections_closed_total",
            "Connections the webhook closed early: displaced (at the cap, the oldest never "
            "answered one, reset to make room for a new one), over_cap (a new one reset: every "
            "connection had been answered), handshake_timeout (no TLS handshake within "
            "webhook_handshake_timeout_seconds), handshake_failed (not TLS, or refused by it), "
            "write_timeout (did not read its answers for webhook_request_timeout_seconds).",
            ["reason"],
            registry=r,
        )
        self.webhook_requests_refused = Counter(
            "rebalancer_webhook_requests_refused_total",
            "Requests to the webhook answered with an HTTP error, by reason: too_large (body "
            "over webhook_max_body_bytes), body_timeout, too_deep (JSON nested deeper than "
            "webhook_max_json_depth), not_json, not_review (JSON, but no AdmissionReview).",
            ["reason"],
            registry=r,
        )
        self.target = Gauge(
            "rebalancer_target_percent",
            "A workload's availability target: the share of time its owner's replica count is "
            "to be all Ready, in percent (spot-rebalancer.io/availability-target).",
            ["namespace", "workload"],
            registry=r,
        )
        self.target_all_ready = Gauge(
            "rebalancer_target_all_ready_ratio",
            "Share of the time since a workload's owner's count was first all Ready (its "
            "target's account opened) with that count all Ready.",
            ["namespace", "workload"],
            registry=r,
        )
        self.target_budget_spent = Gauge(
            "rebalancer_target_budget_spent_ratio",
            "Seconds below a workload's owner's count over the seconds its target allowed so "
            "far: 1 is all of its error budget spent; above 0.9 the target counts as missed "
            "and is planned for a tenth of its budget until it is met again.",
            ["namespace", "workload"],
            registry=r,
        )
        self.target_replicas = Gauge(
            "rebalancer_target_replicas",
            "The plan in force of a workload with an availability target, by kind: owner (its "
            "owner's count), spot, on_demand, waiting (spot replicas left waiting in zones "
            "without spot capacity, among spot).",
            ["namespace", "workload", "kind"],
            registry=r,
        )
        self.policy_refused = Gauge(
            "rebalancer_placement_policy_refused",
            "1 while a workload's declared placement policy is invalid (the last valid one, if "
            "any, stays in force).",
            ["namespace", "workload"],
            registry=r,
        )
        # The rest (pools, workloads, reasons, actions) the controller initialises itself.
        initialise(self.webhook_reviews, WEBHOOK_OUTCOMES)
        initialise(self.webhook_tls_errors, WEBHOOK_TLS_ERRORS)
        initialise(self.webhook_owner_lookups, WEBHOOK_OWNER_LOOKUPS)
        initialise(self.webhook_connections_closed, WEBHOOK_CONNECTIONS_CLOSED)
        initialise(self.webhook_requests_refused, WEBHOOK_REQUESTS_REFUSED)
        initialise(self.notice_lead_time, EVENT_TYPE_LABELS)
        initialise(self.pods, POD_ACTIONS)
        initialise(self.risk_refresh_errors, RISK_SOURCES, RISK_ERROR_REASONS)

"""Every Prometheus metric of the project, in one place.

Base units and suffixes (`_seconds`, `_total`), bounded labels only: event_type, outcome, kind,
pool, zone, sku, priority, workload. Never a node, pod or event id as a label. Each process gets
its own registry, so tests can run several in one interpreter.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from rebalancer import __version__

EVENT_TYPE_LABELS = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate", "Unknown")

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
LEAD_TIME_BUCKETS = (0, 5, 10, 15, 20, 25, 30, 45, 60, 120, 300, 600, 900, 1800, 3600)


def event_type_label(event_type: str) -> str:
    """Map any string from IMDS onto the bounded label set."""
    return event_type if event_type in EVENT_TYPE_LABELS else "Unknown"


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
            "Writes of the condition or annotation on the Node, by outcome (ok, error).",
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

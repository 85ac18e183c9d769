"""The controller's settings, validated at start (pydantic-settings).

The planner's and the risk model's settings are declared once, in their own types, and nested
here; every setting is still named flat (REBALANCER_RETURN_QUIET_SECONDS, --return-quiet-seconds):
rebalancer.config.NestedSettings says how.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator

from rebalancer.azure.prices import parse_price_file
from rebalancer.config import NestedSettings
from rebalancer.controller.planning.settings import Settings
from rebalancer.controller.risk import RiskSettings
from rebalancer.setting_groups import group

# What notifications are about (rebalancer.controller.messages.Kind spells the same words).
NOTIFY_KINDS = ("notice", "failover_blocked", "deadline_missed", "risk_move")


class ControllerSettings(NestedSettings):
    """The controller's settings: its own, and the planner's and the risk model's, nested as
    their own types (`planner`, `risk`) and named flat like the rest: REBALANCER_<NAME>."""

    http_port: int = Field(
        9102, ge=0, le=65535, description="Port of the controller's HTTP server."
    )
    namespace: str = Field(
        "spot-rebalancer",
        validation_alias=AliasChoices("namespace", "REBALANCER_NAMESPACE", "POD_NAMESPACE"),
        description="Namespace of the leader-election Lease (POD_NAMESPACE from the downward API).",
    )
    identity: str = Field(
        "",
        validation_alias=AliasChoices("identity", "REBALANCER_IDENTITY", "POD_NAME"),
        description="This replica's name in the Lease; unset: host name and a random suffix.",
    )
    lease_name: str = Field("spot-rebalancer-controller", description="Name of the Lease.")
    lease_duration_seconds: float = Field(15.0, gt=0, description="Lease duration.")
    renew_deadline_seconds: float = Field(10.0, gt=0, description="Give up leading after this.")
    retry_period_seconds: float = Field(2.0, gt=0, description="Between lease attempts.")
    dry_run: bool = Field(
        False,
        description="Plan, log and count what it would do, and write nothing but its Lease "
        "(so that one replica reports).",
    )
    resync_seconds: float = Field(
        1.0, gt=0, le=60, description="Plan at least this often, even without a change."
    )
    doctor_interval_seconds: float = Field(
        300.0,
        ge=0,
        description="Run the doctor's checks this often (Warning Events, a gauge); 0: never.",
    )
    helm_chart: str = Field(
        "",
        description="The chart the doctor's `helm upgrade` fixes name (the chart sets it from "
        "`chartReference`, the published `oci://` chart); unset: `<chart>`.",
    )
    helm_chart_version: str = Field(
        "", description="The chart version those fixes pin (the chart sets its own); unset: none."
    )
    # The planner's (REBALANCER_DEADLINE_MARGIN_SECONDS, REBALANCER_RETURN_*, REBALANCER_TARGET_*).
    planner: Settings = group(Settings, prefix="")
    webhook_enabled: bool = Field(
        False,
        description="Serve the admission webhook that places new pods of workloads with a "
        "placement policy (docs/placement.md); the chart's controller.webhook installs it.",
    )
    webhook_port: int = Field(9443, ge=1, le=65535, description="Port of the admission webhook.")
    webhook_service: str = Field(
        "spot-rebalancer-webhook",
        description="The webhook's Service: its certificate is issued for the Service's names.",
    )
    webhook_secret: str = Field(
        "spot-rebalancer-webhook-tls",
        description="Secret (in the controller's namespace) with the webhook's CA and certificate.",
    )
    webhook_configuration: str = Field(
        "spot-rebalancer",
        description="The MutatingWebhookConfiguration whose caBundle the controller keeps.",
    )
    webhook_cert_manager: bool = Field(
        False,
        description="cert-manager issues the certificate and injects the CA: only read the Secret.",
    )
    webhook_tls_check_seconds: float = Field(
        60.0, gt=0, le=3600, description="How often the webhook's Secret is read (and renewed)."
    )
    webhook_handshake_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        description="A client must finish the webhook's TLS handshake within this (and answer "
        "our TLS close within this).",
    )
    webhook_request_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description="A webhook connection must send a request's headers within this of the "
        "handshake or of the last answer; an idle keep-alive connection is closed after it.",
    )
    webhook_body_timeout_seconds: float = Field(
        5.0, gt=0, le=60, description="A request's body must arrive within this of its headers."
    )
    webhook_max_connections: int = Field(
        256,
        ge=1,
        le=10_000,
        description="Connections the webhook holds at once, TLS handshakes included (each costs "
        "about 300 KiB); one more is reset at once.",
    )
    webhook_max_body_bytes: int = Field(
        3 * 1024 * 1024,
        ge=4096,
        le=64 * 1024 * 1024,
        description="Largest AdmissionReview read (the API server's own request limit is 3 MiB).",
    )
    webhook_max_json_depth: int = Field(
        64,
        ge=8,
        le=500,
        description="Deepest JSON nesting read in an AdmissionReview (a Pod needs about 15).",
    )
    client_qps: float = Field(
        50.0, gt=0, description="API requests per second the controller sends, on average."
    )
    client_burst: int = Field(
        100, ge=1, description="API requests the controller may send at once above that rate."
    )
    watch_timeout_seconds: int = Field(300, ge=10, description="Server-side watch timeout.")
    write_attempts: int = Field(
        3, ge=1, le=10, description="Tries of one write on a 409, a 429 (not a PDB's) or a 5xx."
    )
    write_retry_max_seconds: float = Field(
        2.0, ge=0, le=30, description="Longest wait between tries (a Retry-After is cut to it)."
    )
    prices_file: str | None = Field(
        None, description="A price file (mounted ConfigMap) that overrides the bundled prices."
    )
    prices_api_enabled: bool = Field(
        False, description="Refresh prices from the Azure Retail Prices API."
    )
    prices_api_url: str = Field(
        "https://prices.azure.com/api/retail/prices", description="The Retail Prices API."
    )
    prices_refresh_seconds: float = Field(
        3600.0, ge=60, description="Refresh prices from the API this often."
    )
    # The risk model's (REBALANCER_RISK_*); the feeds' below are the controller's own.
    risk: RiskSettings = group(RiskSettings, prefix="risk_")
    risk_resource_graph_enabled: bool = Field(
        False,
        description="Fetch Azure's spot eviction-rate buckets from Resource Graph (Workload "
        "Identity with Reader).",
    )
    risk_resource_graph_refresh_seconds: float = Field(
        3600.0, ge=600, description="Fetch the eviction-rate buckets this often."
    )
    risk_placement_score_enabled: bool = Field(
        False,
        description="Fetch Spot Placement Scores (Workload Identity with the Compute "
        "Recommendations Role on azure_subscription_id).",
    )
    risk_placement_score_refresh_seconds: float = Field(
        1200.0,
        ge=900,
        le=1800,
        description="Fetch Spot Placement Scores this often (Microsoft asks for 15-30 minutes).",
    )
    risk_retry_seconds: float = Field(
        300.0,
        ge=30,
        description="After a failed fetch, try again this much later (or after Azure's "
        "Retry-After, if longer).",
    )
    azure_subscription_id: str = Field(
        "", description="Subscription the Spot Placement Score API is called in."
    )
    azure_management_url: str = Field(
        "https://management.azure.com", description="Azure Resource Manager."
    )
    azure_credential: Literal["workload-identity", "default"] = Field(
        "workload-identity",
        description="How to get Azure tokens: Workload Identity (in AKS), or azure-identity's "
        "DefaultAzureCredential (outside a cluster).",
    )
    azure_timeout_seconds: float = Field(
        30.0, gt=0, le=300, description="Timeout of one Azure API request."
    )
    cost_interval_seconds: float = Field(
        10.0, gt=0, description="Account cost this often (it walks every node and pod)."
    )
    notify_webhook_url: SecretStr | None = Field(
        None,
        description="Send notifications here (http or https; Slack's or Teams' incoming webhook, "
        "or any receiver of JSON); unset: none. A secret: never logged (the chart reads it "
        "from a Secret).",
    )
    notify_target: Literal["slack", "teams", "generic"] = Field(
        "generic", description="The payload: slack, teams (an Adaptive Card) or generic JSON."
    )
    notify_on: list[str] = Field(
        list(NOTIFY_KINDS),
        description="What to notify: notice (a notice acted on), failover_blocked, "
        "deadline_missed, risk_move (a replica moved off a risky spot group).",
    )
    notify_rate_per_minute: int = Field(
        20, ge=1, le=600, description="Most notifications sent a minute; the rest are dropped."
    )
    notify_queue_size: int = Field(
        100, ge=1, le=10000, description="Notifications waiting to be sent at most."
    )
    notify_timeout_seconds: float = Field(
        10.0, gt=0, le=60, description="Timeout of one notification request."
    )
    notify_attempts: int = Field(
        3, ge=1, le=10, description="Tries of one notification answered 429 or 5xx."
    )
    notify_cluster_name: str = Field(
        "", description="Named in every notification (one channel for several clusters)."
    )

    @field_validator("notify_webhook_url")
    @classmethod
    def _webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        # The message never repeats the URL: it is a secret.
        if value is None or not value.get_secret_value().strip():
            return None
        if not re.fullmatch(r"https?://[^/\s:@]+(:\d+)?(/\S*)?", value.get_secret_value()):
            raise ValueError("not an http:// or https:// URL with a host (value not shown)")
        return value

    @field_validator("notify_on")
    @classmethod
    def _notify_kinds(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(NOTIFY_KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; known: {list(NOTIFY_KINDS)}")
        return value

    @field_validator("azure_subscription_id")
    @classmethod
    def _subscription(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("risk_placement_score_enabled") and not value.strip():
            raise ValueError("required when risk_placement_score_enabled is true")
        return value

    @field_validator("prices_file")
    @classmethod
    def _price_file(cls, value: str | None) -> str | None:
        if value:
            try:
                parse_price_file(Path(value).read_text())
            except OSError as exc:
                raise ValueError(f"cannot read {value}: {exc.strerror}") from None
        return value

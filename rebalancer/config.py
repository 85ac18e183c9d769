"""Settings of each process, validated at start (pydantic-settings).

Every setting can come from the environment (`REBALANCER_<NAME>`) or a command-line flag of the
same name (`--<name-with-dashes>`); a flag wins over the environment. A bad value stops the process
with one line naming the setting (see `describe_error`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from rebalancer import names, pool_kind
from rebalancer.azure.prices import parse_price_file
from rebalancer.vocabulary import DEFAULT_EVENT_POLICY, EventType, NoticePolicy

# What notifications are about (rebalancer.controller.messages.Kind spells the same words).
NOTIFY_KINDS = ("notice", "failover_blocked", "deadline_missed", "risk_move")

EVENT_TYPES = tuple(str(t) for t in EventType)
# IMDS rejects more than 5 requests per second per VM; the agent keeps a margin under that
# (4 per second at most), because the server sees request arrivals, not our send times.
IMDS_MIN_INTERVAL_SECONDS = 0.25
# Kubernetes label values and kubectl's taint form `key[=value]:Effect` (the chart's
# values.schema.json has the same patterns, so helm refuses what the controller would).
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# An agent pool's name, or a Karpenter NodePool's with its capacity type (rebalancer/pool_kind.py).
POOL_NAME_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(:(spot|on-demand|reserved))?$"
TAINT_PATTERN = (
    r"^([A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?)"
    r"(=([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?)?"
    r":(NoSchedule|PreferNoSchedule|NoExecute)$"
)


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REBALANCER_",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        extra="ignore",
    )

    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe log level printed."
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: JSON unless stderr is a terminal."
    )
    http_host: str = Field(
        "0.0.0.0",
        description="Address of /metrics, /healthz and /readyz; 0.0.0.0 is every interface, in a "
        "pod the pod IP (kubelet probes and Prometheus connect there).",
    )
    kubeconfig: str | None = Field(
        None,
        description="Path of a kubeconfig; unset: in-cluster config, else $KUBECONFIG.",
    )
    kube_timeout_seconds: float = Field(
        10.0, gt=0, description="Timeout of one Kubernetes API request."
    )


class AgentSettings(CommonSettings):
    node_name: str = Field(
        "",
        validation_alias=AliasChoices("node_name", "REBALANCER_NODE_NAME", "NODE_NAME"),
        description="This Node's name (NODE_NAME from the downward API).",
    )
    vm_name: str = Field(
        "",
        description="Azure VM name as IMDS lists it in Resources; unset: from the Node's "
        "providerID, else from IMDS instance metadata.",
    )
    http_port: int = Field(9101, ge=0, le=65535, description="Port of the agent's HTTP server.")
    imds_url: str = Field(
        "http://169.254.169.254", description="Base URL of the Instance Metadata Service."
    )
    imds_api_version: str = Field("2020-07-01", description="Scheduled Events api-version.")
    poll_interval_seconds: float = Field(
        1.0,
        ge=IMDS_MIN_INTERVAL_SECONDS,
        le=60,
        description="Seconds between Scheduled Events polls (IMDS allows 5 per second).",
    )
    imds_timeout_seconds: float = Field(2.0, gt=0, le=60, description="Timeout of one poll.")
    imds_first_call_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="Timeout of the first call, which Azure documents may take up to 2 minutes.",
    )
    imds_max_body_bytes: int = Field(
        1 << 20, ge=1024, description="Largest IMDS answer read; a larger one is an error."
    )
    ack_enabled: bool = Field(
        True, description="Acknowledge drained events to Azure (lets them start sooner)."
    )
    ack_event_types: list[str] = Field(
        [
            str(t)
            for t in (EventType.PREEMPT, EventType.TERMINATE, EventType.REDEPLOY, EventType.REBOOT)
        ],
        description="Event types the agent may acknowledge once the Node is marked drained.",
    )
    node_resync_seconds: float = Field(
        60.0, gt=0, description="Re-check what is published on the Node at least this often."
    )

    @field_validator("ack_event_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(EVENT_TYPES))
        if unknown:
            raise ValueError(f"unknown event types {unknown}; known: {list(EVENT_TYPES)}")
        return value


def parse_window(text: str) -> tuple[int, int] | None:
    """'22:00-06:00' (UTC) -> minutes of the day; '' -> None (any time)."""
    if not text.strip():
        return None
    try:
        start, end = (part.strip() for part in text.split("-"))
        minutes = []
        for part in (start, end):
            hours, mins = part.split(":")
            if not (0 <= int(hours) < 24 and 0 <= int(mins) < 60):
                raise ValueError
            minutes.append(int(hours) * 60 + int(mins))
    except ValueError:
        raise ValueError(f"window {text!r}: use HH:MM-HH:MM (UTC)") from None
    return minutes[0], minutes[1]


def parse_selector(text: str) -> dict[str, str | None]:
    """'app=llm,tier' -> {'app': 'llm', 'tier': None}: equality and existence terms only."""
    selector: dict[str, str | None] = {}
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        key, sep, value = term.partition("=")
        if not key.strip() or any(c in term for c in "!()<> "):
            raise ValueError(f"selector term {term!r}: use key=value or key")
        selector[key.strip()] = value.strip() if sep else None
    return selector


def parse_taint(text: str) -> tuple[str, str, str]:
    """'sku=gpu:NoSchedule' (kubectl's form) -> ('sku', 'gpu', 'NoSchedule')."""
    match = re.fullmatch(TAINT_PATTERN, text)
    if match is None:
        raise ValueError(
            f"taint {text!r}: use key=value:Effect or key:Effect "
            "(Effect: NoSchedule, PreferNoSchedule or NoExecute)"
        )
    return match.group(1), match.group(4) or "", match.group(6)


class PoolShape(BaseModel):
    """A node pool as its Nodes would show it, declared for pools that may have none (the
    cluster autoscaler at min 0, a Karpenter NodePool with no node yet): the controller cannot
    see the taints and labels of a pool without Nodes, so it is told them. A NodePool's pool is
    named `<nodepool>:<capacity type>`, e.g. `gpu:on-demand`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80, pattern=POOL_NAME_PATTERN)
    spot: bool = False  # a spot pool is never a fail-over target
    gpus: int = Field(0, ge=0)  # allocatable nvidia.com/gpu per node
    labels: dict[str, str] = {}  # besides the pool's own (pool_kind.labels_of), always there
    taints: list[str] = []  # kubectl's form, key=value:Effect

    @field_validator("taints")
    @classmethod
    def _taints(cls, value: list[str]) -> list[str]:
        for text in value:
            parse_taint(text)
        return value

    @model_validator(mode="after")
    def _pool_label_is_the_name(self) -> PoolShape:
        for key, value in pool_kind.labels_of(self.name).items():
            label = self.labels.get(key, value)
            if label != value:
                what = "capacity type" if key == names.KARPENTER_CAPACITY_TYPE_LABEL else "name"
                raise ValueError(f"pool {self.name}: {key} is the pool's {what}, not {label}")
        _, capacity = pool_kind.split(self.name)
        if capacity and self.spot != (capacity == pool_kind.SPOT):
            raise ValueError(
                f"pool {self.name}: spot is {str(capacity == pool_kind.SPOT).lower()} for "
                f"capacity type {capacity}"
            )
        return self


def _where(loc: tuple[int | str, ...]) -> str:
    """('pools', 0, 'taints') -> 'pools[0].taints'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _one_line(name: str, prefix: str, what: str) -> str:
    flag = "--" + name.replace("_", "-")
    env = prefix + name.upper()
    return f"invalid setting {name} ({env} / {flag}): {what}"


def describe_error(error: ValidationError, prefix: str = "REBALANCER_") -> str:
    """One line naming the first bad setting, its env variable and flag, and what is wrong."""
    first = error.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else "settings"
    inside = _where(first["loc"][1:])
    count = error.error_count()
    more = f" (and {count - 1} more)" if count > 1 else ""
    return _one_line(name, prefix, f"{inside + ': ' if inside else ''}{first['msg']}{more}")


def describe_settings_error(error: SettingsError, prefix: str = "REBALANCER_") -> str:
    """The same line for a value pydantic-settings could not even decode (bad JSON)."""
    text = str(error)
    found = re.search(r'field "(\w+)"|encountered for (\w+)', text)
    if found is None:
        return f"invalid settings: {text}"
    # The env source's json.loads, or the CLI's own list and object parser, says what is wrong.
    what = text if error.__cause__ is None else f"not valid JSON: {error.__cause__}"
    return _one_line(found.group(1) or found.group(2), prefix, what)


class ControllerSettings(CommonSettings):
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
    deadline_margin_seconds: float = Field(
        5.0, ge=0, description="Delete what remains on a node this long before its deadline."
    )
    act_now_grace_seconds: int = Field(
        5, ge=0, description="Grace period of deletions when the deadline is unknown or past."
    )
    cooldown_seconds: float = Field(
        600.0, ge=0, description="PreferNoSchedule on the rest of an evicted spot pool this long."
    )
    gpu_workloads_only: bool = Field(
        True, description="Fail over only workloads whose pods request nvidia.com/gpu."
    )
    workload_selector: str = Field(
        "",
        description="Fail over only workloads with these labels: 'k=v,k2' (k2: the key exists).",
    )
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
    hold_before_notice: bool = Field(
        False,
        description="Hold every managed Deployment with a replica on spot with a "
        "PodDisruptionBudget of ours at all times, not only from the notice: AKS node "
        "auto-drain can evict before our agent sees the notice. Yields to upgrades and kubectl "
        "drain; keeps the cluster autoscaler and Karpenter from removing those nodes "
        "(docs/controller.md).",
    )
    hold_doomed_pods: bool = Field(
        True,
        description="While replacements load, a PodDisruptionBudget of ours holds the doomed "
        "pods against evictions by others (AKS node auto-drain, kubectl drain).",
    )
    agent_node_selector: str = Field(
        f"{names.AKS_SPOT_LABEL}=spot",
        description="Nodes that run our agent, 'k=v,k2': notices in the agent's condition and "
        "annotation count only there (the chart derives it from agent.nodeSelector).",
    )
    event_policy: dict[str, NoticePolicy] = Field(
        {str(event_type): policy for event_type, policy in DEFAULT_EVENT_POLICY.items()},
        description="What to do per event type: failover (surge, then drain), drain, or none.",
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
    risk_prior_rate_per_hour: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Eviction risk of a spot VM size without better data: evictions per "
        "node-hour (0.05: the top of Azure's lowest bucket, 0-5 %).",
    )
    risk_prior_rates: dict[str, float] = Field(
        {},
        description="Priors per VM size, evictions per node-hour, as JSON: "
        '{"Standard_NC24ads_A100_v4": 0.08}; Azure\'s bucket wins where it is fetched.',
    )
    risk_prior_weight_hours: float = Field(
        24.0,
        ge=0,
        description="Node-hours of experience the prior counts for against the eviction history.",
    )
    risk_history_half_life_seconds: float = Field(
        21600.0, gt=0, description="A Preempt in the history counts half after this long."
    )
    risk_medium_rate_per_hour: float = Field(
        0.05, gt=0, le=1, description="Risk level medium from this many evictions per node-hour."
    )
    risk_high_rate_per_hour: float = Field(
        0.15, gt=0, le=1, description="Risk level high from this many evictions per node-hour."
    )
    risk_resource_graph_enabled: bool = Field(
        False,
        description="Fetch Azure's spot eviction-rate buckets from Resource Graph (Workload "
        "Identity with Reader).",
    )
    risk_resource_graph_refresh_seconds: float = Field(
        3600.0, ge=600, description="Fetch the eviction-rate buckets this often."
    )
    risk_resource_graph_max_age_seconds: float = Field(
        172800.0, gt=0, description="Use fetched eviction-rate buckets up to this old."
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
    risk_placement_score_max_age_seconds: float = Field(
        3600.0, gt=0, description="Use fetched Spot Placement Scores up to this old."
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
    target_recovery_seconds: float = Field(
        360.0,
        ge=0,
        description="Availability targets: how long a lost spot replica is missing until its "
        "replacement on on-demand is Ready (node provisioning + model load - notice).",
    )
    target_fresh_seconds: float = Field(
        3600.0,
        ge=0,
        le=86400,
        description="Availability targets: spot capacity up for less than this (its oldest "
        "Ready node) counts riskier in the on-demand cover, by this / its age, at most 4 "
        "times; 0 turns it off.",
    )
    target_spot_price_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Availability targets: spot's price as a share of on-demand's, to compare "
        "plans by cost; 0: the price table's for the VM size of the workload's spot nodes "
        "(bundled prices, the Retail Prices API, REBALANCER_PRICES_FILE), 0.2 where it has none.",
    )
    return_enabled: bool = Field(True, description="Move replicas back to spot when it is safe.")
    return_quiet_seconds: float = Field(
        600.0, ge=0, description="A spot pool must be free of Preempt notices this long first."
    )
    return_pending_timeout_seconds: float = Field(
        600.0, gt=0, description="Give a return up when the spot replica is not Ready by then."
    )
    return_max_concurrent: int = Field(1, ge=0, description="Returns in progress at once.")
    return_window: str = Field(
        "", description="Return only inside this UTC window, HH:MM-HH:MM; empty: any time."
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
    pools: list[PoolShape] = Field(
        [],
        description="Pools that may have no Node (autoscaled at min 0), as a JSON list of "
        '{"name", "spot", "gpus", "labels", "taints": ["key=value:Effect"]}; '
        "a pool seen on Nodes wins over its declaration, and a declaration over the part of a "
        "Karpenter NodePool read from the NodePool.",
    )

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, value: list[PoolShape]) -> list[PoolShape]:
        seen = [pool.name for pool in value]
        twice = sorted({name for name in seen if seen.count(name) > 1})
        if twice:
            raise ValueError(f"pools declared twice: {twice}")
        return value

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

    @field_validator("risk_prior_rates")
    @classmethod
    def _rates(cls, value: dict[str, float]) -> dict[str, float]:
        bad = sorted(sku for sku, rate in value.items() if not 0 <= rate <= 1 or not sku)
        if bad:
            raise ValueError(f"rates must be between 0 and 1 evictions per node-hour: {bad}")
        return value

    @field_validator("risk_high_rate_per_hour")
    @classmethod
    def _levels(cls, value: float, info: ValidationInfo) -> float:
        medium = info.data.get("risk_medium_rate_per_hour")
        if medium is not None and medium > value:
            raise ValueError(f"below risk_medium_rate_per_hour ({medium})")
        return value

    @field_validator("azure_subscription_id")
    @classmethod
    def _subscription(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("risk_placement_score_enabled") and not value.strip():
            raise ValueError("required when risk_placement_score_enabled is true")
        return value

    @field_validator("workload_selector", "agent_node_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        parse_selector(value)
        return value

    @field_validator("return_window")
    @classmethod
    def _window(cls, value: str) -> str:
        parse_window(value)
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

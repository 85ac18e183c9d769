"""Settings of each process, validated at start (pydantic-settings).

Every setting can come from the environment (`REBALANCER_<NAME>`) or a command-line flag of the
same name (`--<name-with-dashes>`); a flag wins over the environment. A bad value stops the process
with one line naming the setting (see `describe_error`). The controller's settings
(rebalancer.controller.settings) nest the planner's own settings types and are still named flat:
`NestedSettings` below.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, ClassVar, Literal, Self

from pydantic import (
    AliasChoices,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.exceptions import SettingsError

from rebalancer.setting_groups import flat_loc, flat_settings, nest
from rebalancer.setting_values import (
    LABEL_VALUE_PATTERN,
    POOL_NAME_PATTERN,
    TAINT_PATTERN,
    PoolShape,
    parse_selector,
    parse_taint,
    parse_window,
)
from rebalancer.vocabulary import EventType

__all__ = [
    "IMDS_MIN_INTERVAL_SECONDS",
    "LABEL_VALUE_PATTERN",
    "POOL_NAME_PATTERN",
    "TAINT_PATTERN",
    "AgentSettings",
    "CommonSettings",
    "NestedSettings",
    "PoolShape",
    "describe_error",
    "describe_settings_error",
    "flat_model",
    "parse_selector",
    "parse_taint",
    "parse_window",
    "setting_fields",
    "setting_value",
]

EVENT_TYPES = tuple(str(t) for t in EventType)
# IMDS rejects more than 5 requests per second per VM; the agent keeps a margin under that
# (4 per second at most), because the server sees request arrivals, not our send times.
IMDS_MIN_INTERVAL_SECONDS = 0.25


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


# ---- settings that nest the types of the code that reads them ----------------------------------
#
# Why this shape: pydantic-settings reads a nested model from REBALANCER_RETURNS__QUIET_SECONDS
# (`env_nested_delimiter`) and --returns.quiet-seconds, while the names the chart, the docs and
# users have always set are flat (REBALANCER_RETURN_QUIET_SECONDS, --return-quiet-seconds).
# `env_nested_delimiter="_"` with `env_nested_max_split=1` comes closest, but needs a field
# named `return` (an alias drops the env prefix), cannot nest the planner's own settings, which
# have no prefix, and leaves the flags dotted; aliases on the planner's fields would put the
# environment's names in the planner. So the class gets a flat view (`flat_model`): one field per
# setting, the very field its type declares, which pydantic-settings' own env and CLI sources
# read unchanged (types, JSON decoding, errors, --help); `NestedSettings` puts the flat values
# where they nest before validating, and names a bad one flat again in the error.


def setting_fields(cls: type[BaseSettings]) -> dict[str, FieldInfo]:
    """Every setting of a settings class by its flat name: REBALANCER_<NAME>, --<name>."""
    return {name: field for name, (_, field) in flat_settings(cls).items()}


def setting_value(settings: BaseSettings, name: str) -> Any:
    """The value of a setting by its flat name (`settings.planner.returns.quiet_seconds` for
    `return_quiet_seconds`)."""
    path, _ = flat_settings(type(settings))[name]
    value: Any = settings
    for key in path:
        value = getattr(value, key)
    return value


@functools.cache
def flat_model(cls: type[BaseSettings]) -> type[BaseSettings]:
    """`cls` with its nested settings named flat, for pydantic-settings' env and CLI sources;
    it only reads and decodes (validation is `cls`'s)."""
    base = type(f"Flat{cls.__name__}", (BaseSettings,), {"model_config": cls.model_config})
    fields: dict[str, Any] = {
        name: (field.annotation, _default_shown(field))
        for name, (_, field) in flat_settings(cls).items()
    }
    return create_model(cls.__name__, __base__=base, __module__=cls.__module__, **fields)


def _default_shown(field: FieldInfo) -> FieldInfo:
    """The field with its default made by its factory, so that --help shows the value."""
    if field.default_factory is None:
        return field
    shown = copy.copy(field)
    shown.default = field.get_default(call_default_factory=True)
    shown.default_factory = None
    return shown


def _flat_error(cls: type[Any], error: ValidationError) -> ValidationError:
    details: list[InitErrorDetails] = []
    for line in error.errors():
        detail = InitErrorDetails(
            type=line["type"], loc=flat_loc(cls, line["loc"]), input=line["input"]
        )
        if "ctx" in line:
            detail["ctx"] = line["ctx"]
        details.append(detail)
    return ValidationError.from_exception_data(error.title, details)


class NestedSettings(CommonSettings):
    """Settings that nest settings types (`rebalancer.setting_groups.group`), read, given and
    reported under their flat names."""

    # False: from the values given alone, never this process's environment (the plugin reads
    # the controller's settings from its Deployment, in a shell whose REBALANCER_* are the user's).
    read_environment: ClassVar[bool] = True

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if not cls.read_environment:
            return (init_settings,)
        flat_env = EnvSettingsSource(flat_model(settings_cls))
        return init_settings, flat_env, dotenv_settings, file_secret_settings

    @model_validator(mode="wrap")
    @classmethod
    def _nested(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        try:
            return handler(nest(cls, data) if isinstance(data, dict) else data)
        except ValidationError as error:
            raise _flat_error(cls, error) from None

"""structlog set-up: JSON lines in a pod, readable lines on a terminal.

Log keys used across the project: event (the message), node, vm, event_id, event_type,
workload, reason, error. One log event per decision.

Values are printed as a reader spells them: an enum by its value (`reason=NoticeGone`, not
`<Reason.CANCELLED: 'NoticeGone'>`), a decision (a dataclass) as `Name(field=value, ...)` with
the same rule inside; `plain_values` does it once for every renderer.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import structlog


def plain(value: Any) -> Any:
    """`value` with every enum replaced by its value, recursively; a dataclass instance becomes
    one line, `Name(field=value, ...)`, its fields rendered the same way."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(
            f"{f.name}={_inline(plain(getattr(value, f.name)))}"
            for f in dataclasses.fields(value)
            if f.repr
        )
        return f"{type(value).__name__}({fields})"
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(item) for item in value]
        return sorted(items, key=str) if isinstance(value, set | frozenset) else items
    if isinstance(value, dict):
        return {plain(key): plain(item) for key, item in value.items()}
    return value


def _inline(value: Any) -> str:
    """A field inside a dataclass's line: strings bare, containers as their items."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_inline(v)}" for k, v in value.items()) + "}"
    return str(value)


def plain_values(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """structlog processor: every value of a log event through `plain`."""
    return {key: plain(value) for key, value in event_dict.items()}


def setup_logging(level: str = "info", fmt: str = "auto") -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            plain_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(**initial: Any) -> Any:
    return structlog.get_logger().bind(**initial)

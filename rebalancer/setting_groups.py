"""Settings declared once, in the types of the code that reads them, and named flat for users.

The planner's settings are its own frozen pydantic dataclasses (`Settings`, `ReturnSettings`,
`TargetSettings`, `RiskSettings`); the controller's settings nest them
(`ControllerSettings.planner.returns`). A field of such a type is a setting when declared with
`setting(...)` (its default, constraints and one-line description: the only declaration); the
others are the model's own constants. A nested type sits in its parent through `group(prefix)`,
and a setting's flat name is the prefixes on its way and its own name: `returns` is
`group("return_")`, so its `quiet_seconds` is `return_quiet_seconds`:
REBALANCER_RETURN_QUIET_SECONDS and --return-quiet-seconds, the names the chart, the docs and
users have always set.

This module only describes; it reads nothing (constructing a planner type reads no environment).
rebalancer.config turns the description into what pydantic-settings reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo

# The config of every settings type (each is also a frozen dataclass: one value per pass): a
# misspelt field is an error, as it was for the plain dataclasses these types were.
SETTINGS_CONFIG = ConfigDict(extra="forbid")

_SETTING = "setting"
_PREFIX = "flat_prefix"


def setting(
    default: Any = ...,
    *,
    description: str,
    default_factory: Callable[[], Any] | None = None,
    **constraints: Any,
) -> Any:
    """A field users set: its default, its constraints (`ge`, `le`...) and what it means."""
    extra: JsonDict = {_SETTING: True}
    if default_factory is not None:
        return Field(
            default_factory=default_factory,
            description=description,
            json_schema_extra=extra,
            **constraints,
        )
    return Field(default, description=description, json_schema_extra=extra, **constraints)


def group(factory: Callable[[], Any], *, prefix: str) -> Any:
    """A nested settings type, its settings named flat with `prefix` ("" for none)."""
    extra: JsonDict = {_PREFIX: prefix}
    return Field(default_factory=factory, json_schema_extra=extra)


def fields_of(cls: type[Any]) -> dict[str, FieldInfo]:
    """The fields of a pydantic model or pydantic dataclass."""
    fields: dict[str, FieldInfo] = cls.__pydantic_fields__
    return fields


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def group_prefix(field: FieldInfo) -> str | None:
    """The flat prefix of a `group` field; None for any other field."""
    prefix = _extra(field).get(_PREFIX)
    return prefix if isinstance(prefix, str) else None


def flat_settings(cls: type[Any]) -> dict[str, tuple[tuple[str, ...], FieldInfo]]:
    """Every setting of a settings class by its flat name: where it nests (field names from
    the class down) and its field. Every field of the class itself is a setting; inside a
    group only the `setting(...)` fields are. In declaration order, a group's where it sits."""
    found: dict[str, tuple[tuple[str, ...], FieldInfo]] = {}

    def walk(model: type[Any], prefix: str, path: tuple[str, ...], top: bool) -> None:
        for name, field in fields_of(model).items():
            inner = group_prefix(field)
            if inner is not None and isinstance(field.annotation, type):
                walk(field.annotation, prefix + inner, (*path, name), top=False)
            elif top or _extra(field).get(_SETTING):
                flat = prefix + name
                if flat in found:
                    where = ".".join(found[flat][0])
                    raise TypeError(f"setting {flat} declared twice: {where} and {name}")
                found[flat] = ((*path, name), field)

    walk(cls, "", (), top=True)
    return found


def _as_dict(value: Any) -> dict[str, Any]:
    """A nested settings value given whole, as the fields a flat setting may then change."""
    if isinstance(value, dict):
        return dict(value)
    if value is None:
        return {}
    return {name: getattr(value, name) for name in fields_of(type(value))}


def nest(cls: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    """{'return_quiet_seconds': 5} -> {'planner': {'returns': {'quiet_seconds': 5}}}; a flat
    value wins over the same setting given nested."""
    nested = dict(data)
    for name, (path, _) in flat_settings(cls).items():
        if len(path) == 1 or name not in nested:
            continue
        value = nested.pop(name)
        level = nested
        for key in path[:-1]:
            level[key] = _as_dict(level.get(key))
            level = level[key]
        level[path[-1]] = value
    return nested


def flat_loc(cls: type[Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """('planner', 'returns', 'quiet_seconds') -> ('return_quiet_seconds',)."""
    model, prefix = cls, ""
    for depth, part in enumerate(loc):
        field = fields_of(model).get(part) if isinstance(part, str) else None
        inner = None if field is None else group_prefix(field)
        if field is None or inner is None or not isinstance(field.annotation, type):
            return loc if depth == 0 else (f"{prefix}{part}", *loc[depth + 1 :])
        model, prefix = field.annotation, prefix + inner
    return loc

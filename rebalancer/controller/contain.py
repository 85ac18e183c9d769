"""Containment: planning one object can fail without stopping the others.

Each sub-planner plans its objects one at a time through `Containment.run`. An exception while
planning one (a bug, or input no grammar foresaw) leaves that object alone for this pass: no
action for it from that sub-planner, a `Failure` in the plan, which the recorder logs, counts and
reports as a Warning Event on the object. Every other object is planned as if it were not there,
the way Karpenter's disruption methods drop a bad candidate alone. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

WorkloadKey = tuple[str, str, str]
T = TypeVar("T")
P = ParamSpec("P")

MAX_ERROR_LENGTH = 200


@dataclass(frozen=True)
class Scope:
    """What a sub-planner was planning: said to people, and the object an Event goes on."""

    subject: str
    workload: WorkloadKey | None = None
    node: str = ""


def on_workload(key: WorkloadKey) -> Scope:
    kind, namespace, name = key
    return Scope(f"{kind} {namespace}/{name}", workload=key)


def on_node(name: str) -> Scope:
    return Scope(f"Node {name}", node=name)


def about(subject: str) -> Scope:
    return Scope(subject)


@dataclass(frozen=True)
class Failure:
    method: str  # the sub-planner: a fixed word, a metric label
    where: Scope
    error: str  # the exception in one bounded line


class Containment:
    def __init__(self) -> None:
        self.failures: list[Failure] = []

    def run(
        self,
        method: str,
        where: Scope,
        fallback: T,
        step: Callable[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        try:
            return step(*args, **kwargs)
        except Exception as error:  # a bug planning one object must not stop the others
            said = f"{type(error).__name__}: {error}".replace("\n", " ")[:MAX_ERROR_LENGTH]
            self.failures.append(Failure(method, where, said))
            return fallback

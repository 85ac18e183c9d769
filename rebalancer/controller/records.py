"""The records we keep on cluster objects, and their codecs: what a surge, spare replicas and a
return to spot remember between passes (annotations on the workload, sealed by the executor:
seal.py). Each is read strictly: a record anyone could have written is never obeyed beyond
what it may ask (counts bounded, strings checked); an unreadable one is reported and left.

Apart from the views of objects (model.py), which hold what a decision reads of the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rebalancer.strict import moment

if TYPE_CHECKING:  # a return's record names the pods it waits for; views import records
    from rebalancer.controller.model import PodInfo

# A record on a workload naming more replicas than this is not ours: never obeyed.
MAX_RECORD_REPLICAS = 10_000
MAX_BELOW_SECONDS = 100 * 365 * 86400  # a target's seconds below its count: a century at most


@dataclass(frozen=True)
class Spare:
    """The spare replicas we keep on a Deployment (its policy's `spare-replicas`): the owner's
    count and what we added; `reverted` counts the times someone set the count back to the
    owner's exactly (an owner that resets replicas), and `gave_up` stops us fighting it."""

    base: int
    added: int
    reverted: int = 0
    gave_up: bool = False
    # With an availability target: how many of base + added go on spot (the rest on-demand);
    # None: the placement policy's rules place them.
    spot: int | None = None
    # With a target, its error budget's account: watched since when (RFC 3339), the seconds the
    # owner's count was not all Ready before the current stretch, and since when it is not
    # (None: it is). Written when a stretch begins or ends or `overdrawn` changes.
    watched_since: str | None = None
    below_seconds: int = 0
    below_since: str | None = None
    # With a target: its account went over what the target allowed, and has not had one
    # recovery in hand since (`target.Account.overdrawn`): the plan stays held stricter.
    overdrawn: bool = False
    # With a target, its zones waiting for spot capacity (`target_plan.waiting_zones`): the
    # webhook sends one of the plan's spot replicas to each, the rest to the others.
    waiting: tuple[str, ...] = ()
    # With a target on a Deployment an HPA scales (`hpa_count.py`): the HPA's recommendation
    # has been below `base` since when (RFC 3339), and the highest it was since; `base` follows
    # it down once that has lasted the HPA's scale-down window.
    lower_since: str | None = None
    lower_high: int = 0
    # With a target and an HPA: N before the HPA raised it (0: no rise loading) and since when
    # (RFC 3339), until the new N is first all Ready or a recovery has passed; the target's
    # account measures against it meanwhile.
    rising_from: int = 0
    rising_since: str | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "base": self.base, "added": self.added, "reverted": self.reverted,
            "gaveUp": self.gave_up,
        }  # fmt: skip
        if self.spot is not None:
            data["spot"] = self.spot
        if self.watched_since is not None:
            data["watchedSince"] = self.watched_since
            data["belowSeconds"] = self.below_seconds
        if self.below_since is not None:
            data["belowSince"] = self.below_since
        if self.overdrawn:
            data["overdrawn"] = True
        if self.waiting:
            data["waiting"] = list(self.waiting)
        if self.lower_since is not None:
            data["lowerSince"] = self.lower_since
            data["lowerHigh"] = self.lower_high
        if self.rising_since is not None:
            data["risingFrom"] = self.rising_from
            data["risingSince"] = self.rising_since
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Spare:
        data = _record_object(text)
        if _count(data, "base") < 1:
            raise ValueError("base is 0: we never keep spares for a workload with no replicas")
        spot = _count(data, "spot") if "spot" in data else None
        if spot is not None and spot > _count(data, "base") + _count(data, "added"):
            raise ValueError("more spot replicas than replicas")
        watched_since = _optional_str(data, "watchedSince")
        below_since = _optional_str(data, "belowSince")
        for when in (watched_since, below_since):
            if when is not None:
                moment(when)
        below = data.get("belowSeconds", 0)
        if type(below) is not int or not 0 <= below <= MAX_BELOW_SECONDS:
            raise ValueError(f"belowSeconds is not a whole number from 0 to {MAX_BELOW_SECONDS}")
        overdrawn = data.get("overdrawn", False)
        if type(overdrawn) is not bool or (overdrawn and watched_since is None):
            raise ValueError("overdrawn is not true or false of an account that was opened")
        waiting = _strings(data, "waiting")
        if len(waiting) > (spot or 0):
            raise ValueError("more zones waiting for spot capacity than spot replicas")
        lower_since = _optional_str(data, "lowerSince")
        if lower_since is not None:
            moment(lower_since)
        lower_high = _count(data, "lowerHigh") if "lowerHigh" in data else 0
        if lower_high > _count(data, "base"):
            raise ValueError("lowerHigh is above base: it is a recommendation below it")
        rising_since = _optional_str(data, "risingSince")
        if rising_since is not None:
            moment(rising_since)
        rising_from = _count(data, "risingFrom") if rising_since is not None else 0
        if rising_since is not None and rising_from >= _count(data, "base"):
            raise ValueError("risingFrom is not below base: it is the count before a rise")
        return cls(
            base=_count(data, "base"),
            added=_count(data, "added"),
            reverted=_count(data, "reverted"),
            gave_up=data.get("gaveUp", False) is True,
            spot=spot,
            watched_since=watched_since,
            below_seconds=below,
            below_since=below_since,
            overdrawn=overdrawn,
            waiting=waiting,
            lower_since=lower_since,
            lower_high=lower_high,
            rising_from=rising_from,
            rising_since=rising_since,
        )


@dataclass(frozen=True)
class Surge:
    """What we recorded on a Deployment when we surged it, so any leader can finish or undo it."""

    base_replicas: int
    added: int
    event_ids: tuple[str, ...]
    doomed_pods: tuple[str, ...]  # "namespace/name" of the pods we are replacing
    deadline: str | None  # RFC 3339 of the earliest notice, None: act now
    # Scaled back already; kept until the doomed pods are gone, so that a doomed pod the
    # ReplicaSet has not removed yet is never taken for a new one and surged for twice.
    completed: bool = False
    # Someone else set replicas back while the replacements loaded: the surge could not be
    # held, so its doomed pods are drained at once instead of at the deadline.
    reverted: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseReplicas": self.base_replicas,
                "added": self.added,
                "eventIds": list(self.event_ids),
                "doomedPods": list(self.doomed_pods),
                "deadline": self.deadline,
                "completed": self.completed,
                "reverted": self.reverted,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Surge:
        """Parse and bound-check a record; ValueError for anything we would not have written."""
        data = _record_object(text)
        record = cls(
            base_replicas=_count(data, "baseReplicas"),
            added=_count(data, "added"),
            event_ids=_strings(data, "eventIds"),
            doomed_pods=_strings(data, "doomedPods"),
            deadline=_optional_str(data, "deadline"),
            completed=data.get("completed", False) is True,
            reverted=data.get("reverted", False) is True,
        )
        if record.added > len(record.doomed_pods):
            raise ValueError("more replicas added than pods it replaces")
        if record.base_replicas < 1:
            raise ValueError("baseReplicas is 0: we never surge a workload that had none")
        if record.deadline is not None:
            moment(record.deadline)
        return record


@dataclass(frozen=True)
class ReturnRecord:
    """What we recorded on a Deployment when a return to spot started (see returns.py)."""

    base_replicas: int
    retire: str  # "namespace/name" of the on-demand pod to remove
    pool: str
    started_at: str  # RFC 3339
    known_pods: tuple[str, ...]  # pod names that existed when it started
    completed: bool = False
    # Completed by giving up: the scale-back removes the new pod, not the one to retire, so the
    # record is kept until the new pod is gone (and then forgotten).
    gave_up: bool = False
    # A give-up's new pods, by name: what it waits for. Not "every pod it did not know": a
    # surge's replacements created after the give-up are not its business, and waiting for them
    # kept the record (and so every later return) for as long as they lived. None: a record
    # written before this was kept, which waits as it always did.
    waits_for: tuple[str, ...] | None = None
    # "return": back to spot from on-demand; "risk": off a spot group riskier than the workload's
    # placement policy accepts (pool is then "": the webhook chooses where the new pod goes).
    purpose: str = "return"
    why: str = ""  # for a move: the risk that started it, said in its Events

    @property
    def retire_name(self) -> str:
        return self.retire.split("/", 1)[-1]

    def leaving(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        """The pods a completed return is still waiting for the ReplicaSet to remove."""
        if self.gave_up and self.waits_for is not None:
            return [p for p in pods if p.name in self.waits_for]
        if self.gave_up:
            return [p for p in pods if p.name not in self.known_pods]
        return [p for p in pods if p.name == self.retire_name]

    def to_json(self) -> str:
        return json.dumps(
            {
                "baseReplicas": self.base_replicas,
                "retire": self.retire,
                "pool": self.pool,
                "startedAt": self.started_at,
                "knownPods": list(self.known_pods),
                "completed": self.completed,
                "gaveUp": self.gave_up,
                **({"purpose": self.purpose, "why": self.why} if self.purpose != "return" else {}),
                **({"waitsFor": list(self.waits_for)} if self.waits_for is not None else {}),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ReturnRecord:
        """Parse and bound-check a record; ValueError for anything we would not have written."""
        data = _record_object(text)
        retire, pool, started = (data.get(k) for k in ("retire", "pool", "startedAt"))
        if not all(isinstance(v, str) for v in (retire, pool, started)):
            raise ValueError("retire, pool and startedAt must be strings")
        moment(started)
        if _count(data, "baseReplicas") < 1:
            raise ValueError("baseReplicas is 0: we never move a replica of a workload with none")
        return cls(
            base_replicas=_count(data, "baseReplicas"),
            retire=str(retire),
            pool=str(pool),
            started_at=str(started),
            known_pods=_strings(data, "knownPods"),
            completed=data.get("completed", False) is True,
            gave_up=data.get("gaveUp", False) is True,
            purpose=_purpose(data),
            why=(_optional_str(data, "why") or "")[:512],
            waits_for=_strings(data, "waitsFor") if data.get("waitsFor") is not None else None,
        )


def _purpose(data: Mapping[str, Any]) -> str:
    purpose = data.get("purpose", "return")
    if purpose not in ("return", "risk"):
        raise ValueError("purpose is not return or risk")
    return str(purpose)


def _record_object(text: str) -> dict[str, Any]:
    """A record's JSON object. Any failure (depth, size, numbers) is a ValueError."""
    if len(text) > 64 * 1024:
        raise ValueError("record larger than 64 KiB")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {type(error).__name__}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if type(value) is not int or not 0 <= value <= MAX_RECORD_REPLICAS:
        raise ValueError(f"{key} is not a whole number from 0 to {MAX_RECORD_REPLICAS}")
    return value


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} is not a list of strings")
    if len(value) > MAX_RECORD_REPLICAS:
        raise ValueError(f"{key} is too long")
    return tuple(value)


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} is not a string")
    return value

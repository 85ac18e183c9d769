"""Spot capacity traces: parsing, validation, and the per-slot timeline a pool replays.

The format is the public SkyPilot one, `{"metadata": {"gap_seconds": N}, "data": [k0, k1, ...]}`:
`data[i]` is the number of spot instances **available** at time `i * gap_seconds` (1 or k means
available; some older simulators read 1 as "preempted", which inverts every result). A drop from
k to j between two ticks means k-j instances were lost in that interval.

A trace becomes a pool of `max(data)` slots. Which slots die at a drop and which come back at a
rise is drawn once per trace from a seeded RNG, before any policy runs, so every policy replays
exactly the same capacity history and the same notice lengths; a node the simulator provisions
occupies one alive slot and gets a notice when its slot is lost. So a drop from 16 to 10 takes
each of our nodes with probability 6/16, and a wave to 0 takes them all.

The pool's nodes are in the zone the file's name gives (`Trace.zone`).

Whatever a file says is checked before any of it is used, against bounds no real trace comes near
(the public SkyPilot files: at most 16 KB, 5131 ticks, 16 instances, ticks of 300-600 s, 27 days,
2962 instances lost and returned): a hostile file gets one InputError naming it and the problem,
never a traceback, a hang or memory in proportion to a number it holds (`max(data)` slots are
allocated, and every drop and rise becomes events).

Not here: reading files (`files.py`, which bounds the size read).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from rebalancer.simulate import InputError
from rebalancer.simulate.workload import Distribution


@dataclass(frozen=True)
class Trace:
    name: str  # the pool's name in reports: the file's stem
    source: str  # the file it came from, for messages
    gap_seconds: float
    data: tuple[int, ...]

    @property
    def seconds(self) -> float:
        return len(self.data) * self.gap_seconds

    @property
    def slots(self) -> int:
        return max(self.data)

    @property
    def zone(self) -> str:
        """The zone the trace was recorded in: the part of its name before the first `_` when
        that part looks like a zone name (it has a `-`, as in `us-west-2a_v100_1` or
        `eastus-1_a100`: the public files are named `<zone>_<instance>_<count>`), else the
        whole name (a zone of its own)."""
        head, underscore, _ = self.name.partition("_")
        return head if underscore and "-" in head else self.name

    @property
    def region(self) -> str:
        """The region of the trace's zone: `us-west-2a` -> `us-west-2` (AWS: the zone is the
        region and a letter), `eastus-1` -> `eastus` (Azure: the region, `-`, a number); ""
        when the zone is neither shape (a pool of the cluster's region)."""
        zone = self.zone
        if "-" in zone and len(zone) > 1 and zone[-1].isalpha() and zone[-2].isdigit():
            return zone[:-1]
        head, dash, tail = zone.rpartition("-")
        if dash and tail.isdigit() and head.isalpha():
            return head
        return ""

    def capacity_at(self, seconds: float) -> int:
        index = min(len(self.data) - 1, max(0, int(seconds // self.gap_seconds)))
        return self.data[index]


# Bounds a real trace never reaches (see above), each far beyond the real ones.
MAX_TRACE_BYTES = 4 * 1024 * 1024  # the file (250 x the largest public one)
MAX_JSON_DEPTH = 8  # the format needs 2: {"metadata": {...}, "data": [...]}
MAX_JSON_CONTAINERS = 64  # arrays and objects in all: the format needs 3
MAX_NUMBER_DIGITS = 18  # an integer's digits (no count or duration needs more)
MIN_GAP_SECONDS = 1.0
MAX_GAP_SECONDS = 86400.0  # a tick of a day
MAX_TICKS = 1_000_000
MAX_TRACE_SECONDS = 366 * 86400.0  # a year
MAX_INSTANCES = 1000  # per tick: an AKS node pool's limit
MAX_CHANGES = 100_000  # instances lost plus instances returned, over the whole trace

# A JSON string, or an unterminated one to the end (the parser refuses it later): every match
# succeeds where it starts and nothing backtracks, so blanking them is linear in the text.
_STRING = re.compile(r'"(?:[^"\\]|\\.?)*+(?:"|\Z)', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class _Refused(ValueError):
    """A number `json.loads` must not turn into a value (raised from its hooks)."""


def _structure_problem(text: str) -> str | None:
    """Too many arrays and objects, or nested too deep (checked before parsing: the parser
    recurses once per level). Strings are blanked first: brackets in them are text."""
    skeleton = _STRING.sub('""', text)
    if skeleton.count("[") + skeleton.count("{") > MAX_JSON_CONTAINERS:
        return f"more than {MAX_JSON_CONTAINERS} arrays and objects"
    depth = 0
    for bracket in _BRACKET.finditer(skeleton):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return None


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a number a trace can hold")


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _Refused(f"a number of {len(text.lstrip('-'))} digits")
    return int(text)


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise _Refused(f"{text[:20]}{'...' if len(text) > 20 else ''} is not a finite number")
    return value


def _load(text: str, source: str) -> Any:
    """The JSON document, with its size, depth and numbers bounded (NaN, Infinity and 1e999,
    which Python's json reads as floats, refused)."""
    if len(text) > MAX_TRACE_BYTES:
        raise InputError(f"{source}: not a spot trace: larger than {MAX_TRACE_BYTES} bytes")
    problem = _structure_problem(text)
    if problem is not None:
        raise InputError(f"{source}: not a spot trace: {problem}")
    try:
        return json.loads(text, parse_constant=_constant, parse_int=_integer, parse_float=_real)
    except json.JSONDecodeError as error:
        raise InputError(f"{source}: not a spot trace: not JSON ({error})") from None
    except _Refused as error:
        raise InputError(f"{source}: not a spot trace: {error}") from None


def parse_trace(text: str, *, source: str, name: str) -> Trace:
    """A trace from its JSON text; InputError naming `source` and the first problem."""
    document: Any = _load(text, source)
    if not isinstance(document, dict):
        raise InputError(f"{source}: not a spot trace: expected an object with metadata and data")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or "gap_seconds" not in metadata:
        raise InputError(f"{source}: not a spot trace: no metadata.gap_seconds")
    gap = metadata["gap_seconds"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or gap <= 0:
        raise InputError(f"{source}: metadata.gap_seconds must be a positive number, not {gap!r}")
    if not MIN_GAP_SECONDS <= gap <= MAX_GAP_SECONDS:
        raise InputError(
            f"{source}: metadata.gap_seconds {gap} is outside {MIN_GAP_SECONDS:.0f}.."
            f"{MAX_GAP_SECONDS:.0f} s"
        )
    data = document.get("data")
    if not isinstance(data, list):
        raise InputError(f"{source}: not a spot trace: no data list")
    if not data:
        raise InputError(f"{source}: empty trace: data has no ticks")
    if len(data) > MAX_TICKS:
        raise InputError(f"{source}: {len(data)} ticks, more than {MAX_TICKS}")
    if len(data) * gap > MAX_TRACE_SECONDS:
        raise InputError(
            f"{source}: {len(data)} ticks of {gap} s span {len(data) * gap / 86400:.0f} days, "
            f"more than {MAX_TRACE_SECONDS / 86400:.0f}"
        )
    values: list[int] = []
    changes = 0
    for index, value in enumerate(data):
        if value is None:
            raise InputError(
                f"{source}: gap at tick {index} ({index * gap:.0f} s): no value recorded; "
                "fill or cut the trace, the simulator does not guess capacity"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise InputError(f"{source}: tick {index}: {value!r} is not a whole instance count")
        if value < 0:
            raise InputError(f"{source}: tick {index}: negative instance count {value}")
        if value > MAX_INSTANCES:
            raise InputError(
                f"{source}: tick {index}: {value:.0f} instances, more than {MAX_INSTANCES} "
                "(an AKS node pool's limit)"
            )
        if values:
            changes += abs(int(value) - values[-1])
            if changes > MAX_CHANGES:
                raise InputError(
                    f"{source}: more than {MAX_CHANGES} instances lost and returned by tick {index}"
                )
        values.append(int(value))
    return Trace(name=name, source=source, gap_seconds=float(gap), data=tuple(values))


@dataclass(frozen=True)
class SlotEvent:
    """Slot `slot` of a pool dies (notice at `at`, gone at `at + notice_seconds`) or comes back."""

    at: float
    slot: int
    alive: bool
    notice_seconds: float = 0.0


@dataclass(frozen=True)
class SlotTimeline:
    slots: int
    initially_alive: frozenset[int]
    events: tuple[SlotEvent, ...]


def slot_timeline(trace: Trace, *, seed: int, notice: Distribution, until: float) -> SlotTimeline:
    """Which slots die and come back when, and each loss's notice length (seeded per trace)."""
    rng = random.Random(f"{seed}:{trace.name}")
    slots = trace.slots
    alive = set(rng.sample(range(slots), trace.data[0]))
    initial = frozenset(alive)
    events: list[SlotEvent] = []
    previous = trace.data[0]
    for index, count in enumerate(trace.data[1:], start=1):
        at = index * trace.gap_seconds
        if at >= until:
            break
        if count < previous:
            for slot in sorted(rng.sample(sorted(alive), previous - count)):
                alive.discard(slot)
                events.append(SlotEvent(at, slot, False, max(0.0, notice.sample(rng))))
        elif count > previous:
            for slot in sorted(rng.sample(sorted(set(range(slots)) - alive), count - previous)):
                alive.add(slot)
                events.append(SlotEvent(at, slot, True))
        previous = count
    return SlotTimeline(slots=slots, initially_alive=initial, events=tuple(events))

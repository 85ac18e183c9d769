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

Not here: reading files (`files.py`).
"""

from __future__ import annotations

import json
import random
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


def parse_trace(text: str, *, source: str, name: str) -> Trace:
    """A trace from its JSON text; InputError naming `source` and the first problem."""
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{source}: not a spot trace: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise InputError(f"{source}: not a spot trace: expected an object with metadata and data")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict) or "gap_seconds" not in metadata:
        raise InputError(f"{source}: not a spot trace: no metadata.gap_seconds")
    gap = metadata["gap_seconds"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or gap <= 0:
        raise InputError(f"{source}: metadata.gap_seconds must be a positive number, not {gap!r}")
    data = document.get("data")
    if not isinstance(data, list):
        raise InputError(f"{source}: not a spot trace: no data list")
    if not data:
        raise InputError(f"{source}: empty trace: data has no ticks")
    values: list[int] = []
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

"""The evidence for `target.aged`: how a spot pool's chance of losing all its capacity depends
on how long it has had it, in every shared trace set.

For each set, the losses (a tick at zero after one above) per hour of capacity, by how long the
pool had held capacity before the loss. A falling hazard means capacity that just came back is
the riskiest, which is why the availability target's on-demand cover holds fresh capacity
riskier than the record's average (docs/targets.md).

Then, for sets with several pools in one region, the same losses split by whether another
pool of the region had no capacity at that tick, and by the capacity's age (under 2 h or
not): whether a zone that cannot get capacity makes the others riskier (a "capacity
crunch"). It does not, on these traces (docs/targets.md): so a zone waiting for capacity is
planned without (`target_plan.waiting_zones`), not counted as risk for the others.

    .venv/bin/python -m bench.target_hazard [SPOT_TRACES_DIR]
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from pathlib import Path

from bench.simulate_references import DEFAULT_ROOT
from rebalancer.simulate.files import load_traces

EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)  # hours held


def band(hours: float) -> int:
    return max(i for i, edge in enumerate(EDGES) if hours >= edge)


def crunch(folder: Path) -> str | None:
    """One row: a set's losses per hour of capacity while every other pool of the region has
    capacity, and while one or more has none, each for capacity younger and older than 2 h."""
    traces = load_traces([folder])
    held: Counter[tuple[bool, bool]] = Counter()  # (another down, old) -> hours of capacity
    lost: Counter[tuple[bool, bool]] = Counter()
    for trace in traces:
        others = [o for o in traces if o is not trace and o.region == trace.region]
        if not others:
            continue
        ticks = min(len(t.data) for t in (trace, *others))
        gap = trace.gap_seconds / 3600.0
        age: float | None = None
        for index in range(ticks - 1):
            if trace.data[index] == 0:
                age = None
                continue
            age = 0.0 if age is None else age + gap
            key = (any(o.data[index] == 0 for o in others), age >= 2.0)
            held[key] += gap
            lost[key] += trace.data[index + 1] == 0
    if not held:
        return None

    def cell(key: tuple[bool, bool]) -> str:
        hours = held[key]
        return f"{lost[key] / hours:.2f}/h ({lost[key]} in {hours:.0f} h)" if hours else "-"

    keys = [(False, False), (True, False), (False, True), (True, True)]
    return f"| {folder.parent.name}/{folder.name} | " + " | ".join(map(cell, keys)) + " |"


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROOT
    labels = [f"{a:g}-{b:g} h" for a, b in itertools.pairwise(EDGES)]
    print("| trace set | " + " | ".join([*labels, f">{EDGES[-1]:g} h"]) + " |")
    print("|---" * (len(EDGES) + 1) + "|")
    for folder in sorted({p.parent for p in root.rglob("*.json")}):
        held_for: Counter[int] = Counter()  # hours of capacity, by band
        lost: Counter[int] = Counter()
        for trace in load_traces([folder]):
            gap = trace.gap_seconds / 3600.0
            held: float | None = None
            for index, count in enumerate(trace.data):
                if count == 0:
                    held = None
                    continue
                held = 0.0 if held is None else held + gap
                held_for[band(held)] += gap
                if index + 1 < len(trace.data) and trace.data[index + 1] == 0:
                    lost[band(held)] += 1
        cells = [
            f"{lost[i] / held_for[i]:.2f}/h ({lost[i]} in {held_for[i]:.0f} h)"
            if held_for[i]
            else "-"
            for i in range(len(EDGES))
        ]
        print(f"| {folder.parent.name}/{folder.name} | " + " | ".join(cells) + " |")
    print()
    print(
        "| trace set | < 2 h, all others up | < 2 h, another down | >= 2 h, all others up "
        "| >= 2 h, another down |"
    )
    print("|---" * 5 + "|")
    for folder in sorted({p.parent for p in root.rglob("*.json")}):
        line = crunch(folder)
        if line is not None:
            print(line)


if __name__ == "__main__":
    main()

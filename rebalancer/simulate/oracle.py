"""The `oracle` reference: a lower bound on what keeping every needed replica Ready all the time
can cost, computed by a plan that knows the whole capacity history in advance.

It is not a controller and nothing of it runs in the world: it reads the same slot timelines
the pools replay (same seed, same notice lengths) and the scenario's shortest times, and
returns the step function of (Ready replicas, cost rate) a Result is measured from. Under the
simulator's assumptions no policy keeps all replicas Ready for the whole horizon for less
(docs/simulate.md, "The oracle", has the argument):

1. a spot node on slot `s` can serve at `t` only if it was asked for at some `c <= t - lead`
   (`lead` = the shortest spot provisioning plus the shortest model load) while `s` was alive,
   and it is gone at the slot's next loss plus that loss's notice: so `t` lies in one of the
   slot's windows `[up + lead, down + notice)`; a slot holds one node at a time. `S(t)`, the
   slots whose window covers `t`, bounds the Ready spot nodes;
2. the on-demand replicas Ready at `t` are then at least `D(t) = N - min(N, S(t) * per_node)`,
   each on a node asked for by `t - lead_on_demand` and still there at `t`: at any `s`, at least
   `O(s) = ceil(max(D over [s, s + lead_on_demand]) / per_node)` on-demand nodes are paid;
3. at any `s`, at least `ceil(N / per_node)` nodes are paid (N replicas Ready at `s`); with
   on-demand dearer than the cheapest spot, the least cost rate at `s` is
   `on_demand * O(s) + cheapest_spot * max(0, ceil(N / per_node) - O(s))`.

The bound ignores what only adds cost (spot nodes' own lead, the scale-down delay, pools'
minimum counts), so it may not be reachable; it is a floor, the end of the yardstick.
With an on-demand limit too low to cover `D(t)`, the time it cannot is counted as not all Ready.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from rebalancer.simulate.trace import SlotTimeline
from rebalancer.simulate.workload import Scenario
from rebalancer.simulate.world import Sample


def slot_windows(
    timeline: SlotTimeline, *, start: float, lead: float
) -> list[list[tuple[float, float]]]:
    """Per slot, the spans in which a node on it could be serving (merged, sorted)."""
    up: dict[int, float] = {slot: start for slot in timeline.initially_alive}
    windows: list[list[tuple[float, float]]] = [[] for _ in range(timeline.slots)]
    for event in timeline.events:
        if event.alive:
            up[event.slot] = event.at
        elif event.slot in up:
            began = up.pop(event.slot)
            _add(windows[event.slot], began + lead, event.at + event.notice_seconds)
    for slot, began in up.items():
        _add(windows[slot], began + lead, math.inf)
    return windows


def _add(spans: list[tuple[float, float]], begin: float, end: float) -> None:
    if end <= begin:
        return
    if spans and begin <= spans[-1][1]:
        spans[-1] = (spans[-1][0], max(spans[-1][1], end))
    else:
        spans.append((begin, end))


def _steps(spans: Sequence[tuple[float, float]], horizon: float) -> tuple[list[float], list[int]]:
    """The number of spans covering t, as breakpoints and values on [0, horizon)."""
    changes: dict[float, int] = {}
    for begin, end in spans:
        changes[begin] = changes.get(begin, 0) + 1
        changes[end] = changes.get(end, 0) - 1
    points, values = [0.0], [0]
    count = 0
    for at in sorted(changes):
        count += changes[at]
        if at <= 0:
            values[0] = count
        elif at < horizon:
            points.append(at)
            values.append(count)
    return points, values


def _value(points: list[float], values: list[int], at: float) -> int:
    return values[bisect.bisect_right(points, at) - 1]


def _max_over(points: list[float], values: list[int], begin: float, end: float) -> int:
    first = bisect.bisect_right(points, begin) - 1
    last = bisect.bisect_left(points, end)  # pieces starting before `end`
    return max(values[first : max(first + 1, last)])


def oracle_samples(
    *,
    timelines: Sequence[SlotTimeline],
    scenario: Scenario,
    horizon: float,
    per_node: int,
    on_demand_price: float,
    cheapest_spot_price: float,
) -> list[Sample]:
    needed = scenario.replicas
    nodes_needed = math.ceil(needed / per_node)
    load = scenario.load_seconds.minimum
    spot_lead = scenario.spot_provision_seconds.minimum + load
    on_demand_lead = scenario.on_demand_provision_seconds.minimum + load
    spot_price = min(cheapest_spot_price, on_demand_price)
    spans = [
        span
        for timeline in timelines
        for slot in slot_windows(timeline, start=-scenario.warmup_seconds, lead=spot_lead)
        for span in slot
    ]
    slot_points, slot_values = _steps(spans, horizon)
    missing = [needed - min(needed, count * per_node) for count in slot_values]
    # The on-demand nodes that must be paid at s look ahead over [s, s + lead]: the value
    # changes where a piece of D begins, and a lead before it.
    cuts = sorted(
        {0.0, *slot_points, *(p - on_demand_lead for p in slot_points if p > on_demand_lead)}
    )
    limit = scenario.on_demand_limit
    samples: list[Sample] = []
    for index, begin in enumerate(cuts):
        end = cuts[index + 1] if index + 1 < len(cuts) else horizon
        middle = (begin + end) / 2
        ahead = _max_over(slot_points, missing, middle, min(horizon, middle + on_demand_lead))
        on_demand = math.ceil(ahead / per_node)
        if limit is not None:
            on_demand = min(on_demand, limit)
        spot = max(0, nodes_needed - on_demand)
        spot_now = _value(slot_points, slot_values, middle) * per_node
        covered = min(needed, spot_now + on_demand * per_node)
        sample = Sample(
            at=begin,
            ready=covered,
            cost_rate=on_demand * on_demand_price + spot * spot_price,
            on_demand_nodes=on_demand,
            spot_nodes=spot,
        )
        last = samples[-1] if samples else None
        if last is None or (last.ready, last.cost_rate, last.on_demand_nodes) != (
            sample.ready,
            sample.cost_rate,
            sample.on_demand_nodes,
        ):
            samples.append(sample)
    return samples

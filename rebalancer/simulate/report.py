"""Results as a terminal table, JSON for scripts, and a self-contained HTML page with inline
SVG plots (no scripts, no external resources). Pure: returns text, writes nothing.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from rebalancer.simulate.engine import RunResult
from rebalancer.simulate.policies import REFERENCE
from rebalancer.simulate.trace import Trace
from rebalancer.simulate.workload import Prices, Scenario, camel

COLOURS = ("#1b6ca8", "#d1495b", "#2a9d4b", "#e08a00", "#7a4fb0", "#00a0a0", "#8c564b", "#555")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _rows(results: Sequence[RunResult]) -> list[list[str]]:
    rows = []
    for result in results:
        outages = result.outages
        mean = sum(outages) / len(outages) if outages else 0.0
        rows.append(
            [
                result.policy,
                f"{result.availability * 100:.3f}%",
                f"{result.any_ready * 100:.3f}%",
                f"{result.deficit_replica_hours:.2f}",
                str(len(outages)),
                _duration(mean) if outages else "-",
                _duration(max(outages)) if outages else "-",
                f"{result.cost:,.0f}",
                f"{result.cost / result.all_on_demand_cost * 100:.1f}%",
                str(result.counters.notices),
                str(result.counters.failovers),
                str(result.counters.returns),
            ]
        )
    return rows


HEADERS = [
    "policy",
    "avail (all)",
    "avail (>=1)",
    "deficit r*h",
    "outages",
    "mean",
    "longest",
    "cost $",
    "of on-demand",
    "notices",
    "fail-overs",
    "returns",
]


def table(results: Sequence[RunResult], *, markdown: bool = False) -> str:
    rows = _rows(results)
    if markdown:
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w)
        for i, (h, w) in enumerate(zip(HEADERS, widths, strict=True))
    )
    out = [line, "-" * len(line)]
    for row in rows:
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(out)


def describe(
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float,
    policies: Sequence[str] = (),
) -> str:
    pools = ", ".join(f"{t.name} ({max(t.data)} slots, zone {t.zone})" for t in traces)
    text = (
        f"{len(traces)} spot pool(s): {pools}; {horizon / 86400:.1f} days. "
        f"{scenario.replicas} replicas x {scenario.gpus_per_replica} GPU on {scenario.vm_size} "
        f"({scenario.region}: ${prices.on_demand}/h on demand, ${prices.spot}/h spot), "
        f"load {scenario.load_seconds}s, notices {scenario.notice_seconds}s, on-demand nodes in "
        f"{scenario.on_demand_provision_seconds}s, spot nodes in "
        f"{scenario.spot_provision_seconds}s, "
        f"pools at least {scenario.spot_pool_min_nodes} spot / "
        f"{scenario.on_demand_pool_min_nodes} on-demand nodes, "
        + (
            "spot capacity known in advance, "
            if scenario.spot_capacity_known
            else f"a spot request without capacity fails after "
            f"{scenario.max_node_provision_seconds:.0f}s, "
        )
        + f"seed {scenario.seed}."
    )
    if "eviction-aware" in policies:
        text += (
            f" eviction-aware: max-risk {scenario.max_risk}, min-on-demand "
            f"{scenario.min_on_demand}, spare-replicas {scenario.spare_replicas}, spread "
            f"{scenario.spread}, failover-to {scenario.failover_to}."
        )
    return text


def to_json(
    results: Sequence[RunResult],
    *,
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float,
) -> str:
    # The YAML keys (camelCase), each value as a YAML file would give it.
    settings = {
        camel(f.name): (
            getattr(scenario, f.name)
            if isinstance(getattr(scenario, f.name), int | float | str | None)
            else str(getattr(scenario, f.name))
        )
        for f in fields(scenario)
    }
    document: dict[str, Any] = {
        "horizonSeconds": horizon,
        "scenario": settings,
        "prices": {
            "onDemand": prices.on_demand,
            "spot": prices.spot,
            "spotByRegion": dict(prices.spot_by_region),
        },
        "traces": [
            {
                "name": t.name,
                "source": t.source,
                "gapSeconds": t.gap_seconds,
                "ticks": len(t.data),
                "slots": max(t.data),
                "zone": t.zone,
                "region": t.region,
            }
            for t in traces
        ],
        "results": [{**r.summary(), "outageSeconds": r.outages} for r in results],
    }
    return json.dumps(document, indent=2)


# ---- HTML ----------------------------------------------------------------------------------------

WIDTH = 900
STRIP = 70
LEFT = 60


def _lowest_per_pixel(points: Sequence[tuple[float, float]], horizon: float) -> list[float]:
    """A step function (time, value from then on) as the lowest value in each pixel column."""
    lows = [float("inf")] * WIDTH
    for index, (start, value) in enumerate(points):
        end = points[index + 1][0] if index + 1 < len(points) else horizon
        if end <= start and index + 1 < len(points):
            continue
        first = min(WIDTH - 1, int(start / horizon * WIDTH))
        last = min(WIDTH - 1, max(first, int((min(end, horizon) - 1e-9) / horizon * WIDTH)))
        for column in range(first, last + 1):
            lows[column] = min(lows[column], value)
    fill = 0.0
    for column in range(WIDTH):  # columns no segment touched keep the value before them
        if lows[column] == float("inf"):
            lows[column] = fill
        fill = lows[column]
    return lows


def _strip(
    label: str,
    values: Sequence[float],
    top: float,
    colour: str,
    needed: float | None,
    *,
    area: bool,
    y: int,
) -> str:
    scale = (STRIP - 10) / top if top > 0 else 0.0

    def ypos(v: float) -> float:
        return y + STRIP - 4 - v * scale

    coords = " ".join(
        f"{LEFT + i},{ypos(v):.1f} {LEFT + i + 1},{ypos(v):.1f}" for i, v in enumerate(values)
    )
    parts = [
        f'<rect x="{LEFT}" y="{y}" width="{WIDTH}" height="{STRIP}" fill="#fafafa" stroke="#ddd"/>',
    ]
    if area:
        parts.append(
            f'<polygon points="{LEFT},{ypos(0):.1f} {coords} {LEFT + WIDTH},{ypos(0):.1f}" '
            f'fill="{colour}" fill-opacity="0.35" stroke="none"/>'
        )
    else:
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.2"/>'
        )
    if needed is not None:
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{ypos(needed):.1f}" '
            f'y2="{ypos(needed):.1f}" stroke="#333" stroke-dasharray="4 3" stroke-width="0.8"/>'
        )
    parts.append(f'<text x="{LEFT + WIDTH + 4}" y="{y + 12}" font-size="10">{top:g}</text>')
    parts.append(
        f'<text x="{LEFT + 6}" y="{y + 13}" font-size="11" font-weight="bold">'
        f"{html.escape(label)}</text>"
    )
    return "\n".join(parts)


def _axis(horizon: float, y: int) -> str:
    days = horizon / 86400
    step = 1 if days <= 10 else 2 if days <= 20 else 5
    ticks = []
    day = 0
    while day <= days:
        x = LEFT + day * 86400 / horizon * WIDTH
        ticks.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 5}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{y + 17}" text-anchor="middle" font-size="10">'
            f"{day}d</text>"
        )
        day += step
    return "\n".join(ticks)


def _timeline_svg(results: Sequence[RunResult], traces: Sequence[Trace], horizon: float) -> str:
    parts = []
    y = 10
    for trace in traces:
        changes = [(0.0, float(trace.data[0]))]
        for index, value in enumerate(trace.data):
            if value != changes[-1][1]:
                changes.append((index * trace.gap_seconds, float(value)))
        lows = _lowest_per_pixel(changes, horizon)
        parts.append(
            _strip(
                f"{trace.name} capacity",
                lows,
                max(1, *trace.data),
                "#888",
                None,
                area=True,
                y=y,
            )
        )
        y += STRIP + 6
    for index, result in enumerate(results):
        points = [(s.at, float(s.ready)) for s in result.samples]
        lows = _lowest_per_pixel(points, horizon)
        top = 1 + max(float(result.needed), max((s.ready for s in result.samples), default=0))
        colour = COLOURS[index % len(COLOURS)]
        parts.append(
            _strip(
                f"{result.policy} Ready", lows, top, colour, float(result.needed), area=False, y=y
            )
        )
        y += STRIP + 6
    parts.append(_axis(horizon, y))
    height = y + 25
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 40}" height="{height}" '
        f'font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="Ready replicas per policy against the spot capacity of each pool">'
        f"{''.join(parts)}</svg>"
    )


def _cost_svg(results: Sequence[RunResult], horizon: float) -> str:
    height = 260
    top = max((r.cost for r in results), default=1.0) or 1.0
    parts = [
        f'<rect x="{LEFT}" y="10" width="{WIDTH}" height="{height}" fill="#fafafa" stroke="#ddd"/>'
    ]
    for index, result in enumerate(results):
        points = result.cumulative_cost()
        step = max(1, len(points) // 2000)
        thinned = [*points[::step], points[-1]]
        coords = " ".join(
            f"{LEFT + t / horizon * WIDTH:.1f},{10 + height - c / top * (height - 10):.1f}"
            for t, c in thinned
        )
        colour = COLOURS[index % len(COLOURS)]
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
        )
    label_y = 10.0 + height + 12
    for index, result in sorted(enumerate(results), key=lambda pair: pair[1].cost):
        # Cheapest lowest; labels at least 12 px apart so that equal costs stay readable.
        label_y = min(label_y - 12, 10 + height - result.cost / top * (height - 10) + 4)
        parts.append(
            f'<text x="{LEFT + WIDTH + 4}" y="{label_y:.1f}" font-size="10" '
            f'fill="{COLOURS[index % len(COLOURS)]}">{html.escape(result.policy)} '
            f"${result.cost:,.0f}</text>"
        )
    parts.append(f'<text x="{LEFT - 8}" y="20" text-anchor="end">${top:,.0f}</text>')
    parts.append(f'<text x="{LEFT - 8}" y="{10 + height}" text-anchor="end">$0</text>')
    parts.append(_axis(horizon, 10 + height))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 160}" '
        f'height="{height + 40}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="Cumulative cost per policy">{"".join(parts)}</svg>'
    )


BUCKETS = (
    (120, "<2m"),
    (300, "2-5m"),
    (600, "5-10m"),
    (1800, "10-30m"),
    (3600, "30m-1h"),
    (float("inf"), ">1h"),
)


def _outage_svg(results: Sequence[RunResult]) -> str:
    counts = []
    for result in results:
        row = [0] * len(BUCKETS)
        for length in result.outages:
            row[next(i for i, (limit, _) in enumerate(BUCKETS) if length < limit)] += 1
        counts.append(row)
    top = max((c for row in counts for c in row), default=1) or 1
    height = 200
    group = WIDTH / len(BUCKETS)
    bar = (group - 20) / max(1, len(results))
    parts = [
        f'<rect x="{LEFT}" y="10" width="{WIDTH}" height="{height}" fill="#fafafa" stroke="#ddd"/>'
    ]
    for b, (_, label) in enumerate(BUCKETS):
        x0 = LEFT + b * group + 10
        parts.append(
            f'<text x="{x0 + (group - 20) / 2:.1f}" y="{height + 26}" '
            f'text-anchor="middle">{label}</text>'
        )
        for r, row in enumerate(counts):
            h = row[b] / top * (height - 20)
            colour = COLOURS[r % len(COLOURS)]
            parts.append(
                f'<rect x="{x0 + r * bar:.1f}" y="{10 + height - h:.1f}" width="{bar - 2:.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{html.escape(results[r].policy)}: '
                f"{row[b]} outage(s) {label}</title></rect>"
            )
            if row[b]:
                parts.append(
                    f'<text x="{x0 + r * bar + bar / 2 - 1:.1f}" '
                    f'y="{10 + height - h - 3:.1f}" text-anchor="middle" '
                    f'font-size="9">{row[b]}</text>'
                )
    parts.append(f'<text x="{LEFT - 8}" y="24" text-anchor="end">{top}</text>')
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 40}" '
        f'height="{height + 40}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="Outage durations per policy">{"".join(parts)}</svg>'
    )


# The availability axis in "nines": 90% is 1, 99.9% is 3; 100% sits on the top line.
NINES_TOP = 5


def _nines(availability: float) -> float:
    return min(NINES_TOP, -math.log10(max(1e-12, 1 - availability)))


def _frontier_svg(results: Sequence[RunResult]) -> str:
    """Every policy as one point: cost share of on-demand across, availability (all Ready)
    up; references as rings, the product's policies as discs."""
    height, width = 300, 640
    top_cost = max(1.0, *(r.cost / r.all_on_demand_cost for r in results)) * 1.05

    def xpos(share: float) -> float:
        return LEFT + share / top_cost * width

    def ypos(availability: float) -> float:
        return 10 + height - _nines(availability) / NINES_TOP * height

    parts = [
        f'<rect x="{LEFT}" y="10" width="{width}" height="{height}" fill="#fafafa" stroke="#ddd"/>'
    ]
    for nines, label in ((0, "0%"), (1, "90%"), (2, "99%"), (3, "99.9%"), (4, "99.99%")):
        y = 10 + height - nines / NINES_TOP * height
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + width}" y1="{y}" y2="{y}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{label}</text>')
    parts.append(f'<text x="{LEFT - 6}" y="14" text-anchor="end">100%</text>')
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = xpos(share)
        parts.append(
            f'<text x="{x:.1f}" y="{height + 26}" text-anchor="middle">{share * 100:.0f}%</text>'
        )
    parts.append(
        f'<text x="{LEFT + width / 2}" y="{height + 42}" text-anchor="middle">'
        "cost, share of on-demand</text>"
    )
    for index, result in enumerate(results):
        colour = COLOURS[index % len(COLOURS)]
        share = result.cost / result.all_on_demand_cost
        x, y = xpos(share), ypos(result.availability)
        fill = "none" if result.policy in REFERENCE else colour
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{colour}" '
            f'stroke-width="2"><title>{html.escape(result.policy)}: '
            f"{result.availability * 100:.3f}% all Ready at {share * 100:.1f}% of on-demand"
            f"</title></circle>"
        )
        parts.append(
            f'<text x="{x + 8:.1f}" y="{y + 4 + (index % 2) * 10:.1f}" fill="{colour}">'
            f"{html.escape(result.policy)}</text>"
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + width + 120}" '
        f'height="{height + 50}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="Availability against cost, every policy">{"".join(parts)}</svg>'
    )


def drain_note(result: RunResult) -> str:
    """Why `spot-drain` costs what it does: nothing brings a replica back to spot."""
    on_demand = spot = 0.0
    last_spot = 0.0
    for start, end, sample in result.intervals():
        on_demand += sample.on_demand_nodes * (end - start)
        spot += sample.spot_nodes * (end - start)
        if sample.spot_nodes:
            last_spot = end
    total = on_demand + spot
    share = on_demand / total if total else 0.0
    return (
        f"spot-drain costs {result.cost / result.all_on_demand_cost * 100:.1f}% of on-demand "
        "because nothing returns a replica to spot: a replica evicted by a Preempt (or started "
        "while spot had no capacity) goes to an on-demand node and stays there. "
        f"{share * 100:.0f}% of its node-hours were on demand; its last spot node was gone "
        f"at day {last_spot / 86400:.1f} of {result.horizon / 86400:.1f}."
    )


def to_html(
    results: Sequence[RunResult],
    *,
    traces: Sequence[Trace],
    scenario: Scenario,
    prices: Prices,
    horizon: float,
) -> str:
    legend = " ".join(
        f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(r.policy)}</span>'
        f" ({html.escape(r.label)})"
        for i, r in enumerate(results)
    )
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in _rows(results)
    )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    policies = [r.policy for r in results]
    drain = "".join(
        f'<p class="note">{html.escape(drain_note(r))}</p>'
        for r in results
        if r.policy == "spot-drain"
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>rebalancer simulate</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; max-width: 1150px; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.note {{ color: #555; font-size: 13px; }}
</style>
</head>
<body>
<h1>Spot vs on-demand: availability and cost per policy</h1>
{_frontier_svg(results)}
<p class="note">Each policy at its availability (all {scenario.replicas} replicas Ready, on a
scale of nines) and its cost as a share of on-demand; rings are reference policies (not the
product), discs the product's. Up and to the left is better; <code>oracle</code> is the least
any plan can pay for 100%.</p>
<p class="note">{html.escape(describe(traces, scenario, prices, horizon, policies))}</p>
{drain}
<table><thead><tr>{head}</tr></thead><tbody>
{rows}
</tbody></table>
<p class="note">avail (all): fraction of time with all {scenario.replicas} replicas Ready;
avail (&gt;=1): with at least one; deficit: missing Ready replica-hours; outages: periods below
{scenario.replicas} Ready; cost: nodes paid from provisioning until gone, as a share of
{scenario.replicas} on-demand nodes for the whole period.</p>
<h2>Ready replicas against each pool's spot capacity</h2>
<p class="note">{legend}. Per pixel column the lowest value is drawn, so short dips stay
visible; the dashed line is the {scenario.replicas} replicas needed.</p>
{_timeline_svg(results, traces, horizon)}
<h2>Cumulative cost</h2>
{_cost_svg(results, horizon)}
<h2>Outage durations</h2>
<p class="note">Periods with fewer than {scenario.replicas} Ready replicas, by length.</p>
{_outage_svg(results)}
</body>
</html>
"""

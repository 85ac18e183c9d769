"""The HTML report's opening chart (availability against cost, every policy) and its note on
`spot-drain`'s cost, on test_policies.py's hand-made scenario. Rendering in a browser is
test_html.py's."""

from __future__ import annotations

import re

from rebalancer.simulate.report import drain_note, to_html
from tests.simulate.test_policies import (
    AWAY_AND_BACK,
    HORIZON,
    HOUR,
    MAX_PROVISION,
    NOTICE,
    PRICES,
    run,
    scenario,
    trace,
)

POLICIES = ("on-demand", "spot-drain", "failover", "dynamic-fallback", "oracle")


def page() -> str:
    traces = [trace("a", AWAY_AND_BACK)]
    results = [run(policy, traces) for policy in POLICIES]
    return to_html(results, traces=traces, scenario=scenario(), prices=PRICES, horizon=HORIZON)


def test_the_report_opens_with_availability_against_cost_of_every_policy() -> None:
    text = page()
    after_title = text.split("</h1>", 1)[1]
    first_svg = after_title[: after_title.index("</svg>")]
    assert after_title.lstrip().startswith("<svg")
    assert 'aria-label="Availability against cost, every policy"' in first_svg
    points = re.findall(r'<circle [^>]*fill="([^"]+)"[^>]*><title>([\w-]+): ', first_svg)
    assert [policy for _, policy in points] == list(POLICIES)
    rings = {policy for fill, policy in points if fill == "none"}
    assert rings == {"on-demand", "dynamic-fallback", "oracle"}  # the references
    # on-demand: 100% all Ready at 100% of the on-demand cost: on the top line, at 100%.
    assert "on-demand: 100.000% all Ready at 100.0% of on-demand" in first_svg


def test_the_report_says_why_spot_drain_costs_what_it_does() -> None:
    # spot-drain on the trace: spot until the node goes at 3600 + 30; the replica then waits for
    # the failed spot request (900 s) and runs on demand from 4500 to the end, never back.
    result = run("spot-drain", [trace("a", AWAY_AND_BACK)])
    spot_seconds = HOUR + NOTICE
    on_demand_seconds = HORIZON - HOUR - MAX_PROVISION
    cost = (spot_seconds * PRICES.spot + on_demand_seconds * PRICES.on_demand) / 3600
    share = cost / (PRICES.on_demand * HORIZON / 3600)
    hours_on_demand = on_demand_seconds / (on_demand_seconds + spot_seconds)
    note = drain_note(result)
    assert f"costs {share * 100:.1f}% of on-demand" in note
    assert "nothing returns a replica to spot" in note
    assert f"{hours_on_demand * 100:.0f}% of its node-hours were on demand" in note
    assert "last spot node was gone at day 0.0 of 0.1" in note
    assert note in page().replace("&#x27;", "'")

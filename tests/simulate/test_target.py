"""The `target` policy (issue 22) in the simulator: the product's planner (`target_plan.py`) and
webhook placement, with test_policies.py's scenario (on-demand $4/h, spot $1/h, nodes Ready 300 s
after they are asked for, 90 s loads, scale-down after 600 s, a 30-minute warm-up)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rebalancer import names
from rebalancer.cli import main
from rebalancer.controller.model import Spare
from rebalancer.simulate.policies import build
from tests.simulate.test_policies import HORIZON, PRICES, scenario, trace

STEADY = [4] * int(HORIZON // 600)  # room for 4 nodes in each zone, never lost


def test_with_steady_spot_the_plan_runs_on_spot_alone_once_settled() -> None:
    traces = [trace(name, STEADY) for name in ("za", "zb", "zc")]
    world, controller = build(
        "target",
        traces=traces,
        scenario=scenario(replicas=3, availabilityTarget="99.9"),
        prices=PRICES,
        horizon=HORIZON,
    )
    world.run(controller)
    deployment = world.deployments["inference"]
    record = Spare.from_json(deployment.annotations[names.SPARE_RECORD])
    assert record.base == 3 and record.spot is not None and record.spot > 3
    # By t=0 the spot replicas are Ready (asked at -1800, Ready at -1410), the on-demand ones
    # that covered them are gone (at once) and so are their nodes (600 s later): from then on
    # the bill is the plan's spot nodes and nothing else, and every replica is Ready.
    result_samples = [s for s in world.samples if s.at >= 0]
    assert all(s.ready == record.spot for s in result_samples)
    assert all((s.spot_nodes, s.on_demand_nodes) == (record.spot, 0) for s in result_samples)
    assert all(s.cost_rate == pytest.approx(record.spot * PRICES.spot) for s in result_samples)
    assert deployment.replicas == record.spot


def test_an_invalid_target_is_refused_in_one_line(
    write_trace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace("zone-a", [1, 1, 1])
    code = main(["simulate", "--trace", str(path), "--availability-target", "100"])
    assert code == 2
    assert "'100' is not between 50 and 99.999" in capsys.readouterr().err

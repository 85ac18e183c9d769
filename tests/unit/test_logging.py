"""Log lines print values as a reader spells them: enums by value, decisions as one line."""

from __future__ import annotations

import json

import pytest
import structlog

from rebalancer.clock import ManualClock
from rebalancer.controller.actions import APPLIED, Outcome, Restore
from rebalancer.controller.reconciler import Controller
from rebalancer.controller.settings import ControllerSettings
from rebalancer.logging import get_logger, setup_logging
from rebalancer.metrics import ControllerMetrics
from rebalancer.vocabulary import ActionResult, Reason, Rejection


@pytest.fixture(autouse=True)
def _reset_structlog() -> object:
    yield
    structlog.reset_defaults()


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_enums_print_their_value(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", fmt)
    get_logger().info(
        "notice gone",
        reason=Reason.CANCELLED,
        reasons=[Reason.CANCELLED, Reason.NOTICE],
        by={"why": Reason.CANCELLED},
    )
    line = capsys.readouterr().err
    assert "<Reason" not in line and "Reason.CANCELLED" not in line, line
    if fmt == "json":
        record = json.loads(line)
        assert record["reason"] == "NoticeGone"
        assert record["reasons"] == ["NoticeGone", "Notice"]
        assert record["by"] == {"why": "NoticeGone"}
    else:
        assert "reason=NoticeGone" in line


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_decision_prints_as_one_line_of_values(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the recorder logs of an action it did not act on (a rejection, a dry run)."""
    setup_logging("info", fmt)
    controller = Controller(
        settings=ControllerSettings(),
        client=None,  # type: ignore[arg-type]  # nothing is called before run()
        metrics=ControllerMetrics(),
        clock=ManualClock(),
        log=get_logger(),
        identity="test",
    )
    action = Restore("aks-spot-1", "event-1", Reason.CANCELLED, basis={"metadata": {}})
    controller.recorder.applied(action, Outcome(ActionResult.REJECTED, Rejection.STALE, "changed"))
    controller.recorder.applied(action, Outcome(ActionResult.DRY_RUN))
    controller.recorder.applied(action, APPLIED)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        assert "<Reason" not in line, line
        assert "Restore(node=aks-spot-1, uid=, event_id=event-1, reason=NoticeGone)" in line
        assert "basis" not in line  # not part of the action's repr either

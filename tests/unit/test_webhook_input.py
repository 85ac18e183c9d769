"""What the webhook reads from its clients: quantities in ASCII only, bounded JSON depth, bounded
memory of its placements, and its limits as settings (issue 18)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from rebalancer.config import describe_error
from rebalancer.controller import webhook as webhook_module
from rebalancer.controller.admission import review
from rebalancer.controller.model import gpus_of, parse_quantity, unreadable_gpus
from rebalancer.controller.settings import ControllerSettings
from rebalancer.controller.webhook import PlacementWebhook, nested_deeper_than
from rebalancer.controller.webhook_server import Limits
from rebalancer.metrics import ControllerMetrics
from tests.unit.test_placement import cluster, request, view_of


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0), ("500m", 0.5), ("16Gi", 16 * 2**30), ("2k", 2000.0), ("1e3", 1000.0),
        ("2E", 2e18), ("+.5", 0.5), ("1.", 1.0), (" 2 ", 2.0), ("-1", -1.0), (4, 4.0),
        (None, 0.0), ("", 0.0),
        # Not quantities: 0, never a number float() or int() would make of them.
        ("\uff11", 0.0), ("\u00b2", 0.0), ("\u0661", 0.0), ("1_0", 0.0), ("nan", 0.0),
        ("inf", 0.0), ("1e999", 0.0), ("9" * 5000, 0.0), ("Ki", 0.0), ("1 Gi", 0.0),
    ],
)  # fmt: skip
def test_a_quantity_is_read_in_ascii_only(text: object, value: float) -> None:
    assert parse_quantity(text) == value


@given(st.text(max_size=80))
def test_any_text_is_a_finite_quantity_or_zero_and_never_raises(text: str) -> None:
    value = parse_quantity(text)
    assert math.isfinite(value)
    if not text.isascii():
        assert value == 0.0


def pod_asking(gpus: object) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}


def test_a_gpu_request_that_is_not_a_quantity_is_unreadable() -> None:
    assert unreadable_gpus(pod_asking("\uff11")) and gpus_of(pod_asking("\uff11")) == 0
    assert unreadable_gpus(pod_asking("1e999"))
    assert not unreadable_gpus(pod_asking("2")) and gpus_of(pod_asking("2")) == 2
    assert not unreadable_gpus({"containers": [{"name": "c"}]})


def test_a_pod_with_an_unreadable_gpu_request_is_allowed_unchanged() -> None:
    body = request("fw")
    body["request"]["object"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "\uff11"}
    }
    result = review(body, view_of(cluster({"spot-rebalancer.io/spread": "zone"})), [])
    assert result.outcome == "unreadable"
    assert result.response["response"] == {"uid": "fw", "allowed": True}


def test_a_uid_longer_than_any_the_api_server_sends_is_not_a_review() -> None:
    view = view_of(cluster({"spot-rebalancer.io/spread": "zone"}))
    assert review(request("u" * 129), view, []).outcome == "bad_request"
    assert review(request("u" * 128), view, []).outcome == "placed"


@pytest.mark.parametrize(
    ("value", "limit", "deeper"),
    [
        (1, 0, False), ([], 1, False), ([], 0, True), ({"a": [1, {"b": {}}]}, 4, False),
        ({"a": [1, {"b": {}}]}, 3, True), ([[[]]] * 1000, 3, False), ("[[[[", 1, False),
    ],
)  # fmt: skip
def test_nesting_depth(value: object, limit: int, deeper: bool) -> None:
    assert nested_deeper_than(value, limit) is deeper


def test_the_webhook_remembers_a_bounded_number_of_recent_placements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webhook_module, "MAX_RECENT", 3)
    view = view_of(cluster({"spot-rebalancer.io/spread": "zone"}))
    clock = {"now": view.snapshot.now}
    hook = PlacementWebhook(
        lambda: view, metrics=ControllerMetrics(), now=lambda: clock["now"],
        log=structlog.get_logger(),
    )  # fmt: skip
    for index in range(10):
        assert hook.answer(request(f"r{index}"))["response"]["patchType"] == "JSONPatch"
    assert [a.review for a in hook.admitted] == ["r7", "r8", "r9"]
    clock["now"] += dt.timedelta(seconds=webhook_module.RECENT_SECONDS + 1)
    hook.answer(request("later"))
    assert [a.review for a in hook.admitted] == ["later"]


def test_the_limits_are_settings() -> None:
    settings = ControllerSettings.model_validate(
        {"webhook_max_connections": 10, "webhook_handshake_timeout_seconds": 1.5}
    )
    limits = Limits.of(settings)
    assert (limits.max_connections, limits.handshake_timeout_seconds) == (10, 1.5)
    assert Limits.of(ControllerSettings()) == Limits()  # one set of defaults


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("webhook_max_connections", 0),
        ("webhook_handshake_timeout_seconds", 0),
        ("webhook_max_json_depth", 1000),
        ("webhook_max_body_bytes", 10),
    ],
)
def test_a_bad_limit_stops_the_controller_with_one_line_naming_it(name: str, value: Any) -> None:
    with pytest.raises(ValidationError) as error:
        ControllerSettings.model_validate({name: value})
    line = describe_error(error.value)
    assert line.startswith(f"invalid setting {name} (REBALANCER_{name.upper()} / --")

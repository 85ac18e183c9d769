"""How long Azure asks a caller to wait: Retry-After in both forms, the quota headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from rebalancer.azure.arm import quota_reset_seconds, retry_after_seconds

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
IN_A_MINUTE = format_datetime(NOW + timedelta(seconds=60), usegmt=True)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"x-ms-user-quota-resets-after": "00:00:03"}, 3.0),
        ({"x-ms-user-quota-resets-after": "01:02:03.5"}, 3723.5),
        ({"Retry-After": "soon", "x-ms-user-quota-resets-after": "00:01:00"}, 60.0),
        ({"Retry-After": "2", "x-ms-user-quota-resets-after": "00:01:00"}, 2.0),
        ({}, None),
        ({"x-ms-user-quota-resets-after": "3 s"}, None),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after_seconds(headers) == seconds


def test_retry_after_as_an_http_date() -> None:
    assert retry_after_seconds({"Retry-After": IN_A_MINUTE}, NOW) == 60.0


def test_quota_reset_needs_the_documented_form() -> None:
    assert quota_reset_seconds({"x-ms-user-quota-resets-after": "00:00:05"}) == 5.0
    assert quota_reset_seconds({"x-ms-user-quota-remaining": "0"}) is None

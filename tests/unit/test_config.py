"""Settings: selectors and the one-line error."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rebalancer.config import ControllerSettings, describe_error, parse_selector


def test_parse_selector() -> None:
    assert parse_selector("app=llm, tier ,") == {"app": "llm", "tier": None}
    assert parse_selector("") == {}


@pytest.mark.parametrize("text", ["app!=llm", "app in (a)", "=x"])
def test_unsupported_selectors_are_refused(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        ControllerSettings(workload_selector=text)
    line = describe_error(error.value)
    assert line.startswith("invalid setting workload_selector (REBALANCER_WORKLOAD_SELECTOR")
    assert "\n" not in line

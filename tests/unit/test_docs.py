"""Documentation generated from code is committed up to date."""

from __future__ import annotations

from rebalancer.vocabulary import EventReason
from tests.docs_generated import SETTINGS_DOC, settings_doc


def test_the_settings_reference_matches_config() -> None:
    assert SETTINGS_DOC.read_text() == settings_doc(), (
        "docs/settings.md is stale: run scripts/render-chart-files"
    )


def test_every_kubernetes_event_reason_is_in_the_readme() -> None:
    readme = (SETTINGS_DOC.parents[1] / "README.md").read_text()
    missing = [reason.value for reason in EventReason if f"`{reason.value}`" not in readme]
    assert missing == [], f"README 'Kubernetes Events' lacks {missing}"

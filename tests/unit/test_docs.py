"""Documentation that the code can check: the generated parts are current, and every name the
README and docs/ state (event reasons, settings, metrics, doctor checks, links between pages)
exists in the code, and every one the code has is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from rebalancer.config import AgentSettings, setting_fields
from rebalancer.controller.settings import ControllerSettings
from rebalancer.metrics import AgentMetrics, ControllerMetrics
from rebalancer.vocabulary import Check, EventReason
from tests.docs_generated import SETTINGS_DOC, settings_doc

ROOT = SETTINGS_DOC.parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT_BYTES = 12_000  # a platform engineer reads it in two minutes (issue 20)


def documents() -> list[Path]:
    others = [ROOT / "charts" / "spot-rebalancer" / "README.md", ROOT / "dashboards" / "README.md"]
    return [README, *sorted(DOCS.glob("*.md")), *others]


def text_of_all() -> dict[Path, str]:
    return {path: path.read_text() for path in documents()}


def test_the_settings_reference_matches_config() -> None:
    assert SETTINGS_DOC.read_text() == settings_doc(), (
        "docs/settings.md is stale: run scripts/render-chart-files"
    )


# ---- the README itself ---------------------------------------------------------------------


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move detail into docs/"
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[0] == "The two commands", sections
    commands = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    for needed in ("scripts/demo", "scripts/test", "Python 3.11", "Go 1.26", ".ci/run"):
        assert needed in commands, f"'The two commands' no longer says {needed}"


# ---- Kubernetes Events -----------------------------------------------------------------------


def test_every_kubernetes_event_reason_is_in_docs_events() -> None:
    table = (DOCS / "events.md").read_text()
    missing = [reason.value for reason in EventReason if f"`{reason.value}`" not in table]
    assert missing == [], f"docs/events.md lacks {missing}"


def test_every_documented_reason_is_written_by_the_code() -> None:
    """A reason in the vocabulary that no Event constructor uses would be documented for
    nothing: each is named outside vocabulary.py (the catalogue, mostly)."""
    code = "\n".join(
        path.read_text()
        for path in (ROOT / "rebalancer").rglob("*.py")
        if path.name != "vocabulary.py"
    )
    assert [r.name for r in EventReason if f"EventReason.{r.name}" not in code] == []


def test_every_event_reason_the_docs_name_is_one_we_write() -> None:
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    alert_names = {rule["alert"] for group in alerts["groups"] for rule in group["rules"]}
    known = {reason.value for reason in EventReason} | alert_names
    for path, text in text_of_all().items():
        named = set(re.findall(r"`(SpotRebalancer[A-Za-z]+)`", text))
        assert named <= known, f"{path.name} names {named - known}"


# ---- settings --------------------------------------------------------------------------------


def setting_variables() -> set[str]:
    """REBALANCER_* of every setting of both processes, and the variables they also accept."""
    names: set[str] = set()
    for cls in (AgentSettings, ControllerSettings):
        for name, field in setting_fields(cls).items():
            names.add(f"REBALANCER_{name.upper()}")
            choices = getattr(field.validation_alias, "choices", [])
            names |= {c for c in choices if isinstance(c, str) and c.startswith("REBALANCER_")}
    return names


def test_every_setting_the_docs_name_exists() -> None:
    known = setting_variables()
    for path, text in text_of_all().items():
        named = set(re.findall(r"\bREBALANCER_[A-Z0-9][A-Z0-9_]*\b", text))
        assert named <= known, f"{path.name} names settings that do not exist: {named - known}"


def test_every_setting_is_documented() -> None:
    reference = SETTINGS_DOC.read_text()
    missing = sorted(name for name in setting_variables() if f"`{name}`" not in reference)
    assert missing == [], f"docs/settings.md lacks {missing}"


# ---- metrics ---------------------------------------------------------------------------------

SUFFIX = {"counter": "_total", "info": "_info"}
SERIES_SUFFIXES = {
    "counter": ["_total", "_created"],
    "histogram": ["", "_bucket", "_sum", "_count", "_created"],
    "gauge": [""],
    "info": ["_info"],
}


def registries() -> list[CollectorRegistry]:
    return [AgentMetrics().registry, ControllerMetrics().registry]


def test_every_metric_the_docs_name_exists() -> None:
    """Names as written in the docs: a series (`_total`, `_bucket`...) or a histogram's name."""
    known = {
        family.name + suffix
        for registry in registries()
        for family in registry.collect()
        for suffix in SERIES_SUFFIXES[family.type]
    }
    for path, text in text_of_all().items():
        # Not a word inside a path, an anchor or a module name (rebalancer_sim is the emulator).
        named = set(re.findall(r"(?<![\w/.#-])rebalancer_[a-z0-9_]+", text)) - {"rebalancer_sim"}
        # `rebalancer_savings_*` names a family of metrics: a prefix of some.
        unknown = {
            name
            for name in named - known
            if not (name.endswith("_") and any(k.startswith(name) for k in known))
        }
        assert not unknown, f"{path.name} names metrics that do not exist: {unknown}"


def test_every_metric_is_in_docs_metrics() -> None:
    reference = (DOCS / "metrics.md").read_text()
    missing = [
        family.name + SUFFIX.get(family.type, "")
        for registry in registries()
        for family in registry.collect()
        if f"`{family.name + SUFFIX.get(family.type, '')}`" not in reference
    ]
    assert missing == [], f"docs/metrics.md lacks {missing}"


# ---- the doctor's checks ---------------------------------------------------------------------


def test_every_doctor_check_is_in_docs_plugin() -> None:
    table = (DOCS / "plugin.md").read_text()
    assert [c.value for c in Check if f"| `{c.value}` |" not in table] == []


# ---- links between pages ---------------------------------------------------------------------


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (outside fenced code)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_link_between_pages_resolves(path: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        page, _, anchor = target.partition("#")
        linked = (path.parent / page).resolve() if page else path
        assert linked.exists(), f"{path.name}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{path.name}: no heading #{anchor} in {page}"

"""docs/settings.md, generated from the settings classes, so it cannot drift from config.py.

`scripts/render-chart-files` runs `python -m tests.docs_generated` to rewrite it;
tests/unit/test_docs.py fails when the committed copy differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import AliasChoices
from pydantic.fields import FieldInfo

from rebalancer.config import AgentSettings, setting_fields
from rebalancer.controller.settings import ControllerSettings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_DOC = ROOT / "docs" / "settings.md"

HEADER = """\
# Settings

<!-- generated from the settings classes by scripts/render-chart-files; do not edit -->

Each setting is an environment variable or a command-line flag of the same name; the flag wins.
A value that does not validate stops the process at start with one line naming the setting (for
example `rebalancer: invalid setting poll_interval_seconds (REBALANCER_POLL_INTERVAL_SECONDS /
--poll-interval-seconds): Input should be greater than or equal to 0.25`) and exit code 2. Lists
and maps are JSON in the environment. With the Helm chart, set them as `agent.settings.<camelCase>`
and `controller.settings.<camelCase>` (charts/spot-rebalancer/README.md); the chart's defaults
are these, which a test checks.
"""


def _default(field: FieldInfo) -> str:
    value: Any = field.get_default(call_default_factory=True)
    if value is None:
        return "(none)"
    if value == "":
        return '""'
    if isinstance(value, list | dict):
        return f"`{json.dumps(value, separators=(',', ':'))}`"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _variables(name: str, field: FieldInfo) -> str:
    names = [f"REBALANCER_{name.upper()}"]
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        for choice in alias.choices:
            if isinstance(choice, str) and choice.upper() == choice and choice not in names:
                names.append(choice)
    first, *others = names
    text = f"`{first}`"
    if others:
        text += " (or " + ", ".join(f"`{o}`" for o in others) + ")"
    return text


def settings_table(cls: type[Any]) -> str:
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for name, field in setting_fields(cls).items():
        description = (field.description or "").replace("|", "\\|")
        flag = f"`--{name.replace('_', '-')}`"
        rows.append(f"| {_variables(name, field)} | {flag} | {_default(field)} | {description} |")
    return "\n".join(rows)


def settings_doc() -> str:
    return "\n".join(
        [
            HEADER,
            "## Agent (`rebalancer agent`)",
            "",
            settings_table(AgentSettings),
            "",
            "## Controller (`rebalancer controller`)",
            "",
            settings_table(ControllerSettings),
            "",
        ]
    )


def main() -> int:
    SETTINGS_DOC.write_text(settings_doc())
    print(f"wrote {SETTINGS_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

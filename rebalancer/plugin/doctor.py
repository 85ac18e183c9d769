"""`kubectl spot-rebalancer doctor`: the controller's checks (`controller/checkup.py`) over the
plugin's view, as one JSON document or as text. Pure.

The plugin sees one thing the controller does not: the cluster autoscaler's status in
kube-system, so on-demand pools kept at zero are checked here only. Whatever could not be read
is listed under `problems`, and the checks that needed it were skipped.
"""

from __future__ import annotations

import textwrap
from typing import Any

from rebalancer.controller.checkup import ERROR, SEVERITIES, Finding, diagnose
from rebalancer.plugin.terminal import printable_document
from rebalancer.plugin.view import View

Json = dict[str, Any]


def findings_of(view: View) -> list[Finding]:
    return diagnose(view.setup())


def report(view: View, findings: list[Finding]) -> Json:
    return {
        "findings": [finding.to_json() for finding in findings],
        "summary": {
            severity: sum(1 for f in findings if f.severity == severity) for severity in SEVERITIES
        },
        "problems": list(view.problems),
    }


def failed(findings: list[Finding]) -> bool:
    """Whether the command should exit non-zero: an error-level finding."""
    return any(finding.severity == ERROR for finding in findings)


def render(document: Json, *, headers: bool = True) -> str:
    """The findings as text; `headers=False` leaves out the summary line (a first line of
    `--no-headers` output is a finding or nothing). Control characters from the cluster are
    escaped (the YAML keeps its lines: `yaml.safe_dump` escapes those in the values it writes)."""
    document = printable_document(document, multiline=("yaml",))
    findings = document["findings"]
    summary = document["summary"]
    if findings:
        counts = ", ".join(
            f"{n} {severity}{'s' if n != 1 else ''}" for severity, n in summary.items()
        )
        heading = f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({counts})"
    else:
        heading = "No misconfiguration found."
    lines = [heading] if headers else []
    for finding in findings:
        target = finding["object"]
        where = f"{target['namespace']}/{target['name']}" if target["namespace"] else target["name"]
        lines += [
            *([""] if lines else []),
            f"{finding['severity'].upper()}  {finding['id']}  {target['kind']} {where}",
            *_wrapped("what", finding["what"]),
            *_wrapped("why", finding["why"]),
            *_wrapped("fix", finding["fix"]),
        ]
        if finding["yaml"]:
            lines.append("  yaml:")
            lines += [f"    {line}" for line in finding["yaml"].rstrip("\n").splitlines()]
        if finding["command"]:
            lines.append(f"  run:  {finding['command']}")
    if document["problems"]:
        lines += [*([""] if lines else []), "NOTES"]
        lines += [f"- {problem}" for problem in document["problems"]]
    return "\n".join(lines) + "\n" if lines else ""


def _wrapped(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text,
        width=100,
        initial_indent=f"  {label + ':':<6}",
        subsequent_indent=" " * 8,
        break_on_hyphens=False,
    )

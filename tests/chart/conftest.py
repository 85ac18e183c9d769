"""Real tools for the chart tests, installed by scripts/install-tools (never mocked, never skipped).

The `tools` fixture runs the install script once per session; when a tool cannot be installed
every test that needs it fails with the script's error, so a missing tool can never pass
silently as a skip.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.generated import CHART, helm_environment

HELM_VERSIONS = ("helm4", "helm3")


@dataclass(frozen=True)
class Tools:
    env: dict[str, str]

    def path(self, name: str) -> str:
        return self.env[name]

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, check=False, timeout=120
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def helm(
        self, version: str, *args: str, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.env[version.upper()], *args, check=check)

    def template(
        self,
        *args: str,
        helm: str = "helm4",
        release: str = "spot-rebalancer",
        namespace: str = "spot-rebalancer",
    ) -> list[dict[str, Any]]:
        """`helm template` of the chart; the rendered objects (empty documents dropped)."""
        out = self.helm(helm, "template", release, str(CHART), "-n", namespace, *args, check=True)
        return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        return Tools(helm_environment())
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)


def by_kind(objects: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(objects, kind)
    return found


def of_component(objects: Sequence[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    """The one object of a kind that belongs to a component (agent or controller)."""
    (found,) = [
        obj
        for obj in by_kind(objects, kind)
        if obj["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


def write_yaml(path: Path, objects: Sequence[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path

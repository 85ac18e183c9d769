"""The Dockerfile (linted by the real hadolint; no image can be built here) and version agreement."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from rebalancer import __version__
from tests.chart.conftest import Tools
from tests.chart.generated import CHART, ROOT

pytestmark = pytest.mark.chart

DOCKERFILE = ROOT / "Dockerfile"


def test_hadolint_passes(tools: Tools) -> None:
    # The default failure threshold fails on any finding, down to "info" and "style".
    result = tools.run(tools.path("HADOLINT"), "--failure-threshold", "style", str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tools: Tools, tmp_path: Path) -> None:
    """The linter really runs: an untagged base and an unpinned apt-get install are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    result = tools.run(tools.path("HADOLINT"), str(bad))
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3008" in result.stdout


def stages(text: str) -> list[list[str]]:
    """Instructions of each build stage, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line.strip() for line in joined.splitlines()]
    result: list[list[str]] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            result.append([])
        if result:
            result[-1].append(line)
    return result


def test_final_stage_is_the_venv_only_non_root_and_one_entry_point() -> None:
    text = DOCKERFILE.read_text()
    base, builder, final = stages(text)
    assert re.match(r"FROM python:3\.11\.\d+-slim-bookworm AS base$", base[0])
    assert builder[0] == "FROM base AS builder" and final[0] == "FROM base"
    assert not [line for line in final if line.startswith("RUN")]  # nothing built or installed
    copies = [line for line in final if line.startswith("COPY")]
    assert copies == ["COPY --from=builder /opt/rebalancer /opt/rebalancer"]
    assert "USER 65532:65532" in final
    assert 'ENTRYPOINT ["rebalancer"]' in final
    labels = " ".join(line for line in final if line.startswith("LABEL"))
    for key in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert "digest" in text.lower()  # the pin-by-digest note


def test_dockerignore_is_an_allow_list_of_what_the_build_copies() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied: set[str] = set()
    for line in stages(DOCKERFILE.read_text())[1]:
        if line.startswith("COPY") and "--from" not in line:
            copied.update(part.rstrip("/") for part in line.split()[1:-1])
    assert copied == allowed


def test_versions_agree() -> None:
    """One version everywhere: package, chart appVersion (the default image tag), image label."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    dockerfile_version = re.search(r"^ARG VERSION=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert dockerfile_version is not None
    assert (
        pyproject["project"]["version"]
        == __version__
        == chart["appVersion"]
        == dockerfile_version.group(1)
    )

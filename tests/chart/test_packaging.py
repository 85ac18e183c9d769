"""The Dockerfile (linted by the real hadolint), its pinned base, the lock files, version agreement.

The image itself is built and run in tests/image (buildah, needs root)."""

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
    assert base[0] == "FROM ${BASE_IMAGE} AS base"
    assert builder[0] == "FROM base AS builder" and final[0] == "FROM base"
    assert not [line for line in final if line.startswith("RUN")]  # nothing built or installed
    copies = [line for line in final if line.startswith("COPY")]
    assert copies == ["COPY --from=builder /opt/rebalancer /opt/rebalancer"]
    assert "USER 65532:65532" in final
    assert 'ENTRYPOINT ["rebalancer"]' in final
    labels = " ".join(line for line in final if line.startswith("LABEL"))
    for key in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def test_the_default_base_is_pinned_by_digest() -> None:
    """The upstream base by digest (a tag can move under us); BASE_IMAGE only substitutes it."""
    args = re.findall(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert len(args) == 1
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", args[0]), args[0]
    # The label names the same upstream tag as the pin.
    label = re.search(r'org\.opencontainers\.image\.base\.name="([^"]+)"', DOCKERFILE.read_text())
    assert label is not None and args[0].startswith(label.group(1) + "@sha256:")


def locked(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, sha256 hashes) of a pip-compile --generate-hashes file."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    joined = re.sub(r"\\\n\s*", " ", path.read_text())
    for line in joined.splitlines():
        if not line or line[0].isspace() or line.startswith("#"):
            continue
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        hashes = frozenset(
            o.removeprefix("--hash=sha256:") for o in options if o.startswith("--hash=")
        )
        assert version and hashes, f"{path.name}: {line!r} is not pinned with hashes"
        pins[re.sub(r"[-_.]+", "-", name.lower())] = (version, hashes)
    return pins


LOCKS = ("requirements.lock", "requirements-build.lock", "requirements-test.lock")


@pytest.mark.parametrize("lock", LOCKS)
def test_lock_files_pin_every_package_with_hashes(lock: str) -> None:
    pins = locked(ROOT / lock)
    assert pins
    assert all(len(digest) == 64 for _, hashes in pins.values() for digest in hashes)


def test_the_runtime_lock_covers_every_dependency_and_agrees_with_the_test_lock() -> None:
    """Every runtime dependency of pyproject.toml is locked, and CI (requirements-test.lock) runs
    the very versions and files the image installs."""
    runtime, build, test = (locked(ROOT / lock) for lock in LOCKS)
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in dependencies:
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", dependency)[0].lower())
        assert name in runtime, name
    for name, pin in {**runtime, **build}.items():
        assert test.get(name) == pin, name


def test_the_image_installs_from_the_locks_with_hashes_only() -> None:
    text = re.sub(r"\s*\\\n\s*", " ", DOCKERFILE.read_text())
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert len(installs) == 1
    assert (
        "--require-hashes --no-deps -r requirements.lock -r requirements-build.lock" in installs[0]
    )
    # Our own package: no dependency resolution, no index, no build backend fetched on the side.
    assert "pip install --no-deps --no-build-isolation --no-index ." in installs[0]


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

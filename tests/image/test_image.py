"""The container image, built for real from the Dockerfile and run as its non-root user.

scripts/build-image builds the real Dockerfile with buildah on a stand-in base (a debootstrapped
Debian bookworm with Python 3.11: no registry serves base images on these machines). The image is
then run the way Kubernetes runs it: its own ENTRYPOINT and USER, read from the image config.
It must carry the product only: the emulator and the demo (the developer package
spot-rebalancer-sim) are not in it, and `rebalancer demo` says so in one line.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chart.generated import ROOT, helm_environment

pytestmark = pytest.mark.image

STORAGE = ROOT / ".cache" / "image"


@dataclass(frozen=True)
class Image:
    """The built image and one working container of it (a vfs container copies the whole image,
    so the tests share one; none of them writes to it)."""

    name: str
    buildah: str
    config: dict[str, object]
    container: str = ""

    def buildah_command(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [
            self.buildah,
            "--root",
            str(STORAGE / "storage"),
            "--runroot",
            str(STORAGE / "run"),
            "--storage-driver",
            "vfs",
            *args,
        ]
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "BUILDAH_ISOLATION": "chroot"},
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`docker run IMAGE args...`: the image's own entry point and user."""
        entrypoint = self.config.get("Entrypoint") or []
        assert isinstance(entrypoint, list)
        return self.exec(*entrypoint, *args, user=str(self.config["User"]))

    def exec(self, *command: str, user: str = "65532:65532") -> subprocess.CompletedProcess[str]:
        """Any command in the image, as the given user."""
        return self.buildah_command("run", "--user", user, self.container, "--", *command)


def ours(stderr: str) -> list[str]:
    """stderr without the lines buildah adds when a command exits non-zero."""
    return [
        line
        for line in stderr.strip().splitlines()
        if not line.startswith(("subprocess exited with status", "Error: exit status"))
    ]


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    env = helm_environment()  # scripts/install-tools: buildah and debootstrap among the tools
    result = subprocess.run(
        [str(ROOT / "scripts" / "build-image")],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env=env,
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/build-image failed:\n{result.stderr[-4000:]}", pytrace=False)
    built = Image(name=result.stdout.strip().splitlines()[-1], buildah=env["BUILDAH"], config={})
    inspected = built.buildah_command("inspect", "--type", "image", built.name)
    assert inspected.returncode == 0, inspected.stderr
    config = json.loads(inspected.stdout)["OCIv1"]["config"]
    container = built.buildah_command("from", "--pull=never", built.name)
    assert container.returncode == 0, container.stderr
    name = container.stdout.strip()
    try:
        yield Image(name=built.name, buildah=built.buildah, config=config, container=name)
    finally:
        built.buildah_command("rm", name)


def test_runs_as_the_numeric_non_root_user_with_one_entry_point(image: Image) -> None:
    assert image.config["User"] == "65532:65532"
    assert image.config["Entrypoint"] == ["rebalancer"]
    result = image.run("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"rebalancer {_project_version()}"
    assert image.exec("id", "-u").stdout.strip() == "65532"


@pytest.mark.parametrize("command", ["agent", "controller"])
def test_both_processes_start_their_command_line(image: Image, command: str) -> None:
    result = image.run(command, "--help")
    assert result.returncode == 0, result.stderr
    assert f"usage: rebalancer {command}" in result.stdout


def test_the_emulator_is_not_in_the_image(image: Image) -> None:
    imported = image.exec("python", "-c", "import rebalancer_sim")
    assert imported.returncode != 0
    assert "No module named 'rebalancer_sim'" in imported.stderr
    files = image.exec(
        "sh",
        "-c",
        "find / -xdev \\( -name 'rebalancer_sim*' -o -path '*/rebalancer/sim' \\) -print",
        user="0:0",  # to see every folder
    )
    assert files.returncode == 0 and files.stdout == "", files.stdout + files.stderr


@pytest.mark.parametrize("command", [["demo"], ["sim", "serve", "aks-gpu-small"]])
def test_developer_commands_say_in_one_line_they_are_not_in_this_image(
    image: Image, command: list[str]
) -> None:
    result = image.run(*command)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = ours(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"rebalancer: `{command[0]}` is a developer command, not in this image"
    )


def test_the_venv_holds_exactly_the_locked_packages(image: Image) -> None:
    """What pip installed in the image is what requirements.lock pins, plus our own package."""
    locked = _locked_versions(ROOT / "requirements.lock")
    listing = image.exec(
        "python",
        "-c",
        "import importlib.metadata as m, json;"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))",
    )
    assert listing.returncode == 0, listing.stderr
    installed = {_normalise(name): version for name, version in json.loads(listing.stdout).items()}
    assert installed.pop("spot-rebalancer") == _project_version()
    assert installed == locked


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _locked_versions(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and "==" in line:
            name, _, version = line.split(" ")[0].partition("==")
            pins[_normalise(name)] = version
    return pins


def _project_version() -> str:
    import tomllib

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])

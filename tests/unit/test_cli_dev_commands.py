"""`rebalancer demo` and `rebalancer sim` hand over to the developer package, or say it is absent."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from rebalancer import cli


def test_dev_commands_reach_the_developer_package(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake = ModuleType("rebalancer_sim.cli")
    fake.main = lambda argv: seen.append(list(argv)) or 0  # type: ignore[attr-defined]
    monkeypatch.setattr(importlib, "import_module", lambda name: fake)
    assert cli.main(["sim", "serve", "wave", "--port", "0"]) == 0
    assert cli.main(["demo", "--notice-seconds", "5"]) == 0
    assert seen == [["sim", "serve", "wave", "--port", "0"], ["demo", "--notice-seconds", "5"]]


@pytest.mark.parametrize("command", [["demo"], ["sim", "imds"]])
def test_without_the_developer_package_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    def absent(name: str) -> Any:
        raise ModuleNotFoundError(f"No module named {name!r}", name="rebalancer_sim")

    monkeypatch.setattr(importlib, "import_module", absent)
    assert cli.main(command) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"rebalancer: `{command[0]}` is a developer command, not in this image")
    assert "spot-rebalancer-sim" in err


def test_a_broken_developer_package_is_not_reported_as_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["demo"])


def test_the_help_lists_the_developer_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "demo Run the demo" in out and "sim Emulators" in out and "not in the image" in out

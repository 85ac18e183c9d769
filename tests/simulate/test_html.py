"""The HTML report in a real headless Chromium: it renders to a screenshot, and the page logs
nothing to the console (no scripts, no external resources that could fail to load).

Chromium comes from scripts/install-tools (Debian's `chromium`, exported as CHROMIUM); without it
the test fails, it does not skip.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rebalancer.cli import main

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "chromium"


def render(page: Path, screenshot: Path, profile: Path) -> list[str]:
    """Screenshot `page`; the console lines Chromium logged for it."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} not found: run scripts/install-tools", pytrace=False)
    profile.mkdir()
    completed = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,1600",
            f"--screenshot={screenshot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return [line for line in completed.stderr.splitlines() if ":CONSOLE" in line]


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_the_report_renders_without_console_errors(
    write_trace: Callable[..., Path], tmp_path: Path
) -> None:
    a = write_trace("zone-a", [4, 4, 1, 0, 0, 3, 4, 4, 2, 4] * 20, gap_seconds=300)
    b = write_trace("zone-b", [2, 0, 2, 2, 1, 2, 2, 0, 2, 2] * 20, gap_seconds=300)
    page = tmp_path / "report.html"
    assert main(["simulate", "--trace", str(a), "--trace", str(b), "--html", str(page)]) == 0
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    for policy in ("on-demand", "spot-drain", "failover", "spothedge"):
        assert f"{policy} Ready" in text  # one timeline strip per policy
    screenshot = tmp_path / "report.png"
    console = render(page, screenshot, tmp_path / "profile")
    assert console == []
    assert png_size(screenshot) == (1200, 1600)


def test_the_console_check_sees_an_error(tmp_path: Path) -> None:
    """The check above can fail: a page with a script error is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>notDefined();</script>")
    console = render(page, tmp_path / "broken.png", tmp_path / "profile")
    assert any("notDefined is not defined" in line for line in console)

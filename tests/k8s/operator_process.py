"""A controller binary (Karpenter's, KEDA's operator) run as a process beside the real control
plane, as the cluster admin: its log in the test's workdir, ready when its health probe says so."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tests.controlplane import ControlPlane
from tests.helpers import free_port

READY_SECONDS = 60


@dataclass
class OperatorProcess:
    plane: ControlPlane
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    health_port: int = 0
    name: ClassVar[str] = "operator"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def launch(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """Start it (its health probe on `self.health_port`, taken here first: `argv` and `env`
        come from a callable that reads it) and wait until it is ready."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                list(argv), env=dict(env), stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + READY_SECONDS
        while not self.ready():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited ({self.process.returncode}):\n{self.log()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} not ready in {READY_SECONDS} s:\n{self.log()[-3000:]}"
                )
            time.sleep(0.2)

    def new_health_port(self) -> int:
        self.health_port = free_port()
        return self.health_port

    def check_running(self) -> None:
        assert self.process is not None and self.process.poll() is None, (
            f"{self.name} exited:\n{self.log()[-3000:]}"
        )

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

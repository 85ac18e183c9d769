"""A real OCI registry on 127.0.0.1 for the release tests: CNCF distribution's registry (Debian's
`docker-registry`, which scripts/install-tools installs), serving plain HTTP on a free port with
its storage in a temporary folder. Started and stopped by the test that needs it."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT, as image references and oci:// URLs name it
    log: Path


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@contextmanager
def running_registry(binary: str, folder: Path) -> Iterator[Registry]:
    port = free_port()
    config = folder / "config.yml"
    config.write_text(CONFIG.format(storage=folder / "storage", port=port))
    log = folder / "registry.log"
    # No telemetry export: distribution v3 traces with OpenTelemetry when an exporter is set
    # (REGISTRY may name one).
    env = {"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "none"}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [binary, "serve", str(config)], stdout=output, stderr=subprocess.STDOUT, env=env
        )
    try:
        registry = Registry(host=f"127.0.0.1:{port}", log=log)
        deadline = time.monotonic() + 30
        # The distribution API's base endpoint answers 200 once the registry serves.
        while not _answers(f"http://{registry.host}/v2/"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the registry did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield registry
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

"""A free port on 127.0.0.1 for a process that binds it later; standard library only, so that
`tests/cluster/start.sh` runs it with any python3 (`python3 tests/ports.py` prints one).

Taken below the kernel's ephemeral range: a port from bind(0) is in that range, where any client
connection of any process (pytest-xdist runs several) may take it as its source port before our
server binds it. Between the check and the server's bind the port is free for anyone, so each
pytest-xdist worker draws from its own share of the range (another worker's server cannot take
it meanwhile: CI saw one do so), and a process never hands out a port twice in a row of
`_REMEMBERED` or half its share (a second caller would find a port handed out but not yet bound free too)."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_REMEMBERED = 2000
_given: list[int] = []


def free_port() -> int:
    low = _ephemeral_low()
    start, end = _share(max(1024, low - 12_000), low)
    for _ in range(200):
        port = random.randrange(start, end)
        if port in _given:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.append(port)
        del _given[: -min(_REMEMBERED, (end - start) // 2)]
        return port
    raise RuntimeError(f"no free port in {start}-{end}")


def _share(start: int, end: int) -> tuple[int, int]:
    """This pytest-xdist worker's part of [start, end) ("gw1" of 3: the second third)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        index = int(worker.removeprefix("gw"))
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", ""))
    except ValueError:
        return start, end
    if not 0 <= index < count:
        return start, end
    size = (end - start) // count
    return start + index * size, start + (index + 1) * size


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


if __name__ == "__main__":
    print(free_port())

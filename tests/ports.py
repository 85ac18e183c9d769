"""A free port on 127.0.0.1 for a process that binds it later; standard library only, so that
`tests/cluster/start.sh` runs it with any python3 (`python3 tests/ports.py` prints one).

Taken below the kernel's ephemeral range: a port from bind(0) is in that range, where any client
connection of any process (pytest-xdist runs several) may take it as its source port before our
server binds it."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below {low}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


if __name__ == "__main__":
    print(free_port())

"""`rebalancer sim serve|imds` refuse what they cannot do in one line and exit 2: a port that is
not a port, a port already in use (no traceback, nothing left listening)."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest


async def _run(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rebalancer.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["serve", "free-room", "--port", "99999"],
            "argument --port: 99999 is not a port (0 to 65535)",
        ),
        (
            ["serve", "free-room", "--imds-port", "x"],
            "argument --imds-port: not a port number: 'x'",
        ),
        (["imds", "--port", "-1"], "argument --port: -1 is not a port (0 to 65535)"),
    ],
)
async def test_a_bad_port_is_one_line(args: list[str], message: str) -> None:
    code, out, err = await _run("sim", *args)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1].endswith(f"error: {message}")


@pytest.mark.parametrize("flag", ["--port", "--imds-port"])
async def test_a_port_in_use_is_one_line(flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = await _run("sim", "serve", "free-room", flag, str(port))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"rebalancer: error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use"
    ]


async def test_imds_on_a_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await _run("sim", "imds", "--port", str(port))
    assert code == 2
    assert err.splitlines() == [
        f"rebalancer: error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use"
    ]

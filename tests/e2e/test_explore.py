"""Exploring by hand, as docs/emulator.md tells a user to: `rebalancer sim serve SCENARIO
--with-rebalancer` runs the emulated cluster with the real agents and controller and prints
what to type; the printed Preempt (curl to the IMDS control API), run as printed, is carried
out by the emulated cloud after the controller has acted; kubectl shows all of it."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from tests.e2e.rig import scenario
from tests.helpers import KUBECTL

pytestmark = pytest.mark.e2e


async def _kubectl(kubeconfig: Path, home: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        env=dict(os.environ, KUBECONFIG=str(kubeconfig), HOME=str(home)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def _read_until(stream: asyncio.StreamReader, prefix: str, lines: list[str]) -> str:
    """Read the serve command's output until a line starting with `prefix`; that line."""
    while True:
        raw = await asyncio.wait_for(stream.readline(), 60)
        assert raw, f"serve exited early: {lines}"
        line = raw.decode().rstrip("\n")
        lines.append(line)
        if line.startswith(prefix):
            return line


async def _eventually(
    predicate: Callable[[], Awaitable[bool]], *, within: float, what: str
) -> None:
    """Poll an async check (a kubectl run) in real time, bounded."""
    deadline = asyncio.get_running_loop().time() + within
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.2)


def _value(lines: list[str], label: str) -> str:
    return next(line for line in lines if line.startswith(f"  {label}:")).split(":", 1)[1].strip()


async def test_serve_with_rebalancer_and_the_printed_preempt(tmp_path: Path) -> None:
    world = tmp_path / "world.yaml"
    world.write_text(yaml.safe_dump(scenario()))
    kube = tmp_path / "kube"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rebalancer.cli", "sim", "serve", str(world),
        "--with-rebalancer", "--kubeconfig-dir", str(kube),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    try:
        await _read_until(process.stdout, "  stop:", lines)
        kubeconfig = kube / "kubeconfig"
        assert _value(lines, "kubeconfig") == str(kubeconfig)
        assert f"  rebalancer:  agents and controller starting; logs in {kube / 'logs'}" in lines
        assert "  rebalancer:  3 agent(s) reported in, the controller leads" in lines
        preempt = _value(lines, "preempt")
        (vm,) = json.loads(shlex.split(preempt)[-1])["resources"]
        vms = dict(pair.split(" = ")[::-1] for pair in _value(lines, "spot VMs").split(", "))
        doomed = vms[vm]
        code, out = await _kubectl(kubeconfig, tmp_path, "get", "node", doomed, "-o", "json")
        assert code == 0, out
        assert json.loads(out)["spec"]["providerID"].endswith("/" + vm.rsplit("_", 1)[1])

        # The documented command, run as printed.
        shell = await asyncio.create_subprocess_shell(
            preempt, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out_bytes, _ = await asyncio.wait_for(shell.communicate(), 30)
        assert shell.returncode == 0, out_bytes
        assert json.loads(out_bytes)["state"] == "scheduled"

        async def node_gone() -> bool:
            code, out = await _kubectl(kubeconfig, tmp_path, "get", "node", doomed)
            return code == 1 and "NotFound" in out

        # Before NotBefore (30 s): the controller drains, the agent acknowledges, Azure takes
        # the VM at once.
        await _eventually(node_gone, within=30, what=f"{doomed} deleted")

        code, out = await _kubectl(
            kubeconfig, tmp_path, "get", "events", "-A", "--sort-by=.lastTimestamp"
        )
        assert code == 0, out
        header, *rows = out.splitlines()
        assert header.split()[:4] == ["NAMESPACE", "LAST", "SEEN", "TYPE"]
        on_doomed = {row.split()[3] for row in rows if row.split()[4] == f"node/{doomed}"}
        assert {"SpotRebalancerCordoned", "SpotRebalancerDrained"} <= on_doomed, out

        async def replicas_ready() -> bool:
            code, out = await _kubectl(
                kubeconfig, tmp_path, "get", "deployment", "llm", "-n", "inference", "-o", "json"
            )
            return code == 0 and json.loads(out)["status"].get("readyReplicas") == 3

        await _eventually(replicas_ready, within=30, what="3 replicas Ready again")
    finally:
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0, lines

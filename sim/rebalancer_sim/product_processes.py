"""The product's own processes against an emulated cluster, as the chart would place them.

One `rebalancer agent` per spot node whose VM runs (the chart's DaemonSet selects
`kubernetes.azure.com/scalesetpriority: spot`): started when such a node appears, stopped when
its VM goes down or its Node is deleted (the pod dies with the VM), started again when a
rebooted VM is back. One `rebalancer controller` (the chart's leader). Each is a real
subprocess of this Python (`python -m rebalancer.cli`), logging JSON into `workdir`.

Used by `rebalancer demo` and `rebalancer sim serve --with-rebalancer`. The test rigs
(`tests/e2e/rig.py`) start their own, with per-test settings and ports.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from rebalancer import names
from rebalancer_sim import resources as R
from rebalancer_sim.cluster import ClusterEmulator

CONTROLLER = "controller-0"
# Where the controller keeps its Lease and records (the chart's release namespace).
CONTROLLER_NAMESPACE = "default"
LEASE_NAME = "spot-rebalancer-controller"


class RebalancerProcesses:
    def __init__(
        self,
        cluster: ClusterEmulator,
        workdir: Path,
        *,
        controller_env: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.controller_env = controller_env or {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}  # by node name
        self.controller: subprocess.Popen[bytes] | None = None
        self._stopping: list[subprocess.Popen[bytes]] = []  # sent SIGTERM, not yet reaped

    def _spawn(
        self, args: list[str], env: dict[str, str], log_name: str
    ) -> subprocess.Popen[bytes]:
        with (self.workdir / log_name).open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "rebalancer.cli", *args],
                env={
                    **os.environ,
                    "PYTHONUNBUFFERED": "1",
                    "REBALANCER_KUBECONFIG": str(self.cluster.kubeconfig_path),
                    "REBALANCER_LOG_FORMAT": "json",
                    "REBALANCER_HTTP_HOST": "127.0.0.1",
                    "REBALANCER_HTTP_PORT": "0",
                    **env,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def spot_nodes(self) -> list[str]:
        """Spot nodes whose VM runs: where the agent DaemonSet has a running pod."""
        return sorted(
            node["metadata"]["name"]
            for node in self.cluster.store.items(R.NODES)
            if (node["metadata"].get("labels") or {}).get(names.AKS_SPOT_LABEL) == "spot"
            and self.cluster.cloud.node_runs(node["metadata"]["name"])
        )

    def sync(self) -> None:
        """Agents follow the spot nodes, as a DaemonSet's pods do."""
        wanted = set(self.spot_nodes())
        for node_name in sorted(set(self.agents) - wanted):
            process = self.agents.pop(node_name)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            self._stopping.append(process)
        self._stopping = [p for p in self._stopping if p.poll() is None]
        for node_name in sorted(wanted - set(self.agents)):
            self.agents[node_name] = self._spawn(
                ["agent"],
                {
                    "NODE_NAME": node_name,
                    "REBALANCER_IMDS_URL": self.cluster.imds_url_for(node_name),
                },
                f"agent-{node_name}.log",
            )

    def start(self) -> None:
        self.sync()
        if self.controller is None:
            self.controller = self._spawn(
                ["controller"],
                {
                    "REBALANCER_NAMESPACE": CONTROLLER_NAMESPACE,
                    "REBALANCER_IDENTITY": CONTROLLER,
                    **self.controller_env,
                },
                "controller.log",
            )

    def exited(self) -> list[str]:
        """Processes that stopped on their own (a crash, a bad setting): their log names."""
        gone = [f"agent-{n}.log" for n, p in self.agents.items() if p.poll() is not None]
        if self.controller is not None and self.controller.poll() is not None:
            gone.append("controller.log")
        return gone

    def reported_in(self) -> bool:
        """Every agent published its condition on its Node, and the controller leads."""
        for node_name in self.agents:
            node = self.cluster.store.get(R.NODES, "", node_name)
            conditions = (node or {}).get("status", {}).get("conditions") or []
            if not any(c["type"] == names.CONDITION_TYPE for c in conditions):
                return False
        lease = self.cluster.store.get(R.LEASES, CONTROLLER_NAMESPACE, LEASE_NAME)
        return bool(lease and (lease.get("spec") or {}).get("holderIdentity"))

    async def stop(self, *, grace_seconds: float = 10.0) -> None:
        """SIGTERM to all, then wait for them while the emulator keeps serving (a process may
        still talk to the API as it stops); SIGKILL to those still running after the grace."""
        processes = [
            *self.agents.values(),
            *([self.controller] if self.controller else []),
            *self._stopping,
        ]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        # Waited for in threads: the event loop, and the emulator with it, keeps serving.
        await asyncio.gather(*(asyncio.to_thread(_wait, p, grace_seconds) for p in processes))
        self.agents.clear()
        self._stopping.clear()
        self.controller = None


def _wait(process: subprocess.Popen[bytes], grace_seconds: float) -> None:
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

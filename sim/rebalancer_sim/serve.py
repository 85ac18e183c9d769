"""`rebalancer sim ...`: run an emulator standalone until interrupted; with
`--with-rebalancer`, the agents and the controller run against the emulated cluster too, so a
person can explore with kubectl and the IMDS control API (docs/emulator.md, "Explore")."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from rebalancer.process import run_until_signalled, sleep_or_stop
from rebalancer_sim.cluster import ClusterEmulator, ClusterUrls
from rebalancer_sim.imds import ImdsEmulator
from rebalancer_sim.product_processes import RebalancerProcesses
from rebalancer_sim.scenario import ScenarioError, load_scenario

SYNC_SECONDS = 0.5  # how often the agents follow the spot nodes (a DaemonSet's reaction)


def _cannot_listen(error: OSError) -> None:
    """A port in use or an address not on this machine: one line, exit 2 (no traceback)."""
    print(f"rebalancer: {error.strerror or error}", file=sys.stderr, flush=True)


def serve_imds(*, host: str, port: int) -> int:
    failed = False

    async def main(stop: asyncio.Event) -> None:
        nonlocal failed
        emulator = ImdsEmulator()
        runner = web.AppRunner(emulator.app(), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as error:
            failed = True
            _cannot_listen(error)
            await runner.cleanup()
            return
        base = f"http://{host}:{port}"
        print(f"IMDS emulator on {base}", flush=True)
        print(f"  a VM's IMDS base URL:  {base}/vms/<vm-name>", flush=True)
        print(f"  control API:           {base}/control/events  (POST to schedule)", flush=True)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    code = run_until_signalled(main)
    return 2 if failed else code


def serve_cluster(
    scenario: str,
    *,
    host: str,
    port: int,
    imds_port: int,
    kubeconfig_dir: str | None,
    with_rebalancer: bool = False,
) -> int:
    """Run a scenario's emulated cluster until interrupted; print where to point kubectl."""
    try:
        loaded = load_scenario(scenario)
    except ScenarioError as error:
        print(f"rebalancer: scenario: {error}", file=sys.stderr)
        return 2
    if kubeconfig_dir is not None:
        # Made if missing, as kubectl makes ~/.kube; refused in one line if it cannot be.
        try:
            Path(kubeconfig_dir).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            print(f"rebalancer: --kubeconfig-dir {kubeconfig_dir}: {reason}", file=sys.stderr)
            return 2

    failed = False

    async def main(stop: asyncio.Event) -> None:
        nonlocal failed
        cluster = ClusterEmulator(loaded)
        try:
            urls = await cluster.start(
                host, port, imds_port=imds_port, kubeconfig_dir=kubeconfig_dir
            )
        except OSError as error:
            failed = True
            _cannot_listen(error)
            await cluster.stop()
            return
        print(f"cluster emulator '{loaded.name}' on {urls.api}", flush=True)
        print(f"  kubeconfig:  {urls.kubeconfig}", flush=True)
        print(f"  try:         KUBECONFIG={urls.kubeconfig} kubectl get nodes", flush=True)
        print(f"  IMDS:        {urls.imds}/vms/<vm-name>/metadata/scheduledevents", flush=True)
        print(f"  nodes: {len(cluster.nodes())}  pods: {len(cluster.pods())}", flush=True)
        try:
            if with_rebalancer:
                # Beside the kubeconfig when the user chose where, else a new directory kept.
                if kubeconfig_dir is not None:
                    logs = Path(kubeconfig_dir) / "logs"
                    logs.mkdir(exist_ok=True)
                else:
                    logs = Path(tempfile.mkdtemp(prefix="rebalancer-sim-"))
                await run_rebalancer(cluster, logs, stop)
            else:
                await stop.wait()
        finally:
            await cluster.stop()

    code = run_until_signalled(main)
    return 2 if failed else code


async def run_rebalancer(
    cluster: ClusterEmulator,
    workdir: Path,
    stop: asyncio.Event,
    *,
    processes: RebalancerProcesses | None = None,
) -> None:
    """The agents (one per running spot node, following them) and the controller against
    `cluster` until `stop` (started here unless `processes` already run); says how to explore
    once they have reported in."""
    told_ready = processes is not None
    if processes is None:
        processes = RebalancerProcesses(cluster, workdir)
        processes.start()
        print(f"  rebalancer:  agents and controller starting; logs in {workdir}", flush=True)
    told_exited: set[str] = set()
    try:
        while not stop.is_set():
            processes.sync()
            if not told_ready and processes.reported_in():
                told_ready = True
                for line in explore_lines(cluster, processes):
                    print(line, flush=True)
            for log in processes.exited():
                if log not in told_exited:
                    told_exited.add(log)
                    print(f"  rebalancer:  a process stopped; see {workdir / log}", flush=True)
            await sleep_or_stop(stop, SYNC_SECONDS)
    finally:
        await processes.stop()


def explore_lines(cluster: ClusterEmulator, processes: RebalancerProcesses) -> list[str]:
    """What to type to watch the rebalancer act, with this cluster's own names and ports."""
    urls: ClusterUrls | None = cluster.urls
    assert urls is not None, "the cluster is served"
    kubectl = f"KUBECONFIG={shlex.quote(str(urls.kubeconfig))} kubectl"
    lines = [
        f"  rebalancer:  {len(processes.agents)} agent(s) reported in, the controller leads",
    ]
    spot = processes.spot_nodes()
    if spot:
        body = json.dumps(
            {"type": "Preempt", "resources": [cluster.vm_name_for(spot[0])], "noticeSeconds": 30}
        )
        lines += [
            f"  spot VMs:    {', '.join(f'{n} = {cluster.vm_name_for(n)}' for n in spot)}",
            f"  preempt:     curl -s -X POST {urls.imds}/control/events -d {shlex.quote(body)}",
        ]
    lines += [
        f"  watch:       {kubectl} get nodes,pods -A -w",
        f"  events:      {kubectl} get events -A --sort-by=.lastTimestamp",
        "  stop:        Ctrl-C",
    ]
    return lines

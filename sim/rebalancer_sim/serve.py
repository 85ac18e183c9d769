"""`rebalancer sim ...`: run an emulator standalone until interrupted."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiohttp import web

from rebalancer.process import run_until_signalled
from rebalancer_sim.cluster import ClusterEmulator
from rebalancer_sim.imds import ImdsEmulator
from rebalancer_sim.scenario import ScenarioError, load_scenario


def serve_imds(*, host: str, port: int) -> int:
    async def main(stop: asyncio.Event) -> None:
        emulator = ImdsEmulator()
        runner = web.AppRunner(emulator.app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        base = f"http://{host}:{port}"
        print(f"IMDS emulator on {base}", flush=True)
        print(f"  a VM's IMDS base URL:  {base}/vms/<vm-name>", flush=True)
        print(f"  control API:           {base}/control/events  (POST to schedule)", flush=True)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    return run_until_signalled(main)


def serve_cluster(
    scenario: str, *, host: str, port: int, imds_port: int, kubeconfig_dir: str | None
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

    async def main(stop: asyncio.Event) -> None:
        cluster = ClusterEmulator(loaded)
        urls = await cluster.start(host, port, imds_port=imds_port, kubeconfig_dir=kubeconfig_dir)
        print(f"cluster emulator '{loaded.name}' on {urls.api}", flush=True)
        print(f"  kubeconfig:  {urls.kubeconfig}", flush=True)
        print(f"  try:         KUBECONFIG={urls.kubeconfig} kubectl get nodes", flush=True)
        print(f"  IMDS:        {urls.imds}/vms/<vm-name>/metadata/scheduledevents", flush=True)
        print(f"  nodes: {len(cluster.nodes())}  pods: {len(cluster.pods())}", flush=True)
        try:
            await stop.wait()
        finally:
            await cluster.stop()

    return run_until_signalled(main)

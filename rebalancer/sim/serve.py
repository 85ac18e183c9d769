"""`rebalancer sim ...`: run an emulator standalone until interrupted."""

from __future__ import annotations

import asyncio

from aiohttp import web

from rebalancer.process import run_until_signalled
from rebalancer.sim.imds import ImdsEmulator


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

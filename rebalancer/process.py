"""Running a long-lived process: signals, and a bounded, clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any

SHUTDOWN_SECONDS = 5.0


def run_until_signalled(
    main: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
    *,
    shutdown_seconds: float = SHUTDOWN_SECONDS,
) -> int:
    """Run `main(stop)` until it returns; SIGTERM or SIGINT set `stop`.

    `main` must return soon after `stop` is set; if it is still running `shutdown_seconds`
    later it is cancelled, so a stuck request never holds a pod's termination.
    """

    async def runner() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(main(stop))
        stop_wait = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), shutdown_seconds)
            except TimeoutError:
                task.cancel()
        stop_wait.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return 1
        return 0

    return asyncio.run(runner())


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less if `stop` is set meanwhile."""
    if seconds <= 0:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
